#!/usr/bin/python3
"""Compares Kiln's outputs with reference outputs.

Usage: compare.py EXPECTED_DIR KILN_OUTPUT_DIR [--rel 1e-4] [--atol 0] [--kiln-reference]
                  [--min-cosine C [--same-argmax]]

EXPECTED_DIR holds expected_<name>.npy files (name sanitised: every char outside [A-Za-z0-9._-]
becomes '_'). KILN_OUTPUT_DIR is what `kiln run --output-dir` wrote: one .npy per output and
outputs.json mapping each output name to {"file", "dtype", "shape"}. With --kiln-reference,
EXPECTED_DIR is such a folder too (e.g. the outputs of the model compiled at -O0, to check
that optimisation did not change them).

Every expected output must be present with the same dtype and shape, and satisfy
max|kiln - ref| <= atol + rel * max|ref| (floating point) or be equal (integer and bool
outputs). Prints one line per output, then the worst max|kiln - ref| / max|ref| over the
floating-point outputs; exits 1 on any FAIL or missing output, 2 on bad usage or files.

With --min-cosine (reduced-precision runs, `kiln compile --precision bf16|mixed`), a
floating-point output passes when the cosine similarity of the flattened outputs is >= C
instead, and with --same-argmax also when the argmax along the last axis (a classifier's
top-1 class) is the same everywhere; the max relative error is printed beside them.
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


def read_index(path):
    """The outputs.json of a `kiln run --output-dir` folder, or None (after saying why)."""
    try:
        with open(path) as f:
            index = json.load(f)
    except (OSError, ValueError) as e:
        print(f"compare.py: cannot read {path}: {e}", file=sys.stderr)
        return None
    if not isinstance(index, dict):
        print(f"compare.py: {path}: expected a JSON object of outputs", file=sys.stderr)
        return None
    return index


def fmt_shape(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("expected_dir")
    parser.add_argument("kiln_output_dir")
    parser.add_argument("--rel", type=float, default=1e-4,
                        help="bound on max abs diff relative to max|ref| (default 1e-4)")
    parser.add_argument("--atol", type=float, default=0.0,
                        help="absolute slack added to the bound, for outputs near 0 (default 0)")
    parser.add_argument("--kiln-reference", action="store_true",
                        help="EXPECTED_DIR is a `kiln run --output-dir` folder (e.g. the -O0 run)")
    parser.add_argument("--min-cosine", type=float, default=None,
                        help="pass floating outputs on cosine similarity >= this instead of --rel")
    parser.add_argument("--same-argmax", action="store_true",
                        help="with --min-cosine: the argmax along the last axis must match too")
    args = parser.parse_args()
    if args.same_argmax and args.min_cosine is None:
        parser.error("--same-argmax needs --min-cosine")
    if not (args.rel >= 0):
        parser.error("--rel must be >= 0")
    if not (args.atol >= 0):
        parser.error("--atol must be >= 0")

    index_path = os.path.join(args.kiln_output_dir, "outputs.json")
    index = read_index(index_path)
    if index is None:
        return 2
    if args.kiln_reference:
        ref_index = read_index(os.path.join(args.expected_dir, "outputs.json"))
        if ref_index is None:
            return 2
        # The reference's files under the names the loop below looks up.
        ref_files = {}
        for name, entry in ref_index.items():
            if not isinstance(entry, dict) or "file" not in entry:
                print(f"compare.py: {args.expected_dir}/outputs.json: bad entry for {name}",
                      file=sys.stderr)
                return 2
            ref_files["expected_" + sanitize_chars(name) + ".npy"] = entry["file"]
        expected = sorted(ref_files)
    else:
        ref_files = None
        expected = sorted(f for f in os.listdir(args.expected_dir)
                          if f.startswith("expected_") and f.endswith(".npy"))
    if not expected:
        print(f"compare.py: no expected_*.npy in {args.expected_dir}", file=sys.stderr)
        return 2

    by_key = {}
    for name, entry in index.items():
        for key in (sanitize_chars(name), sanitize_bytes(name)):
            by_key.setdefault(key, (name, entry))

    failures = 0
    worst = 0.0
    matched = set()
    for fname in expected:
        key = fname[len("expected_"):-len(".npy")]
        ref_file = ref_files[fname] if ref_files is not None else fname
        ref = np.load(os.path.join(args.expected_dir, ref_file), allow_pickle=False)
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
            scale = float(np.max(np.abs(r)))
            bound = args.atol + args.rel * scale
            if scale > 0:
                worst = max(worst, diff / scale)
            if args.min_cosine is not None:
                norms = float(np.linalg.norm(o) * np.linalg.norm(r))
                cos = float(np.dot(o.ravel(), r.ravel()) / norms) if norms > 0 else float(diff == 0)
                ok = cos >= args.min_cosine
                note = f"cosine {cos:.6f} (min {args.min_cosine:g}), max rel {diff / scale if scale else 0:.3g}"
                if args.same_argmax and r.ndim >= 1:
                    same = np.array_equal(np.argmax(o, axis=-1), np.argmax(r, axis=-1))
                    ok = ok and same
                    note += f", argmax {'same' if same else 'DIFFERS'} ({np.argmax(o, axis=-1).ravel()[:4].tolist()} vs {np.argmax(r, axis=-1).ravel()[:4].tolist()})"
                if not ok:
                    failures += 1
                print(f"{name:<28} {fmt_shape(ref.shape):<16} {note} {'PASS' if ok else 'FAIL'}")
                continue
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
    print(f"worst relative diff (max|kiln - ref| / max|ref|): {worst:.3g} (bound {args.rel:g})")
    print(f"{len(expected) - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
