"""Helpers the int8 model tests of tests/quant share: ONNX Runtime (onnxruntime-node) as the
peer on a QDQ file, and DequantizeLinear as ONNX defines it."""
import json
import os
import shutil
import subprocess

import numpy as np
from onnx import TensorProto

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_SCRIPT = os.path.join(REPO, "tests", "e2e", "ort_reference.js")
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def ort_available():
    """node and onnxruntime-node are installed (tests/e2e/ort_reference.js resolves it)."""
    if not shutil.which("node"):
        return False
    probe = subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=REPO, capture_output=True)
    return probe.returncode == 0


def run_ort(model_path, out_dir, feeds):
    """ONNX Runtime's outputs of `model_path` on feeds {name: .npy path}, as {name: array}; raises
    RuntimeError with ORT's message when it fails."""
    r = subprocess.run(["node", ORT_SCRIPT, model_path, out_dir] + [f"{k}={v}" for k, v in feeds.items()], cwd=REPO,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr)
    with open(os.path.join(out_dir, "outputs.json")) as f:
        listing = json.load(f)
    return {k: np.load(os.path.join(out_dir, v["file"])) for k, v in listing.items()}


def dequantize(q, scale, zp):
    """DequantizeLinear: (q - zp) * scale in float32."""
    return ((q.astype(np.int32) - zp).astype(np.float32) * np.float32(scale)).astype(np.float32)


def assert_compile_errors(test, kiln, work, node, cases):
    """Each (tag, model, message) of `cases`: `kiln compile` of the model exits 1 with an error
    naming `node` (e.g. "'qconv' (kiln.FusedQLinearConv)") and holding `message`."""
    import onnx  # only the tests that write models need it

    for tag, model, message in cases:
        d = os.path.join(work, "bad_" + tag)
        os.makedirs(d, exist_ok=True)
        onnx.save(model, os.path.join(d, "m.onnx"))
        r = subprocess.run([kiln, "compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln")],
                           capture_output=True, text=True)
        test.assertEqual(r.returncode, 1, f"{tag}: {r.stderr}")
        test.assertIn(node, r.stderr, tag)
        test.assertIn(message, r.stderr, tag)
