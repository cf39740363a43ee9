#!/usr/bin/python3
"""Kiln int8 against ONNX Runtime, side by side (issue 28's latency figures).

For one model in float32 (FP32.onnx) and its QDQ quantisation (QDQ.onnx, e.g. from `kiln
quantize`), times four engines in alternating blocks whose order rotates every round, so all
see the same machine noise, at each thread count:

  kiln int8    the QDQ model compiled by `kiln compile` (QDQ folded into int8 kernels)
  kiln fp32    the float model compiled by `kiln compile`
  ort fp32     onnxruntime-node on the float model
  ort qdq      onnxruntime-node on the QDQ model (its own int8 kernels)

QDQ.onnx may also be a dynamically quantised model (DynamicQuantizeLinear + MatMulInteger, as
ONNX Runtime's quantize_dynamic and bench/quant/quantize_dynamic.py write it).

Each engine runs warm in one long-lived process per model and thread count (Kiln in
bench/ort_compare/kiln_session over the C API, ORT in bench/ort_compare/run_ort.js), as
bench/ort_compare.sh does. Prints medians and the ratios the issue asks for (kiln int8 / ort
fp32 and kiln int8 / ort qdq), and one JSON line.

usage: int8_bench.py --fp32 M.onnx --qdq M.int8.onnx --input NAME=X.npy [--threads 1,2]
                     [--runs 15] [--build-dir build/release] [--work-dir DIR] [--no-build]
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bench", "ort_compare"))
from driver import BenchError, Session  # noqa: E402

ENGINES = ("kiln int8", "kiln fp32", "ort fp32", "ort qdq")


def compile_kiln(kiln, onnx_path, out, shapes):
    cmd = [kiln, "compile", onnx_path, "-o", out, "-q", "--report", out + ".report.json"]
    if shapes:
        cmd += ["--input-shape", shapes]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise BenchError(f"kiln compile {onnx_path}: {p.stderr.strip().splitlines()[-1:]}")
    with open(out + ".report.json") as f:
        return json.load(f)


def open_sessions(args, kiln_models, threads):
    inputs = [f"{k}={v}" for k, v in args.inputs.items()]
    exe = os.path.join(args.build_dir, "bench", "kiln_session")
    node = [args.node, os.path.join(SRC, "bench", "ort_compare", "run_ort.js")]
    return {
        "kiln int8": Session([exe, kiln_models["int8"], str(threads)] + inputs, "Kiln int8"),
        "kiln fp32": Session([exe, kiln_models["fp32"], str(threads)] + inputs, "Kiln fp32"),
        "ort fp32": Session(node + [args.fp32, str(threads)] + inputs, "ONNX Runtime fp32"),
        "ort qdq": Session(node + [args.qdq, str(threads)] + inputs, "ONNX Runtime QDQ"),
    }


def measure(args, sessions):
    times = {e: [] for e in ENGINES}
    for b in range(math.ceil(args.runs / args.block)):
        shift = b % len(ENGINES)
        for e in ENGINES[shift:] + ENGINES[:shift]:
            time.sleep(args.settle_ms / 1000.0)  # let the previous engine's spinning threads stop
            times[e] += sessions[e].time(args.block, 1)
    return {e: statistics.median(t) for e, t in times.items()}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fp32", required=True)
    p.add_argument("--qdq", required=True)
    p.add_argument("--input", action="append", default=[], help="NAME=X.npy (repeatable)")
    p.add_argument("--input-shape", default="", help="for kiln compile, as its option")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--block", type=int, default=1)
    p.add_argument("--settle-ms", type=float, default=50)
    p.add_argument("--build-dir", default=os.path.join(SRC, "build", "release"))
    p.add_argument("--work-dir", default="")
    p.add_argument("--node", default="node")
    p.add_argument("--no-build", action="store_true", help="time the binaries as they are (built beforehand)")
    args = p.parse_args(argv)
    args.inputs = dict(kv.split("=", 1) for kv in args.input)
    kiln = os.path.join(args.build_dir, "tools", "kiln")
    # Up to date with the tree (a no-op when it is): a stale kiln_session would time old kernels.
    if not args.no_build:
        subprocess.run(["cmake", "--build", args.build_dir, "--target", "kiln", "kiln_session"], check=True,
                       stdout=subprocess.DEVNULL)
    work = args.work_dir or tempfile.mkdtemp(prefix="kiln-int8-bench-")
    os.makedirs(work, exist_ok=True)
    models = {"int8": os.path.join(work, "int8.kiln"), "fp32": os.path.join(work, "fp32.kiln")}
    report = compile_kiln(kiln, args.qdq, models["int8"], args.input_shape)
    compile_kiln(kiln, args.fp32, models["fp32"], args.input_shape)
    int8_kernels = {k: v for k, v in report.get("kernels", {}).items()
                    if any(t in k for t in ("QLinear", "Integer", "DynamicQuant"))}
    print(f"kiln int8 model: fusions {report.get('fusions', {})}")
    print(f"kiln int8 model: int8 kernels {int8_kernels}")
    rows = []
    for threads in [int(t) for t in args.threads.split(",")]:
        sessions = open_sessions(args, models, threads)
        try:
            med = measure(args, sessions)
        finally:
            for s in sessions.values():
                s.__exit__(None, None, None)
        rows.append((threads, med))
    print(f"\nmedians of {args.runs} alternated runs (ms); {os.path.basename(args.qdq)}")
    print(f"{'threads':>7} " + " ".join(f"{e:>10}" for e in ENGINES) + "  int8/ort-fp32  int8/ort-qdq  int8/kiln-fp32")
    for threads, med in rows:
        print(f"{threads:>7} " + " ".join(f"{med[e]:>10.3f}" for e in ENGINES) +
              f"  {med['kiln int8'] / med['ort fp32']:>13.3f}  {med['kiln int8'] / med['ort qdq']:>12.3f}"
              f"  {med['kiln int8'] / med['kiln fp32']:>14.3f}")
    print(json.dumps({"model": args.qdq, "rows": [{"threads": t, **m} for t, m in rows]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"int8_bench: {e}", file=sys.stderr)
        sys.exit(1)
