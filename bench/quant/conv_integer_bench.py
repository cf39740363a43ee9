#!/usr/bin/python3
"""Kiln's ConvInteger kernel against ONNX Runtime 1.30 on the same model, side by side.

The model: the three convolutions of each ResNet-50 stage's first bottleneck block (12 shapes,
no downsample branch) at batch 1 as ConvInteger nodes (each on its own graph input), uint8 activations with a zero point given at run time and uint8
weights with one zero point per layer (ONNX Runtime's ConvInteger takes no per-channel ones), as
ONNX Runtime's quantize_dynamic writes a Conv. Weights are random, the zero points such that
W - w_zp stays in int8 (the kernel then packs W - w_zp and needs no weight correction), or, with
--wide-zero-points, such that it does not (the kernel's correction runs).

Kiln (bench/ort_compare/kiln_session on the compiled model) and ORT (run_ort.js) run warm in
long-lived processes, all thread counts open at once and alternated in the same rounds; prints
medians, kiln / ort per thread count, the 1-minute load average over the rounds, and one JSON
line. Kiln's outputs are checked against ORT's first (equal: both are exact integer sums).

usage: conv_integer_bench.py [--threads 1,2] [--runs 15] [--build-dir build/release]
                             [--work-dir DIR] [--wide-zero-points]
                             [--kiln-omp-wait-policy default|passive|active]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bench", "ort_compare"))
from driver import BenchError, Session  # noqa: E402

# (C_in, H, W, C_out, k, stride): each ResNet-50 stage's first bottleneck block (1x1, 3x3, 1x1).
LAYERS = [(64, 56, 56, 64, 1, 1), (64, 56, 56, 64, 3, 1), (64, 56, 56, 256, 1, 1), (256, 56, 56, 128, 1, 1),
          (128, 56, 56, 128, 3, 2), (128, 28, 28, 512, 1, 1), (512, 28, 28, 256, 1, 1), (256, 28, 28, 256, 3, 2),
          (256, 14, 14, 1024, 1, 1), (1024, 14, 14, 512, 1, 1), (512, 14, 14, 512, 3, 2), (512, 7, 7, 2048, 1, 1)]


def make_model(path, wide, rng):
    nodes, inits, inputs, outputs, feeds = [], [], [], [], {}
    for i, (c, h, w, m, k, s) in enumerate(LAYERS):
        x, y = f"x{i}", f"y{i}"
        inputs.append(helper.make_tensor_value_info(x, TensorProto.UINT8, [1, c, h, w]))
        inputs.append(helper.make_tensor_value_info(f"xzp{i}", TensorProto.UINT8, []))
        feeds[x] = rng.integers(0, 256, (1, c, h, w)).astype(np.uint8)
        feeds[f"xzp{i}"] = np.array(rng.integers(100, 140), np.uint8)
        # One zero point per layer: ONNX Runtime's ConvInteger takes no per-channel ones.
        zp = int(rng.integers(20, 60)) if wide else int(rng.integers(118, 138))
        lo, hi = (0, 256) if wide else (max(zp - 128, 0), min(zp + 128, 256))
        wq = rng.integers(lo, hi, (m, c, k, k)).astype(np.uint8)
        inits += [numpy_helper.from_array(wq, f"w{i}"), numpy_helper.from_array(np.array(zp, np.uint8), f"wzp{i}")]
        p = k // 2
        nodes.append(helper.make_node("ConvInteger", [x, f"w{i}", f"xzp{i}", f"wzp{i}"], [y], name=f"conv{i}",
                                      kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p]))
        o = (h + 2 * p - k) // s + 1
        outputs.append(helper.make_tensor_value_info(y, TensorProto.INT32, [1, m, o, o]))
    g = helper.make_graph(nodes, "conv_integer_bench", inputs, outputs, inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)]), path)
    return feeds


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--settle-ms", type=float, default=50)
    p.add_argument("--build-dir", default=os.path.join(SRC, "build", "release"))
    p.add_argument("--work-dir", default="")
    p.add_argument("--node", default="node")
    p.add_argument("--wide-zero-points", action="store_true")
    p.add_argument("--kiln-omp-wait-policy", choices=("default", "passive", "active"), default="default")
    args = p.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="kiln-conv-integer-bench-")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "conv_integer.onnx")
    feeds = make_model(model, args.wide_zero_points, np.random.default_rng(28))
    inputs = []
    for name, a in feeds.items():
        np.save(os.path.join(work, name + ".npy"), a)
        inputs.append(f"{name}={os.path.join(work, name + '.npy')}")
    kiln = os.path.join(args.build_dir, "tools", "kiln")
    compiled = os.path.join(work, "conv_integer.kiln")
    r = subprocess.run([kiln, "compile", model, "-o", compiled, "-q", "--report", compiled + ".json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"kiln compile: {r.stderr.strip()}")
    with open(compiled + ".json") as f:
        print(f"kiln kernels: {json.load(f)['kernels']}")
    threads = [int(t) for t in args.threads.split(",")]
    exe = os.path.join(args.build_dir, "bench", "kiln_session")
    env = dict(os.environ)
    sessions = {}
    try:
        for t in threads:
            if args.kiln_omp_wait_policy != "default":
                os.environ["OMP_WAIT_POLICY"] = args.kiln_omp_wait_policy
            sessions[("kiln", t)] = Session([exe, compiled, str(t)] + inputs, "Kiln")
            os.environ.clear()
            os.environ.update(env)
            sessions[("ort", t)] = Session([args.node, os.path.join(SRC, "bench", "ort_compare", "run_ort.js"), model,
                                            str(t)] + inputs, "ONNX Runtime")
        # Same outputs (exact integer sums on both sides).
        sessions[("ort", threads[0])].save(os.path.join(work, "ort_out"))
        r = subprocess.run([kiln, "run", compiled, "--output-dir", os.path.join(work, "kiln_out")] +
                           sum((["--input", i] for i in inputs), []), capture_output=True, text=True)
        if r.returncode != 0:
            raise BenchError(f"kiln run: {r.stderr.strip()}")
        with open(os.path.join(work, "kiln_out", "outputs.json")) as f:
            kiln_files = json.load(f)
        with open(os.path.join(work, "ort_out", "outputs.json")) as f:
            ort_files = json.load(f)
        for name, e in kiln_files.items():
            a = np.load(os.path.join(work, "kiln_out", e["file"]))
            b = np.load(os.path.join(work, "ort_out", ort_files[name]["file"]))
            if not np.array_equal(a, b):
                raise BenchError(f"{name}: Kiln and ONNX Runtime differ (max |diff| {np.abs(a - b).max()})")
        keys = list(sessions)
        times = {k: [] for k in keys}
        loads = []
        for b in range(args.runs):
            loads.append(os.getloadavg()[0])
            shift = b % len(keys)
            for k in keys[shift:] + keys[:shift]:
                time.sleep(args.settle_ms / 1000.0)
                times[k] += sessions[k].time(1, 1)
    finally:
        for s in sessions.values():
            s.__exit__(None, None, None)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nmedians of {args.runs} runs (ms), 12 ConvInteger layers (ResNet-50's first blocks), "
          f"{'wide' if args.wide_zero_points else 'narrow'} weight zero points; Kiln's OMP_WAIT_POLICY: "
          f"{args.kiln_omp_wait_policy}; outputs equal to ONNX Runtime's")
    print(f"load average (1 min) over the rounds: {min(loads):.2f} - {max(loads):.2f} on {os.cpu_count()} cpus")
    print(f"{'threads':>7} {'kiln':>10} {'ort':>10} {'kiln/ort':>9}")
    for t in threads:
        print(f"{t:>7} {med[('kiln', t)]:>10.3f} {med[('ort', t)]:>10.3f} {med[('kiln', t)] / med[('ort', t)]:>9.3f}")
    print(json.dumps({"wide_zero_points": args.wide_zero_points, "kiln_omp_wait_policy": args.kiln_omp_wait_policy,
                      "load_avg_1min": [min(loads), max(loads)],
                      "rows": [{"threads": t, "kiln": med[("kiln", t)], "ort": med[("ort", t)]} for t in threads]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"conv_integer_bench: {e}", file=sys.stderr)
        sys.exit(1)
