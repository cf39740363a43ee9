#!/usr/bin/python3
"""Kiln's per-node profile joined to ONNX Runtime's on the same QDQ model (issue 28: which int8
layers Kiln loses or wins least; docs/quantization.md, "Per layer against ONNX Runtime").

Inputs: Kiln's `op_summary.csv` (`KILN_NUM_THREADS=N kiln profile M.kiln --output DIR`) and ONNX
Runtime's trace (`node bench/quant/ort_profile.js M.int8.onnx N PREFIX NAME=X.npy` writes
PREFIX_<date>.json). A Kiln node is named after the ONNX nodes it fused, joined by '+'; it is
matched to the ONNX Runtime node that has one of those names (ORT keeps a QDQ group's name from
its Conv / Gemm / ...). Medians per node over the profiled runs; ORT's warm-up runs are the
first W runs of each node (--ort-warmup, default 5 as ort_profile.js runs them).

Prints the Kiln and ORT medians per convolution group (input size, kernel size, oneDNN
implementation), the totals, ORT's nodes left unmatched (the additions Kiln fused into a
convolution's epilogue, ORT's layout Transposes), and with --nodes every node.

Usage: profile_join.py KILN_DIR/op_summary.csv ORT_TRACE.json [--nodes] [--ort-warmup W]
"""
import argparse
import collections
import csv
import json
import re
import statistics
import sys


def ort_nodes(trace_path, warmup):
    """{node name: [us per run]} from ORT's trace ("Node" events, *_kernel_time)."""
    with open(trace_path) as f:
        events = json.load(f)
    times = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = re.sub(r"_token_\d+$", "", e["name"][:-len("_kernel_time")])
            times[name].append(float(e["dur"]))
    return {n: t[warmup:] or t for n, t in times.items()}


def kiln_nodes(csv_path):
    """{node name: (op type, implementation, X shape, W shape, [us per run])}."""
    nodes = {}
    with open(csv_path) as f:
        for row in csv.DictReader(f):
            shapes = row["input shapes"].split(";")
            conv = "Conv" in row["op type"]
            entry = nodes.setdefault(row["op name"], (row["op type"], row["implementation"], shapes[0],
                                                      shapes[3] if conv and len(shapes) > 3 else "", []))
            entry[4].append(float(row["duration us"]))
    return nodes


def group_key(op_type, impl, x_shape, w_shape):
    """(op type, input H, kernel, implementation without the ISA), e.g. (FusedQLinearConv, 56, k3, brgconv)."""
    dims = x_shape.split("x")
    size = dims[-2] if len(dims) == 5 else (dims[2] if len(dims) == 4 else "")
    kernel = "k" + w_shape.split("x")[-1] if w_shape else ""
    name = impl.split(":")[1] if impl.count(":") >= 1 else impl
    return (op_type, size, kernel, name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kiln_csv")
    ap.add_argument("ort_trace")
    ap.add_argument("--nodes", action="store_true", help="print every node too")
    ap.add_argument("--ort-warmup", type=int, default=5)
    a = ap.parse_args()
    try:
        kiln = kiln_nodes(a.kiln_csv)
        ort = ort_nodes(a.ort_trace, a.ort_warmup)
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"profile_join: {e}")
    if not kiln or not ort:
        sys.exit("profile_join: no nodes in " + (a.kiln_csv if not kiln else a.ort_trace))
    groups = collections.OrderedDict()
    matched = set()
    total_kiln = sum(statistics.median(v[4]) for v in kiln.values())
    for name, (op_type, impl, x_shape, w_shape, runs) in kiln.items():
        ort_name = next((p for p in name.split("+") if p in ort), None)
        k = statistics.median(runs)
        o = statistics.median(ort[ort_name]) if ort_name else 0.0
        if ort_name:
            matched.add(ort_name)
        if a.nodes:
            print(f"{k:8.1f} {o:8.1f} {k / o if o else 0:5.2f}  {op_type:20s} {impl:38s} {x_shape:16s} {w_shape}")
        g = groups.setdefault(group_key(op_type, impl, x_shape, w_shape), [0.0, 0.0, 0])
        g[0] += k
        g[1] += o
        g[2] += 1
    print(f"{'op type':20s} {'input':>5s} {'kernel':6s} {'implementation':16s} {'nodes':>5s} "
          f"{'kiln us':>9s} {'ort us':>9s} {'kiln/ort':>8s}")
    for (op_type, size, kernel, impl), (k, o, n) in groups.items():
        ratio = f"{k / o:8.2f}" if o else f"{'':8s}"
        print(f"{op_type:20s} {size:>5s} {kernel:6s} {impl:16s} {n:5d} {k:9.1f} {o:9.1f} {ratio}")
    unmatched = {n: statistics.median(t) for n, t in ort.items() if n not in matched}
    total_ort = sum(statistics.median(t) for t in ort.values())
    print(f"all nodes: kiln {total_kiln:.1f} us, ort {total_ort:.1f} us, kiln/ort {total_kiln / total_ort:.3f}")
    print(f"ort nodes without a kiln node ({sum(unmatched.values()):.1f} us): " + ", ".join(sorted(unmatched)))


if __name__ == "__main__":
    main()
