#!/usr/bin/env python3
"""Issue 31's custom-op acceptance figure (docs/dsl.md): the latency of an EfficientNet-style
model whose activations are a custom-domain op (my.ops::PSwish, x * sigmoid(1.5 x), defined by a
plugin's DSL expression) against the same model with a built-in activation of equal cost (SiLU),
side by side, alternated, on the same machine. Goal: within 5%.

Three compiled models:
  builtin      builtin.onnx (SiLU)
  custom       custom.onnx --custom-ops plugin (PSwish fused into the convolutions' epilogues)
  custom_dsl   the same with KILN_CUSTOM_OP_EPILOGUE=0: every PSwish a DSL-generated kernel
               (standalone, or inside a FusedElementwise program)
Each is first checked against PyTorch's output. Then `kiln bench --depth 1` runs each model in
turn, ROUNDS times; the median and the minimum of the per-round p50 latencies are compared (on
a busy machine the minimum is the steadier figure: the graphs of builtin and custom are the same).

usage: custom_op_bench.py [--kiln build/release/tools/kiln] [--work DIR] [--size 224]
                          [--threads 1] [--rounds 15] [--loops 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "kiln_custom_op_bench"))
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--loops", type=int, default=20)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda f: os.path.join(a.work, f)  # noqa: E731
    if not os.path.exists(w("custom.onnx")):
        run(["/usr/bin/python3", os.path.join(HERE, "make_models.py"), a.work, "--size", str(a.size)])
    plugin = w("plugin.so")
    run(["c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-DVARIANT=good", "-I", os.path.join(ROOT, "include"),
         os.path.join(ROOT, "tests", "tools", "custom_ops", "test_plugin.cc"), "-o", plugin])
    env_dsl = {"KILN_CUSTOM_OP_EPILOGUE": "0"}
    variants = [("builtin", "builtin.onnx", [], {}), ("custom", "custom.onnx", ["--custom-ops", plugin], {}),
                ("custom_dsl", "custom.onnx", ["--custom-ops", plugin], env_dsl)]
    for name, onnx_file, extra, env in variants:
        r = run([a.kiln, "compile", w(onnx_file), "-o", w(name + ".kiln"), "--report", w(name + ".json"), "-q"] + extra,
                env)
        with open(w(name + ".json")) as f:
            fusions = json.load(f)["fusions"]
        act = {k: v for k, v in fusions.items() if "Silu" in k or "custom" in k}
        out = w(name + "_out")
        run([a.kiln, "run", w(name + ".kiln"), "--input", "x=" + w("input.npy"), "--output-dir", out])
        y = np.load(os.path.join(out, "y.npy"))
        ref = np.load(w(("builtin" if name == "builtin" else "custom") + "_ref.npy"))
        print(f"{name:11s} max |kiln - torch| = {np.abs(y - ref).max():.2e}  fusions with the activation: {act}")
    times = {name: [] for name, *_ in variants}
    for _ in range(a.rounds):
        for name, *_ in variants:
            r = run([a.kiln, "bench", w(name + ".kiln"), "--threads", str(a.threads), "--loops", str(a.loops),
                     "--warmup", "5", "--depth", "1", "--json"])
            times[name].append(json.loads(r.stdout)["latency_ms"]["p50"])
    base, best = statistics.median(times["builtin"]), min(times["builtin"])
    print(f"\nEfficientNet-style net, 1x3x{a.size}x{a.size}, {a.threads} thread(s), {a.rounds} alternated rounds of "
          f"{a.loops} runs (p50 each); median and minimum over the rounds")
    for name, *_ in variants:
        m, b = statistics.median(times[name]), min(times[name])
        print(f"  {name:11s} median {m:8.3f} ms {m / base:6.3f}x   min {b:8.3f} ms {b / best:6.3f}x builtin   rounds: "
              + " ".join(f"{t:.2f}" for t in times[name]))


if __name__ == "__main__":
    main()
