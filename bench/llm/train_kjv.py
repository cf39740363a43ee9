#!/usr/bin/python3
"""A small GPT-2-style decoder trained for a few minutes on the King James Bible, so that
`kiln generate --prompt` prints readable text (docs/llm.md "Text in, text out").

The text comes from Debian's bible-kjv (the `bible` command prints it; the King James
Version is in the public domain). The script
  1. writes the verses one per line (chapter headings and verse numbers dropped),
  2. trains a SentencePiece BPE tokenizer on them (python3-sentencepiece), ids: 0 <unk>,
     1 <s> (each verse starts with it), 2 </s>,
  3. trains the decoder (export_decoder.py's Decoder, gpt2 style) on 128-token windows of the
     verses for --minutes, printing the training and held-out loss,
  4. exports it with export_decoder.export (the segments Kiln runs and decoder.onnx) and puts
     the tokenizer beside it as tokenizer.model, with PyTorch's own greedy continuation of
     --prompt in reference.json to compare `kiln generate` with.

  bench/llm/train_kjv.py OUT_DIR [--minutes 15] [--threads 2]
  kiln generate OUT_DIR --prompt "And God said" --max-new-tokens 40
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import sentencepiece as spm
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_decoder as ed  # noqa: E402

CONFIG = dict(style="gpt2", vocab=2048, d_model=192, layers=4, heads=6, kv_heads=6, ffn=768, context=256)
WINDOW = 96


def verses():
    """The KJV as printed by `bible`, one verse per string."""
    text = subprocess.run(["bible", "gen1:1-rev22:21"], check=True, capture_output=True, text=True).stdout
    out, cur = [], None
    for line in text.splitlines():
        m = re.match(r"^\s+\d+ (.*)$", line)
        if m:
            if cur is not None:
                out.append(cur)
            cur = m.group(1).strip()
        elif line.strip() and cur is not None and not re.match(r"^\S.* \d+$", line):
            cur += " " + line.strip()
        elif line.strip():  # a heading ("Genesis 1"): ends the verse before it
            if cur is not None:
                out.append(cur)
            cur = None
    if cur is not None:
        out.append(cur)
    return out


OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3"


def use_openblas():
    """Debian's torch multiplies through the system BLAS; the reference BLAS (Debian's default
    without libopenblas0) runs this training ~8x slower. With libopenblas0-pthread installed,
    re-run under it for this process only (LD_PRELOAD), leaving the system's choice alone."""
    if os.path.exists(OPENBLAS) and OPENBLAS not in os.environ.get("LD_PRELOAD", ""):
        env = dict(os.environ, LD_PRELOAD=(OPENBLAS + " " + os.environ.get("LD_PRELOAD", "")).strip())
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    if not os.path.exists(OPENBLAS):
        print("train_kjv: libopenblas0-pthread is not installed: training runs on the reference BLAS, "
              "about 8x slower (apt-get install libopenblas0-pthread)", flush=True)


def main():
    use_openblas()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--minutes", type=float, default=15.0, help="training time (default 15)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompt", default="And God said", help="prompt of reference.json")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    random.seed(a.seed)
    torch.set_num_threads(a.threads)
    os.makedirs(a.out_dir, exist_ok=True)

    vs = verses()
    print(f"train_kjv: {len(vs)} verses, {sum(map(len, vs))} characters", flush=True)
    corpus = os.path.join(a.out_dir, "kjv.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(vs) + "\n")
    prefix = os.path.join(a.out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=CONFIG["vocab"],
                                   model_type="bpe", character_coverage=1.0, unk_id=0, bos_id=1,
                                   eos_id=2, pad_id=-1, num_threads=a.threads, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    ids = []
    for v in vs:
        ids += [sp.bos_id()] + sp.encode(v)
    data = torch.tensor(ids, dtype=torch.int64)
    split = int(len(data) * 0.95)  # the last 5% (the end of Revelation's book order) held out
    train, held = data[:split], data[split:]
    print(f"train_kjv: {len(data)} tokens, vocabulary {sp.get_piece_size()}", flush=True)

    model = ed.Decoder(dict(CONFIG))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, betas=(0.9, 0.95))
    batch, budget = 16, a.minutes * 60.0
    hd = CONFIG["d_model"] // CONFIG["heads"]

    def loss_of(x):
        b = x.shape[0]
        empty = [torch.zeros(b, CONFIG["kv_heads"], 0, hd) for _ in range(2 * CONFIG["layers"])]
        pos = torch.arange(WINDOW).unsqueeze(0).expand(b, WINDOW)
        logits = model(x[:, :-1], torch.ones(b, WINDOW, dtype=torch.int64), pos, *empty)[0]
        return F.cross_entropy(logits.reshape(-1, CONFIG["vocab"]), x[:, 1:].reshape(-1))

    def windows(src, n):
        starts = torch.randint(0, len(src) - WINDOW - 1, (n,))
        return torch.stack([src[s:s + WINDOW + 1] for s in starts.tolist()])

    start, step = time.time(), 0
    model.train()
    while time.time() - start < budget:
        frac = (time.time() - start) / budget
        for g in opt.param_groups:  # warm-up, then cosine decay over the time budget
            g["lr"] = 3e-3 * min(1.0, (step + 1) / 50) * 0.5 * (1 + math.cos(math.pi * frac))
        loss = loss_of(windows(train, batch))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                model.eval()
                hl = loss_of(windows(held, 32)).item()
                model.train()
            print(f"train_kjv: step {step:5d}  {time.time() - start:6.0f} s  train loss {loss.item():.3f}"
                  f"  held-out {hl:.3f}", flush=True)
        step += 1
    model.eval()
    with torch.no_grad():
        hl = float(np.mean([loss_of(windows(held, 32)).item() for _ in range(8)]))
    print(f"train_kjv: {step} steps of {batch}x{WINDOW} tokens; held-out loss {hl:.3f} "
          f"(perplexity {math.exp(hl):.1f})", flush=True)

    ed.export("kjv-small", a.out_dir, a.seed, past_kv=True, model=model)
    os.replace(prefix + ".model", os.path.join(a.out_dir, "tokenizer.model"))
    os.remove(prefix + ".vocab")
    os.remove(corpus)
    prompt = [sp.bos_id()] + sp.encode(a.prompt)
    tokens, _ = ed.greedy_reference(model, dict(CONFIG), prompt, 40)
    text = sp.decode(tokens[:tokens.index(sp.eos_id())] if sp.eos_id() in tokens else tokens)
    with open(os.path.join(a.out_dir, "reference.json"), "w") as f:
        json.dump({"prompt": a.prompt, "prompt_ids": prompt, "greedy_tokens": tokens, "text": text}, f, indent=1)
    print(f"train_kjv: PyTorch greedy from {a.prompt!r}: {text!r}")


if __name__ == "__main__":
    main()
