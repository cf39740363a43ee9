#!/usr/bin/python3
"""Compares Kiln's outputs with reference outputs.

Usage: compare.py EXPECTED_DIR KILN_OUTPUT_DIR [--rel 1e-4]

EXPECTED_DIR holds expected_<name>.npy files (name sanitised: every char outside [A-Za-z0-9._-]
becomes '_'). KILN_OUTPUT_DIR is what `kiln run --output-dir` wrote: one .npy per output and
outputs.json mapping each output name to {"file", "dtype", "shape"}.

Every expected output must be present with the same dtype and shape, and satisfy
max|kiln - ref| <= rel * max|ref| (floating point) or be equal (integer and bool outputs).
Prints one line per output; exits 1 on any FAIL or missing output, 2 on bad usage or files.
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np


def sanitize_chars(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def sanitize_bytes(name):
    # A byte-wise sanitiser turns one non-ASCII char into several '_'; accept that spelling too.
    return "".join(chr(b) if re.match(rb"[A-Za-z0-9._-]", bytes([b])) else "_"
                   for b in name.encode("utf-8"))


def fmt_shape(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("expected_dir")
    parser.add_argument("kiln_output_dir")
    parser.add_argument("--rel", type=float, default=1e-4,
                        help="bound on max abs diff relative to max|ref| (default 1e-4)")
    args = parser.parse_args()
    if not (args.rel >= 0):
        parser.error("--rel must be >= 0")

    expected = sorted(f for f in os.listdir(args.expected_dir)
                      if f.startswith("expected_") and f.endswith(".npy"))
    if not expected:
        print(f"compare.py: no expected_*.npy in {args.expected_dir}", file=sys.stderr)
        return 2
    index_path = os.path.join(args.kiln_output_dir, "outputs.json")
    try:
        with open(index_path) as f:
            index = json.load(f)
    except (OSError, ValueError) as e:
        print(f"compare.py: cannot read {index_path}: {e}", file=sys.stderr)
        return 2
    if not isinstance(index, dict):
        print(f"compare.py: {index_path}: expected a JSON object of outputs", file=sys.stderr)
        return 2

    by_key = {}
    for name, entry in index.items():
        for key in (sanitize_chars(name), sanitize_bytes(name)):
            by_key.setdefault(key, (name, entry))

    failures = 0
    matched = set()
    for fname in expected:
        key = fname[len("expected_"):-len(".npy")]
        ref = np.load(os.path.join(args.expected_dir, fname), allow_pickle=False)
        if key not in by_key:
            print(f"{key:<28} {fmt_shape(ref.shape):<16} MISSING from {index_path}  FAIL")
            failures += 1
            continue
        name, entry = by_key[key]
        matched.add(name)
        problems = []
        try:
            out = np.load(os.path.join(args.kiln_output_dir, entry["file"]), allow_pickle=False)
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"{name:<28} {fmt_shape(ref.shape):<16} cannot read Kiln output: {e}  FAIL")
            failures += 1
            continue
        # outputs.json must agree with the file it describes.
        if str(entry.get("dtype")) != out.dtype.name:
            problems.append(f"outputs.json dtype {entry.get('dtype')} but file has {out.dtype.name}")
        if list(entry.get("shape", [])) != list(out.shape):
            problems.append(f"outputs.json shape {entry.get('shape')} but file has "
                            f"{fmt_shape(out.shape)}")
        if out.dtype != ref.dtype:
            problems.append(f"dtype {out.dtype.name}, expected {ref.dtype.name}")
        if out.shape != ref.shape:
            problems.append(f"shape {fmt_shape(out.shape)}, expected {fmt_shape(ref.shape)}")
        if problems:
            print(f"{name:<28} {fmt_shape(ref.shape):<16} {'; '.join(problems)}  FAIL")
            failures += 1
            continue

        if ref.size == 0:
            diff, bound = 0.0, 0.0
        elif np.issubdtype(ref.dtype, np.floating):
            r = ref.astype(np.float64)
            o = out.astype(np.float64)
            if not np.all(np.isfinite(r)):
                print(f"{name:<28} {fmt_shape(ref.shape):<16} reference is not finite  FAIL")
                failures += 1
                continue
            # NaN in Kiln's output makes the max NaN, which fails the <= below.
            diff = float(np.max(np.abs(o - r)))
            bound = args.rel * float(np.max(np.abs(r)))
        else:
            # Integer and bool outputs (indices, masks) must match exactly.
            diff = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
            bound = 0.0
        ok = diff <= bound and not math.isnan(diff)
        if not ok:
            failures += 1
        print(f"{name:<28} {fmt_shape(ref.shape):<16} max_abs_diff {diff:<12.4g} "
              f"bound {bound:<12.4g} {'PASS' if ok else 'FAIL'}")

    extra = sorted(set(index) - matched)
    if extra:
        print(f"note: Kiln outputs without a reference: {', '.join(extra)}")
    print(f"{len(expected) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
