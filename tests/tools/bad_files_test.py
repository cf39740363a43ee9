#!/usr/bin/env python3
"""Feeds truncated, bit-flipped and random .kiln and .onnx files to `kiln run`,
`kiln inspect` and `kiln compile`. Each must end with a one-line error on stderr and an
exit code in 1..127 (no crash, no hang). The one exception is a bit-flipped ONNX file that
is still a valid model (ONNX has no checksum, e.g. a flipped weight bit): it may succeed.

usage: bad_files_test.py KILN_BINARY WORK_DIR [--count N]
"""
import argparse
import os
import random
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def make_model(path):
    """A small CNN-like model with weights: Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> Softmax."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    fw = numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fw")
    fb = numpy_helper.from_array(rng.standard_normal(10).astype(np.float32), "fb")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name="fc"),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [w, b, fw, fb])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, path)


def corruptions(data, rng, count, label):
    """Yields (name, bytes, may_succeed) variants of `data`."""
    n = len(data)
    third = max(count // 3, 1)
    for i in range(third):  # truncations, spread over the file, plus the edges
        cut = [0, 1, 7, 8, 63, 64, 65, n - 1][i] if i < 8 else rng.randrange(0, n)
        yield f"{label}_trunc_{cut}", data[:cut], False
    for i in range(third):  # one to eight flipped bits
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            pos = rng.randrange(0, n)
            b[pos] ^= 1 << rng.randrange(0, 8)
        yield f"{label}_flip_{i}", bytes(b), label == "onnx"
    for i in range(count - 2 * third):  # random bytes, sometimes behind a valid prefix
        size = rng.randrange(0, 4096)
        junk = bytes(rng.getrandbits(8) for _ in range(size))
        if i % 2:
            junk = data[: rng.randrange(0, min(n, 256))] + junk
        yield f"{label}_random_{i}", junk, False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("work")
    ap.add_argument("--count", type=int, default=120, help="files per format")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    src = os.path.join(args.work, "small.onnx")
    good_kiln = os.path.join(args.work, "small.kiln")
    make_model(src)
    r = subprocess.run([args.kiln, "compile", src, "-o", good_kiln], capture_output=True, text=True)
    if r.returncode != 0:
        print("cannot compile the valid model:", r.stderr)
        return 1

    rng = random.Random(1234)
    bad_dir = os.path.join(args.work, "bad")
    os.makedirs(bad_dir, exist_ok=True)
    cases = []
    for label, path in (("kiln", good_kiln), ("onnx", src)):
        data = open(path, "rb").read()
        for name, blob, may_succeed in corruptions(data, rng, args.count, label):
            p = os.path.join(bad_dir, name + "." + label)
            with open(p, "wb") as f:
                f.write(blob)
            cases.append((p, may_succeed))

    failures = 0
    runs = 0
    succeeded_ok = 0
    out_kiln = os.path.join(args.work, "out.kiln")
    for path, may_succeed in cases:
        for cmd in (["run", path], ["inspect", path], ["compile", path, "-o", out_kiln]):
            runs += 1
            try:
                r = subprocess.run([args.kiln] + cmd, capture_output=True, text=True, errors="replace", timeout=60)
            except subprocess.TimeoutExpired:
                print(f"FAIL (hang) kiln {' '.join(cmd)}")
                failures += 1
                continue
            err_lines = [l for l in r.stderr.splitlines() if l.strip()]
            if r.returncode == 0 and may_succeed:
                succeeded_ok += 1
                continue
            if not (1 <= r.returncode < 128) or len(err_lines) != 1:
                failures += 1
                print(f"FAIL kiln {' '.join(cmd)}: exit {r.returncode}, stderr {len(err_lines)} lines:")
                print("   " + "\n   ".join(err_lines[:5]))
    print(f"{len(cases)} corrupted files, {runs} runs: {runs - failures - succeeded_ok} clean errors, "
          f"{succeeded_ok} bit-flipped ONNX models still valid and run, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
