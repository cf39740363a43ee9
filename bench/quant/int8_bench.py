#!/usr/bin/python3
"""Kiln int8 against ONNX Runtime, side by side (issue 28's latency figures).

For one model in float32 (FP32.onnx) and its QDQ quantisation (QDQ.onnx, e.g. from `kiln
quantize`), times four engines in alternating blocks whose order rotates every round, so all
see the same machine noise, at each thread count:

  kiln int8    the QDQ model compiled by `kiln compile` (QDQ folded into int8 kernels)
  kiln fp32    the float model compiled by `kiln compile`
  ort fp32     onnxruntime-node on the float model
  ort qdq      onnxruntime-node on the QDQ model (its own int8 kernels)

and with --exact-residual a fifth, "kiln exact": the QDQ model compiled with `--disable-pass
qlinear_residual_fusion` (residual additions as their own pass, bit-exact with the QDQ graph;
docs/quantization.md), so the fused epilogue's gain is measured in the same rounds.

QDQ.onnx may also be a dynamically quantised model (DynamicQuantizeLinear + MatMulInteger, as
ONNX Runtime's quantize_dynamic and bench/quant/quantize_dynamic.py write it).

Each engine runs warm in one long-lived process per model and thread count (Kiln in
bench/ort_compare/kiln_session over the C API, ORT in bench/ort_compare/run_ort.js), as
bench/ort_compare.sh does. All thread counts are open at once and alternated in the same
rounds, so 1 and 2 threads see the same machine load. Prints medians and the ratios the issue
asks for (kiln int8 / ort fp32 and kiln int8 / ort qdq), the 1-minute load average over the
rounds and each process's context switches per timed run (voluntary: a thread slept;
involuntary: the scheduler preempted one), and one JSON line.

On a machine whose cores other processes keep busy, OpenMP's spin-waiting makes Kiln's
multi-threaded runs slow (docs/quantization.md, "Threads on a shared machine");
--kiln-omp-wait-policy passive runs the Kiln processes with OMP_WAIT_POLICY=passive.

usage: int8_bench.py --fp32 M.onnx --qdq M.int8.onnx --input NAME=X.npy [--threads 1,2]
                     [--runs 15] [--build-dir build/release] [--work-dir DIR] [--no-build]
                     [--kiln-omp-wait-policy default|passive|active]
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


def compile_kiln(kiln, onnx_path, out, shapes, extra=()):
    cmd = [kiln, "compile", onnx_path, "-o", out, "-q", "--report", out + ".report.json"] + list(extra)
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
    saved = os.environ.get("OMP_WAIT_POLICY")
    if args.kiln_omp_wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.kiln_omp_wait_policy
    try:
        kiln = {"kiln int8": Session([exe, kiln_models["int8"], str(threads)] + inputs, "Kiln int8"),
                "kiln fp32": Session([exe, kiln_models["fp32"], str(threads)] + inputs, "Kiln fp32")}
        if "exact" in kiln_models:
            kiln["kiln exact"] = Session([exe, kiln_models["exact"], str(threads)] + inputs, "Kiln int8 exact")
    finally:
        if saved is None:
            os.environ.pop("OMP_WAIT_POLICY", None)
        else:
            os.environ["OMP_WAIT_POLICY"] = saved
    return {**kiln,
            "ort fp32": Session(node + [args.fp32, str(threads)] + inputs, "ONNX Runtime fp32"),
            "ort qdq": Session(node + [args.qdq, str(threads)] + inputs, "ONNX Runtime QDQ")}


def context_switches(pid):
    """(voluntary, involuntary) context switches of all threads of process `pid` so far."""
    vol = invol = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches"):
                        vol += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches"):
                        invol += int(line.split()[1])
        except OSError:  # a thread that ended meanwhile
            pass
    return vol, invol


def measure(args, sessions):
    """sessions: {(engine, threads): Session}. Every round times each once, in an order that
    rotates every round. Returns medians, context switches per timed run, and the load range."""
    keys = list(sessions)
    times = {k: [] for k in keys}
    switches = {k: [0, 0] for k in keys}
    loads = []
    for b in range(math.ceil(args.runs / args.block)):
        loads.append(os.getloadavg()[0])
        shift = b % len(keys)
        for k in keys[shift:] + keys[:shift]:
            time.sleep(args.settle_ms / 1000.0)  # let the previous engine's spinning threads stop
            pid = sessions[k].proc.pid
            before = context_switches(pid)
            times[k] += sessions[k].time(args.block, 1)
            after = context_switches(pid)
            for i in range(2):
                switches[k][i] += after[i] - before[i]
    runs = {k: len(t) for k, t in times.items()}
    med = {k: statistics.median(t) for k, t in times.items()}
    # Per timed run; the untimed warm-up run of each block counts too.
    ctx = {k: [round(v / runs[k]) for v in switches[k]] for k in keys}
    return med, ctx, (min(loads), max(loads))


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
    p.add_argument("--exact-residual", action="store_true",
                   help="also time the QDQ model compiled with --disable-pass qlinear_residual_fusion")
    p.add_argument("--kiln-omp-wait-policy", choices=("default", "passive", "active"), default="default",
                   help="OMP_WAIT_POLICY of the Kiln processes (default: as the environment has it)")
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
    engines = ENGINES
    if args.exact_residual:
        models["exact"] = os.path.join(work, "int8_exact.kiln")
        compile_kiln(kiln, args.qdq, models["exact"], args.input_shape, ["--disable-pass", "qlinear_residual_fusion"])
        engines = ENGINES + ("kiln exact",)
    int8_kernels = {k: v for k, v in report.get("kernels", {}).items()
                    if any(t in k for t in ("QLinear", "Integer", "DynamicQuant"))}
    print(f"kiln int8 model: fusions {report.get('fusions', {})}")
    print(f"kiln int8 model: int8 kernels {int8_kernels}")
    thread_counts = [int(t) for t in args.threads.split(",")]
    sessions = {}
    try:
        for threads in thread_counts:
            for e, sess in open_sessions(args, models, threads).items():
                sessions[(e, threads)] = sess
        med, ctx, load = measure(args, sessions)
    finally:
        for sess in sessions.values():
            sess.__exit__(None, None, None)
    rows = [(t, {e: med[(e, t)] for e in engines}) for t in thread_counts]
    print(f"\nmedians of {args.runs} runs (ms), all thread counts alternated; {os.path.basename(args.qdq)}; "
          f"Kiln's OMP_WAIT_POLICY: {args.kiln_omp_wait_policy}")
    print(f"load average (1 min) over the rounds: {load[0]:.2f} - {load[1]:.2f} on {os.cpu_count()} cpus")
    exact = "kiln exact" in engines
    print(f"{'threads':>7} " + " ".join(f"{e:>10}" for e in engines) + "  int8/ort-fp32  int8/ort-qdq  int8/kiln-fp32" +
          ("  exact/ort-qdq  int8/exact" if exact else ""))
    for threads, m in rows:
        print(f"{threads:>7} " + " ".join(f"{m[e]:>10.3f}" for e in engines) +
              f"  {m['kiln int8'] / m['ort fp32']:>13.3f}  {m['kiln int8'] / m['ort qdq']:>12.3f}"
              f"  {m['kiln int8'] / m['kiln fp32']:>14.3f}" +
              (f"  {m['kiln exact'] / m['ort qdq']:>13.3f}  {m['kiln int8'] / m['kiln exact']:>10.3f}" if exact else ""))
    print("context switches per run (voluntary/involuntary, all threads of the process):")
    for threads in thread_counts:
        print(f"{threads:>7} " + " ".join(f"{'%d/%d' % tuple(ctx[(e, threads)]):>10}" for e in engines))
    print(json.dumps({"model": args.qdq, "kiln_omp_wait_policy": args.kiln_omp_wait_policy,
                      "load_avg_1min": list(load),
                      "rows": [{"threads": t, **m, "context_switches": {e: ctx[(e, t)] for e in engines}}
                               for t, m in rows]}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"int8_bench: {e}", file=sys.stderr)
        sys.exit(1)
