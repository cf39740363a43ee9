#!/usr/bin/python3
"""Top-1 agreement of two classifiers (fp32 reference vs int8) over an evaluation set.

Runs both models on every sample of DIR (the `.npy` files in name order, each the model's
input with its batch dim, e.g. [1,3,224,224], as bench/quant/collect_images.py writes them)
and prints, against the reference:

  top-1 agreement   share of samples whose argmax is the reference's
  top-5 contains    share of samples whose top-1 is in the reference's top 5
  cosine            of the logits per sample: mean, min and 1st percentile
  max |diff|        of the logits, relative to the reference's max |logit|

and one JSON line. A model is PATH (run by Kiln) or ENGINE:PATH with ENGINE `kiln` or `ort`
(onnxruntime-node via bench/quant/eval_ort.js), so the same QDQ model can be checked on both.
Kiln runs through its Python package (`import kiln`, from PYTHONPATH=build/release/python or
--python-dir); a `.onnx` is compiled on load, a compiled Kiln model loads as is.

usage: eval_top1.py REF INT8 [--data models/quant-data/evaluation] [--limit N] [--threads 2]
                    [--precision P]   (Kiln --precision of REF, e.g. mixed; default fp32)
                    [--also-ref REF2 ...]   (the INT8 outputs, computed once, against REF2 too)
       eval_top1.py M.onnx M.int8.onnx
       eval_top1.py ort:M.onnx kiln:M.int8.onnx
       eval_top1.py kiln:M.onnx kiln:M.int8.onnx --also-ref ort:M.onnx
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def parse_model(spec):
    engine, _, path = spec.partition(":")
    if engine in ("kiln", "ort") and path:
        return engine, path
    return "kiln", spec


def run_kiln(path, files, threads, precision, python_dir):
    if python_dir:
        sys.path.insert(0, python_dir)
    try:
        import kiln
    except ImportError as e:
        sys.exit(f"cannot import kiln ({e}); set PYTHONPATH=build/release/python or --python-dir")
    kw = {"threads": threads}
    if precision:
        kw["precision"] = precision
    t0 = time.perf_counter()
    sess = kiln.InferenceSession(path, **kw)
    load = time.perf_counter() - t0
    ins = sess.get_inputs()
    if len(ins) != 1:
        sys.exit(f"{path}: {len(ins)} inputs; one is supported")
    name = ins[0].name
    outs = []
    t0 = time.perf_counter()
    for f in files:
        x = np.load(f)
        outs.append(np.asarray(sess.run(None, {name: x})[0], np.float32).copy())
    run = time.perf_counter() - t0
    sess.close()
    return np.stack(outs), load, run


def run_ort(path, files, threads):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.npy")
        lst = os.path.join(tmp, "files")
        t0 = time.perf_counter()
        # the file list can be long: chunks of 200 per node run would cost a session load each,
        # so pass them all at once (argv of ~600 paths is far below the OS limit)
        p = subprocess.run(["node", os.path.join(HERE, "eval_ort.js"), path, out, str(threads)]
                           + files, cwd=SRC, capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"onnxruntime on {path} failed:\n{p.stderr.strip()}")
        return np.load(out), 0.0, time.perf_counter() - t0


def run(spec, files, args, precision=None):
    engine, path = parse_model(spec)
    if not os.path.exists(path):
        sys.exit(f"model not found: {path}")
    if engine == "ort":
        return run_ort(path, files, args.threads)
    return run_kiln(path, files, args.threads, precision, args.python_dir)


def compare(ref, test):
    r = ref.reshape(ref.shape[0], -1).astype(np.float64)
    t = test.reshape(test.shape[0], -1).astype(np.float64)
    if r.shape != t.shape:
        sys.exit(f"output shapes differ: {ref.shape} vs {test.shape}")
    top1_r, top1_t = r.argmax(1), t.argmax(1)
    top5_r = np.argsort(-r, axis=1)[:, :5]
    cos = (r * t).sum(1) / np.maximum(np.linalg.norm(r, axis=1) * np.linalg.norm(t, axis=1), 1e-30)
    return {
        "samples": int(r.shape[0]),
        "top1_agreement": float((top1_r == top1_t).mean()),
        "top1_in_ref_top5": float((top5_r == top1_t[:, None]).any(1).mean()),
        "cosine_mean": float(cos.mean()),
        "cosine_min": float(cos.min()),
        "cosine_p1": float(np.percentile(cos, 1)),
        "max_abs_diff_rel": float(np.abs(r - t).max() / max(np.abs(r).max(), 1e-30)),
        "ref_distinct_top1_classes": int(len(np.unique(top1_r))),
        # the reference's class histogram, largest first: a near-constant argmax (an untrained
        # network) makes agreement near-trivial, and this shows it
        "ref_top1_counts": sorted(np.unique(top1_r, return_counts=True)[1].tolist(), reverse=True),
        "disagreeing_samples": [int(i) for i in np.nonzero(top1_r != top1_t)[0][:50]],
    }


def report(ref_spec, args, res, run_r, load_r):
    n = res["samples"]
    print(f"reference: {ref_spec}  ({run_r / n * 1e3:.1f} ms/sample incl. I/O, load {load_r:.1f} s)")
    print(f"samples:   {n} from {args.data}; the reference predicts "
          f"{res['ref_distinct_top1_classes']} distinct classes, counts {res['ref_top1_counts']}")
    print(f"top-1 agreement      {res['top1_agreement'] * 100:.2f}%  "
          f"({round(res['top1_agreement'] * n)}/{n})")
    print(f"top-1 in ref top-5   {res['top1_in_ref_top5'] * 100:.2f}%")
    print(f"cosine of logits     mean {res['cosine_mean']:.6f}  min {res['cosine_min']:.6f}  "
          f"p1 {res['cosine_p1']:.6f}")
    print(f"max |diff| / max |ref| {res['max_abs_diff_rel']:.3e}")
    if res["disagreeing_samples"]:
        print(f"disagreeing samples (first 50): {res['disagreeing_samples']}")
    print(json.dumps({"ref": ref_spec, "test": args.test, "data": args.data, **res}))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref", help="reference (fp32) model: PATH or kiln:PATH or ort:PATH")
    p.add_argument("test", help="model under test (int8): PATH or kiln:PATH or ort:PATH")
    p.add_argument("--data", default=os.path.join(SRC, "models", "quant-data", "evaluation"))
    p.add_argument("--also-ref", action="append", default=[], metavar="SPEC",
                   help="another reference the same test outputs are compared with (repeatable)")
    p.add_argument("--limit", type=int, default=0, help="first N samples only")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default=None, help="Kiln precision for REF (e.g. mixed)")
    p.add_argument("--test-precision", default=None, help="Kiln precision for TEST")
    p.add_argument("--python-dir", default=os.environ.get("KILN_PYTHON_DIR", ""),
                   help="folder holding the kiln Python package (else PYTHONPATH)")
    args = p.parse_args(argv)

    files = sorted(glob.glob(os.path.join(args.data, "*.npy")))
    if args.limit:
        files = files[:args.limit]
    if not files:
        sys.exit(f"no .npy samples in {args.data} (make them with bench/quant/collect_images.py)")

    test, load_t, run_t = run(args.test, files, args, args.test_precision)
    print(f"test:      {args.test}  ({run_t / len(files) * 1e3:.1f} ms/sample incl. I/O, "
          f"load {load_t:.1f} s)")
    for spec in [args.ref] + args.also_ref:   # one run of the test model, every reference
        ref, load_r, run_r = run(spec, files, args, args.precision)
        report(spec, args, compare(ref, test), run_r, load_r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
