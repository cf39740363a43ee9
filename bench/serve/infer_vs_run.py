#!/usr/bin/python3
"""Correctness acceptance of `kiln serve` (issue 30): for every end-to-end model of
tests/e2e/README.md, the outputs of `POST /v2/models/<m>/infer` equal those of
`kiln run --input NAME=FILE.npy --output-dir DIR` on the same inputs and the same compiled
model, bit for bit, through binary tensors and through JSON tensors.

The models, inputs and ONNX files come from the e2e cache (`ctest -L e2e` or
tests/e2e/run_e2e.sh fills BUILD/e2e/models; the OCR models from node_modules/@gutenye/
ocr-models). Each is compiled once as run_e2e.sh does (the same --input-shape), run by
`kiln run`, then served from one repository by one `kiln serve` (1 device, the same thread
count as kiln run, one). Too slow for CI (ResNet-50, BERT and PP-OCRv4 det compile and run here);
tests/serve checks the same path on small models against NumPy.

usage: bench/serve/infer_vs_run.py [--kiln build/release/tools/kiln] [--work /tmp/kiln_infer_vs_run]
                                   [--models resnet50,mobilenet_v2,bert,ocr_det,ocr_rec,ocr_cls]
exit 1 when any output differs.
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

from serve_bench import ROOT, Server

MODELS = {  # name: (ONNX file, kiln compile --input-shape), as tests/e2e/run_e2e.sh
    "resnet50": (None, "input:1,3,224,224"),
    "mobilenet_v2": (None, None),
    "bert": (None, None),
    "ocr_det": ("ch_PP-OCRv4_det_infer.onnx", "x:1,3,640,640"),
    "ocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", "x:1,3,48,320"),
    "ocr_cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "x:1,3,48,192"),
}
DATATYPES = {np.dtype(np.float32): "FP32", np.dtype(np.float64): "FP64", np.dtype(np.int64): "INT64",
             np.dtype(np.int32): "INT32", np.dtype(np.uint8): "UINT8", np.dtype(np.bool_): "BOOL"}
NUMPY = {v: k for k, v in DATATYPES.items()}


def post(port, model, body, headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def infer_binary(port, model, inputs):
    header = {"inputs": [{"name": n, "datatype": DATATYPES[a.dtype], "shape": list(a.shape),
                          "parameters": {"binary_data_size": a.nbytes}} for n, a in inputs.items()],
              "parameters": {"binary_data_output": True}}
    h = json.dumps(header).encode()
    status, headers, data = post(port, model, h + b"".join(np.ascontiguousarray(a).tobytes() for a in inputs.values()),
                                 {"Inference-Header-Content-Length": str(len(h)),
                                  "Content-Type": "application/octet-stream"})
    if status != 200:
        raise RuntimeError(f"{model}: binary request answered {status}: {data[:300]}")
    n = int(headers["Inference-Header-Content-Length"])
    out, offset = {}, n
    for o in json.loads(data[:n])["outputs"]:
        size = o["parameters"]["binary_data_size"]
        out[o["name"]] = np.frombuffer(data[offset:offset + size], dtype=NUMPY[o["datatype"]]).reshape(o["shape"])
        offset += size
    return out


def infer_json(port, model, inputs):
    body = {"inputs": [{"name": n, "datatype": DATATYPES[a.dtype], "shape": list(a.shape),
                        "data": a.ravel().tolist()} for n, a in inputs.items()]}
    status, _, data = post(port, model, json.dumps(body), {"Content-Type": "application/json"})
    if status != 200:
        raise RuntimeError(f"{model}: JSON request answered {status}: {data[:300]}")
    return {o["name"]: np.array(o["data"], dtype=NUMPY[o["datatype"]]).reshape(o["shape"])
            for o in json.loads(data)["outputs"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--work", default="/tmp/kiln_infer_vs_run")
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    e2e = os.path.join(os.path.dirname(os.path.dirname(kiln)), "e2e", "models")
    repo = os.path.join(args.work, "repo")
    names = args.models.split(",")
    runs = {}
    for m in names:
        onnx_file, shape = MODELS[m]
        src = os.path.join(e2e, m)
        onnx_path = os.path.join(ROOT, "node_modules", "@gutenye", "ocr-models", "assets", onnx_file) if onnx_file \
            else os.path.join(src, "model.onnx")
        inputs = sorted(f for f in os.listdir(src) if f.startswith("input_")) if os.path.isdir(src) else []
        if not os.path.exists(onnx_path) or not inputs:
            sys.exit(f"{m}: {onnx_path} or the inputs in {src} are missing: run `ctest --test-dir build/release -L e2e`")
        model_file = os.path.join(repo, m, "1", "model.kiln")
        os.makedirs(os.path.dirname(model_file), exist_ok=True)
        start = time.time()
        subprocess.run([kiln, "compile", onnx_path, "-o", model_file, "-q"] + (["--input-shape", shape] if shape else []),
                       check=True)
        compiled = time.time() - start
        out_dir = os.path.join(args.work, "run", m)
        feeds = {f[len("input_"):-len(".npy")]: os.path.join(src, f) for f in inputs}
        cmd = [kiln, "run", model_file, "--output-dir", out_dir, "--threads", "1"]
        for name, path in feeds.items():
            cmd += ["--input", f"{name}={path}"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        runs[m] = (feeds, out_dir, compiled)
        print(f"{m}: compiled in {compiled:.1f} s; kiln run: {' '.join(cmd[1:])}", flush=True)

    server = Server(kiln, repo, 1, "dynamic")  # one device of one thread, as kiln run --threads 1
    failures = 0
    print(f"\n{'model':<14}{'output':<26}{'shape':<20}{'dtype':<9}{'binary':<14}{'json':<14}max|serve-run|")
    try:
        for m in names:
            feeds, out_dir, _ = runs[m]
            inputs = {name: np.load(path) for name, path in feeds.items()}
            got = {"binary": infer_binary(server.port, m, inputs), "json": infer_json(server.port, m, inputs)}
            written = json.load(open(os.path.join(out_dir, "outputs.json")))  # name: {file, dtype, shape}
            for name, entry in written.items():
                ref = np.load(os.path.join(out_dir, entry["file"]))
                verdicts, worst = [], 0.0
                for how in ("binary", "json"):
                    y = got[how].get(name)
                    same = y is not None and y.dtype == ref.dtype and y.shape == ref.shape and \
                        np.array_equal(y, ref, equal_nan=ref.dtype.kind == "f")
                    if y is not None and y.shape == ref.shape:
                        worst = max(worst, float(np.max(np.abs(y.astype(np.float64) - ref.astype(np.float64))))
                                    if ref.size else 0.0)
                    verdicts.append("identical" if same else "DIFFERENT")
                    failures += not same
                print(f"{m:<14}{name:<26}{str(list(ref.shape)):<20}{ref.dtype.name:<9}{verdicts[0]:<14}"
                      f"{verdicts[1]:<14}{worst:g}", flush=True)
    finally:
        server.stop()
    print(f"\n{'all outputs identical' if failures == 0 else f'{failures} output(s) differ'} "
          f"({len(names)} models, binary and JSON tensors, kiln serve --devices cpu:1 --threads 1 vs kiln run "
          "--threads 1)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
