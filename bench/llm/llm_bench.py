#!/usr/bin/python3
"""Batched greedy decode throughput, three ways on the same machine and the same model:

  engine  Kiln's LLM engine (src/llm): paged KV cache, one batched step for all sequences;
  plain   the past-key-values decoder.onnx run through Kiln's graph executor as an ordinary
          ONNX model (contiguous KV fed back each step, no paged cache);
  torch   PyTorch (Debian python3-torch) running the same module with its own KV cache.

For each model and each concurrency N (sequences decoding together), N prompts of --prompt
random tokens each generate --new-tokens tokens; the figure is decode tokens/s (the prefill
step excluded), best of --repeat runs, every engine single-threaded (the machine is shared: one
thread per engine keeps the comparison fair and repeatable). Prints a table and the ratios.

  bench/llm/llm_bench.py [--configs gpt2-10m,llama-10m] [--concurrency 1,4,16] [--work DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_decoder  # noqa: E402


def kiln_run(binary, model_dir, mode, n, prompt, new_tokens):
    env = dict(os.environ, KILN_NUM_THREADS="1")
    out = subprocess.run([binary, model_dir, "--mode", mode, "--concurrency", str(n), "--prompt", str(prompt),
                          "--new-tokens", str(new_tokens)], env=env, check=True, capture_output=True, text=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    return r["decode_tokens_per_s"], r["first"]


def torch_run(model, c, n, prompt, new_tokens):
    torch.set_num_threads(1)
    rng = np.random.RandomState(5)
    ids = torch.tensor(rng.randint(0, c["vocab"], size=(n, prompt)))
    hd = c["d_model"] // c["heads"]
    best = 0.0
    with torch.no_grad():
        for _ in range(2):  # the first run warms up
            past = [torch.zeros(n, c["kv_heads"], 0, hd) for _ in range(2 * c["layers"])]
            x, done = ids, 0
            t_decode = None
            for step in range(new_tokens):
                t = x.shape[1]
                pos = torch.arange(done, done + t).unsqueeze(0).expand(n, t)
                out = model(x, torch.ones(n, done + t, dtype=torch.int64), pos, *past)
                past = list(out[1:])
                x = out[0][:, -1].argmax(-1, keepdim=True)
                done += t
                if step == 0:
                    t_decode = time.perf_counter()
            best = max(best, n * (new_tokens - 1) / (time.perf_counter() - t_decode))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="gpt2-10m,llama-10m")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    ap.add_argument("--work", help="where exported models go (default: a temporary directory)")
    ap.add_argument("--bench-binary", default=os.path.join(HERE, "..", "..", "build", "release", "bench", "llm_bench"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = args.work or tempfile.mkdtemp(prefix="kiln-llm-bench-")
    rows = []
    for name in args.configs.split(","):
        model_dir = os.path.join(work, name)
        if not os.path.exists(os.path.join(model_dir, "decoder.onnx")):
            export_decoder.export(name, model_dir, 1234)
        model, c = export_decoder.build(name, 1234)
        for n in [int(v) for v in args.concurrency.split(",")]:
            fig = {}
            tokens = {}
            for mode in ("engine", "plain"):
                runs = [kiln_run(args.bench_binary, model_dir, mode, n, args.prompt, args.new_tokens)
                        for _ in range(args.repeat)]
                fig[mode] = max(r[0] for r in runs)
                tokens[mode] = runs[0][1]
            # The same greedy tokens both ways, or the comparison means nothing.
            if tokens["engine"] != tokens["plain"]:
                sys.exit(f"{name} N={n}: engine and plain decoder.onnx generate different tokens: "
                         f"{tokens['engine']} vs {tokens['plain']}")
            fig["torch"] = max(torch_run(model, c, n, args.prompt, args.new_tokens) for _ in range(args.repeat))
            rows.append((name, n, fig))
            print(f"{name} N={n}: engine {fig['engine']:.0f}, plain {fig['plain']:.0f}, torch {fig['torch']:.0f} tokens/s",
                  file=sys.stderr, flush=True)
    print(f"decode tokens/s, prompt {args.prompt}, {args.new_tokens} new tokens, 1 thread, best of {args.repeat}")
    print(f"{'model':<11} {'N':>3} {'engine':>9} {'plain':>9} {'torch':>9} {'eng/plain':>10} {'eng/torch':>10} {'eng N/1':>8}")
    base = {}
    for name, n, f in rows:
        base.setdefault(name, f["engine"])
        print(f"{name:<11} {n:>3} {f['engine']:>9.0f} {f['plain']:>9.0f} {f['torch']:>9.0f} "
              f"{f['engine'] / f['plain']:>10.2f} {f['engine'] / f['torch']:>10.2f} {f['engine'] / base[name]:>8.2f}")


if __name__ == "__main__":
    main()
