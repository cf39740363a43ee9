#!/usr/bin/python3
"""Per-call overhead of kiln.InferenceSession.run against the C API on the same model.

Usage: PYTHONPATH=build/release/python bench/python/overhead.py [--c-bench PATH]
           [--threads N] [--runs N] [--repeats N]

For a single-Add model and a chain of 1000 Adds (x: float32[1, 16]) it compiles a .kiln
with kiln.compile, then times
  - C API: bench/python/overhead_c.cc (build target python_overhead_c): kilnmdlExecute
    on datasets staged once ("C staged"), and with buffers, input copies and datasets
    made per call as sess.run makes them ("C per call");
  - Python: sess.run(None, {"x": x}) per run (inputs copied host -> device each call, the
    datasets built, kilnmdlExecute, output arrays wrapping Kiln's buffers).
(The compiler fuses the 1000 Adds into one FusedElementwise node: the "nodes" column.)
  - ONNX Runtime: onnxruntime-node's session.run on the .onnx (ort_node_overhead.js, one
    intra-op thread), when node_modules/onnxruntime-node is installed: ORT's Python wheel is
    not installable offline, its Node binding is (scripts/install-deps.sh).
Each side reports the median over --repeats blocks of --runs runs' mean; the difference is
what the binding costs per call ("py - staged").
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
from conftest import add_chain_model  # noqa: E402  (the tests' model builder)

import kiln  # noqa: E402


def c_api_us(binary, model, threads, runs, repeats):
    out = subprocess.run([binary, model, str(threads), str(runs), str(repeats)], check=True, capture_output=True,
                         text=True).stdout
    result = json.loads(out)
    if "error" in result:
        raise SystemExit(result["error"])
    return result["staged_us"], result["per_call_us"]


def ort_node_us(onnx_path, runs, repeats):
    """onnxruntime-node's time per session.run (ort_node_overhead.js), or None without it."""
    if not (REPO / "node_modules" / "onnxruntime-node").exists():
        return None
    out = subprocess.run(["node", str(pathlib.Path(__file__).with_name("ort_node_overhead.js")), str(onnx_path),
                          str(runs), str(repeats)], capture_output=True, text=True, cwd=REPO)
    try:
        return json.loads(out.stdout)["median_us"]
    except (ValueError, KeyError):
        return None


def python_us(model, threads, runs, repeats, x):
    with kiln.InferenceSession(model, threads=threads) as sess:
        feed = {"x": x}
        for _ in range(runs // 10):
            sess.run(None, feed)
        means = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(runs):
                sess.run(None, feed)
            means.append(1e6 * (time.perf_counter() - t) / runs)
    return statistics.median(means)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--c-bench", default=str(REPO / "build" / "release" / "bench" / "python_overhead_c"),
                        help="the C API side (build target python_overhead_c)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        x = np.zeros((1, 16), np.float32)
        np.save(tmp / "x.npy", x)
        print(f"threads={args.threads}, {args.runs} runs x {args.repeats} blocks, median of block means")
        print(f"{'model':>10} {'nodes':>6} {'C staged':>10} {'C per call':>10} {'Python':>10} {'py - staged':>12} {'ORT node':>10}  (us per run)")
        # The C side first: once this process has initialized Kiln, its idle worker threads
        # would compete with the kiln_session process for the cores.
        rows = []
        for n in (1, 1000):
            onnx_path = add_chain_model(tmp / f"add{n}.onnx", n)
            kiln_path = str(tmp / f"add{n}.kiln")
            report = kiln.compile(onnx_path, kiln_path)
            runs = args.runs if n == 1 else max(args.runs // 10, 50)
            staged, per_call = c_api_us(args.c_bench, kiln_path, args.threads, runs, args.repeats)
            ort = ort_node_us(onnx_path, runs if n == 1 else max(runs // 10, 50), args.repeats)
            rows.append((f"{n} Add", report["nodes"]["after"], kiln_path, runs, staged, per_call, ort))
        for name, nodes, kiln_path, runs, staged, per_call, ort in rows:
            py = python_us(kiln_path, args.threads, runs, args.repeats, x)
            ort_text = f"{ort:10.2f}" if ort is not None else f"{'-':>10}"
            print(f"{name:>10} {nodes:>6} {staged:10.2f} {per_call:10.2f} {py:10.2f} {py - staged:12.2f} {ort_text}")


if __name__ == "__main__":
    main()
