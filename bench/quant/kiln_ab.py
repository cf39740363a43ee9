#!/usr/bin/python3
"""Two compiled Kiln models timed against each other, alternating, in one run (issue 28: the
residual epilogue against the exact path, `kiln compile --disable-pass qlinear_residual_fusion`).

Both models run warm in bench/ort_compare/kiln_session processes (the C API, as int8_bench.py
times Kiln) at the same thread count, and no other engine runs between them, so a shared
machine's load reaches both alike. Each round times A and B --block runs each after one
untimed run, in an order that flips every round. Prints per model the minimum, 10th
percentile and median (ms) of all timed runs, B / A for each, and the 1-minute load average
over the rounds; then one JSON line. On a loaded machine the minimum and the 10th percentile
are the least disturbed by preemption.

usage: kiln_ab.py A.kiln B.kiln --input NAME=X.npy [--threads 1] [--rounds 30] [--block 5]
                  [--build-dir build/release]
"""

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bench", "ort_compare"))
from driver import BenchError, Session  # noqa: E402


def summary(times):
    v = sorted(times)
    return {"min": v[0], "p10": v[len(v) // 10], "median": statistics.median(v), "runs": len(v)}


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--input", action="append", default=[], help="NAME=X.npy (repeatable)")
    p.add_argument("--threads", default="1")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--build-dir", default=os.path.join(SRC, "build", "release"))
    args = p.parse_args(argv)
    exe = os.path.join(args.build_dir, "bench", "kiln_session")
    # The sessions run in the source tree (driver.Session): paths as absolute ones.
    args.a, args.b = os.path.abspath(args.a), os.path.abspath(args.b)
    args.input = [k + "=" + os.path.abspath(v) for k, v in (kv.split("=", 1) for kv in args.input)]
    sessions = {}
    try:
        for name, model in (("A", args.a), ("B", args.b)):
            sessions[name] = Session([exe, model, args.threads] + args.input, f"Kiln {name}")
        times = {k: [] for k in sessions}
        loads = []
        for r in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                times[k] += sessions[k].time(args.block, 1)
    finally:
        for s in sessions.values():
            s.__exit__(None, None, None)
    stats = {k: summary(v) for k, v in times.items()}
    print(f"{args.threads} thread(s), {args.rounds} rounds of {args.block} runs; load average (1 min) "
          f"{min(loads):.2f} - {max(loads):.2f} on {os.cpu_count()} cpus")
    print(f"{'':>8} {'min':>9} {'p10':>9} {'median':>9}")
    for k, path in (("A", args.a), ("B", args.b)):
        s = stats[k]
        print(f"{k:>8} {s['min']:>9.3f} {s['p10']:>9.3f} {s['median']:>9.3f}  {os.path.basename(path)}")
    print(f"{'B / A':>8} " + " ".join(f"{stats['B'][q] / stats['A'][q]:>9.3f}" for q in ("min", "p10", "median")))
    print(json.dumps({"a": args.a, "b": args.b, "threads": args.threads, "load_avg_1min": [min(loads), max(loads)],
                      **{k: stats[k] for k in stats}}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"kiln_ab: {e}", file=sys.stderr)
        sys.exit(1)
