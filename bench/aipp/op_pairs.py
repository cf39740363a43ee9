#!/usr/bin/env python3
"""Where the fused model's extra time goes, per operator, from the profile of one paired run
of preprocess_bench (KILN_PROFILE=DIR preprocess_bench AIPP_ONLY.kiln PLAIN.kiln FUSED.kiln).

The plain and the fused network run back to back in each round (preprocess_bench), so the
k-th execution of each belongs to round k. Per round this prints, against the plain network:
  - the fused network's Aipp node (or its AippConv, the Aipp node and the first convolution
    folded: compiler/passes/aipp_conv_fusion.cc),
  - the Aipp node's reader (the first convolution) in both networks: the same operator, but
    in the fused network it reads what the Aipp node just wrote, in the plain one the ready
    tensor the bench copied in,
  - the sum of all operator times of an execution (the runtime's own time left out), fused
    minus plain: the issue's bar (<= 10% of the OpenCV chain) on operator time alone.
Medians and quartiles over the rounds, the warm-up rounds dropped.

usage: op_pairs.py PROFILE_DIR [--warmup 5]
"""
import argparse
import csv
import statistics


def quartiles(v):
    v = sorted(v)
    return statistics.median(v), v[len(v) // 4], v[(3 * len(v)) // 4]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile_dir")
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(f"{a.profile_dir}/op_summary.csv")))
    # The AIPP-only model (every op an Aipp) is not one of the two networks.
    ops_of = {}
    for r in rows:
        ops_of.setdefault(r["model"], set()).add(r["op type"])
    networks = {m for m, ops in ops_of.items() if ops != {"Aipp"}}
    rows = [r for r in rows if r["model"] in networks]
    if len(networks) != 1:
        raise SystemExit(f"expected one network model name in the profile, found {sorted(networks)}")
    # The fused network's executions start with its Aipp node; its reader is the next op, and
    # the plain network's executions start with that op (not after an Aipp). A folded network
    # (kiln AippConv "aipp_x+<conv>") holds the reader in its first node: its reader time is 0.
    folded = any(r["op type"] == "AippConv" for r in rows)
    aipp_ops = {"Aipp", "AippConv"}
    if folded:
        reader = next(r["op name"].split("+", 1)[1] for r in rows if r["op type"] == "AippConv")
    else:
        reader = next((rows[i + 1]["op name"] for i, r in enumerate(rows[:-1]) if r["op type"] == "Aipp"), None)
    if reader is None:
        raise SystemExit("no Aipp node in the network's profile")
    execs = []
    for i, r in enumerate(rows):
        name, us = r["op name"], float(r["duration us"])
        if r["op type"] in aipp_ops:
            execs.append({"fused": True, "aipp": us, "reader": 0.0 if folded else None, "sum": 0.0,
                          "aipp_name": name})
        elif name == reader and (i == 0 or rows[i - 1]["op type"] not in aipp_ops):
            execs.append({"fused": False, "reader": None, "sum": 0.0})
        if not execs:
            continue
        e = execs[-1]
        if name == reader and e["reader"] is None:
            e["reader"] = us
        e["sum"] += us
    fused = [e for e in execs if e["fused"]][a.warmup:]
    plain = [e for e in execs if not e["fused"]][a.warmup:]
    n = min(len(fused), len(plain))
    fused, plain = fused[:n], plain[:n]
    if n == 0:
        raise SystemExit("no paired rounds after the warm-up")
    print(f"{n} paired rounds; microseconds, median [first quartile, third quartile]")

    def line(label, v):
        m, q1, q3 = quartiles(v)
        print(f"  {label:<44} {m:9.0f} [{q1:.0f}, {q3:.0f}]")

    line(f"fused: {fused[0]['aipp_name']}", [e["aipp"] for e in fused])
    if not folded:
        line(f"fused: {reader}", [e["reader"] for e in fused])
    line(f"plain: {reader}", [e["reader"] for e in plain])
    if not folded:
        line(f"{reader}: fused - plain", [f["reader"] - p["reader"] for f, p in zip(fused, plain)])
    line("Aipp + its reader (fused) - reader (plain)",
         [f["aipp"] + f["reader"] - p["reader"] for f, p in zip(fused, plain)])
    line("all ops: fused - plain", [f["sum"] - p["sum"] for f, p in zip(fused, plain)])
    line("all ops: plain", [p["sum"] for p in plain])


if __name__ == "__main__":
    main()
