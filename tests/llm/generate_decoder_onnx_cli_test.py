#!/usr/bin/python3
"""`kiln generate` on a plain past-KV decoder.onnx (its attention recognised by the engine,
docs/llm.md): the greedy tokens of 4 batched requests equal PyTorch's (the fixture's
reference.json), the recognition line is on stderr, and a model the matcher refuses exits 1
naming the node.

usage: generate_decoder_onnx_cli_test.py KILN DATA_DIR
"""
import json
import os
import subprocess
import sys


def main():
    kiln, data = sys.argv[1], sys.argv[2]
    failures = []
    for model, line in (("gpt2-tiny", "recognised 4 layers of attention with past (heads 4, kv_heads 4, head_dim 32"),
                        ("llama-tiny", "recognised 4 layers of attention with past (heads 4, kv_heads 2, head_dim 32")):
        with open(os.path.join(data, model, "reference.json")) as f:
            ref = json.load(f)["sequences"][:4]
        cmd = [kiln, "generate", os.path.join(data, model, "decoder.onnx"), "--max-new-tokens", "12"]
        for r in ref:
            cmd += ["--prompt-ids", ",".join(map(str, r["prompt"]))]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            failures.append(f"{model}: exit {p.returncode}: {p.stderr}")
            continue
        if line not in p.stderr:
            failures.append(f"{model}: no recognition line on stderr: {p.stderr!r}")
        got = {}
        for out in p.stdout.splitlines():
            if out.startswith("request ") and ":" in out:
                head, _, toks = out.partition(":")
                got[int(head.split()[1])] = [int(t) for t in toks.split()]
        for i, r in enumerate(ref):
            if got.get(i) != r["tokens"][:12]:
                failures.append(f"{model}: request {i}: {got.get(i)} != PyTorch's {r['tokens'][:12]}")
    bad = os.path.join(data, "variants", "refuse-softmax-axis", "decoder.onnx")
    p = subprocess.run([kiln, "generate", bad, "--prompt-ids", "1,2,3"], capture_output=True, text=True, timeout=120)
    if p.returncode != 1 or "normalises over axis 2" not in p.stderr or "Softmax '/h.0/Softmax'" not in p.stderr:
        failures.append(f"refused model: exit {p.returncode}, stderr {p.stderr!r}")
    for f in failures:
        print("FAIL:", f)
    print("ok" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
