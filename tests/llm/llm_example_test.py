#!/usr/bin/env python3
"""examples/llm/generate.c (include/kiln/llm.h from C, through libkiln.so) on the tests'
gpt2-tiny decoder: four prompts decoded together; the tokens it streams through the callback and
the tokens it reads back both equal PyTorch's greedy decode (reference.json), the last of each
request flagged; a token id outside the vocabulary exits 1 with Kiln's message, a prompt that
is not a list of ids exits 2. With --tokenizer, text prompts (through kilnllmAddTextRequest)
continue as PyTorch continues <s> + SentencePiece's ids, and each request's printed text is the
binding's decode; a tokenizer larger than the model's vocabulary exits 1 naming both sizes.

usage: llm_example_test.py GENERATE_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys

NEW_TOKENS = 20


def main():
    binary, data = sys.argv[1], sys.argv[2]
    model = os.path.join(data, "gpt2-tiny")
    with open(os.path.join(model, "reference.json")) as f:
        ref = json.load(f)["sequences"][:4]
    prompts = [",".join(map(str, s["prompt"])) for s in ref]
    r = subprocess.run([binary, model, str(NEW_TOKENS)] + prompts, capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    streamed, final, last = {}, {}, {}
    for line in r.stdout.splitlines():
        words = line.split()
        if words[0] == "token":
            streamed.setdefault(int(words[1]), []).append(int(words[2]))
            if words[-1] == "last":
                last[int(words[1])] = len(streamed[int(words[1])])
        elif words[0] == "request":
            final[int(words[1].rstrip(":"))] = [int(w) for w in words[2:]]
    for i, s in enumerate(ref):
        want = s["tokens"][:NEW_TOKENS]
        assert final.get(i) == want, f"request {i}: {final.get(i)}, PyTorch {want}"
        assert streamed.get(i) == want, f"request {i} streamed {streamed.get(i)}, PyTorch {want}"
        assert last.get(i) == NEW_TOKENS, f"request {i}: last flag at {last.get(i)}"
    assert "KV cache:" in r.stdout and "0 used now" in r.stdout, r.stdout
    bad = subprocess.run([binary, model, "4", "1,512,3"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 1 and "outside the vocabulary" in bad.stderr, (bad.returncode, bad.stderr)
    bad = subprocess.run([binary, model, "4", "1,x"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2, (bad.returncode, bad.stderr)
    print(f"generate: {len(ref)} requests x {NEW_TOKENS} tokens equal PyTorch's, streamed and read back")
    text_prompts(binary, data, model)


def text_prompts(binary, data, model):
    """--tokenizer: text prompts through kilnllmAddTextRequest; each request's ids are PyTorch's greedy
    continuation of <s> + SentencePiece's ids (up to </s>), its text the binding's decode of them."""
    import sentencepiece as spm
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "llm"))
    import export_decoder as ed
    tok = os.path.join(data, "tokenizer_bytes", "tokenizer.model")
    sp = spm.SentencePieceProcessor(model_file=tok)
    texts = ["And God said, Let there be light.", "café naïve Zürich — 東京 ✓"]
    r = subprocess.run([binary, "--tokenizer", tok, model, str(NEW_TOKENS)] + texts, capture_output=True, timeout=100)
    out = r.stdout.decode("utf-8")
    assert r.returncode == 0, f"exit {r.returncode}\n{out}\n{r.stderr}"
    torch.set_num_threads(1)
    net, c = ed.build("gpt2-tiny", 1234)  # the fixture exports gpt2-tiny with seed 1234
    lines = out.splitlines()
    for i, text in enumerate(texts):
        want = ed.greedy_reference(net, c, [sp.bos_id()] + sp.encode(text), NEW_TOKENS)[0]
        want = want[:want.index(sp.eos_id()) + 1] if sp.eos_id() in want else want
        got = next(l for l in lines if l.startswith(f"request {i}:"))
        assert [int(w) for w in got.split()[2:]] == want, f"text request {i}: {got}, PyTorch {want}"
        body = want[:-1] if want and want[-1] == sp.eos_id() else want
        assert f"text {i}: {sp.decode(body)}" in lines, (lines, sp.decode(body))
    big = os.path.join(data, "tokenizer_large", "tokenizer.model")
    bad = subprocess.run([binary, "--tokenizer", big, model, "4", "x"], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 1 and "vocabulary (700) is larger than the model's (512)" in bad.stderr, bad.stderr
    print(f"generate --tokenizer: {len(texts)} text prompts continue as PyTorch, printed as the binding decodes")


if __name__ == "__main__":
    main()
