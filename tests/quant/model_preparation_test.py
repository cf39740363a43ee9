#!/usr/bin/env python3
"""`kiln quantize` on models as older exporters write them (src/quant/opset_upgrade.cc,
src/quant/constant_nodes.cc): ai.onnx opset 11 with the weights in Constant nodes and a
Softmax whose rank only shape inference knows (PaddlePaddle's PP-OCR exports look like this).

The QDQ model must import opset 13, pass onnx.checker, quantise the Conv (its weights read
through DequantizeLinear of an int8 initializer), and, run by ONNX Runtime, stay close to the
float model run by ONNX Runtime (softmax outputs within 0.02).

Usage: model_preparation_test.py KILN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = WORK = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ORT_SCRIPT = os.path.join(REPO, "tests", "e2e", "ort_reference.js")


def ort(path, x, out_dir):
    r = subprocess.run(["node", ORT_SCRIPT, path, out_dir, "x=" + x], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out_dir, "outputs.json")) as f:
        (entry,) = json.load(f).values()
    return np.load(os.path.join(out_dir, entry["file"]))


class ModelPreparationTest(unittest.TestCase):
    def test_opset11_constant_weights(self):
        d = os.path.join(WORK, "opset11")
        cal = os.path.join(d, "calib")
        os.makedirs(cal, exist_ok=True)
        rng = np.random.default_rng(8)
        w = rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)
        nodes = [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(w, "w")),
                 helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c"], ["r"], name="relu"),
                 # Open spatial dims: only shape inference knows this Reshape gives rank 3.
                 helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([0, 6, -1], np.int64), "shape")),
                 helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
                 helper.make_node("Softmax", ["flat"], ["y"], name="softmax", axis=2)]
        g = helper.make_graph(nodes, "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, "n"])])
        src, out = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), src)
        for i in range(4):
            np.save(os.path.join(cal, f"{i}.npy"), rng.normal(0, 1, (1, 3, 8, 10)).astype(np.float32))
        r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", out, "--op-types", "Conv",
                            "--report", os.path.join(d, "r.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("converted to ai.onnx opset 13", r.stderr)
        q = onnx.load(out)
        onnx.checker.check_model(q)
        self.assertEqual(max(o.version for o in q.opset_import if o.domain in ("", "ai.onnx")), 13)
        conv = next(n for n in q.graph.node if n.op_type == "Conv")
        dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == conv.input[1])
        inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
        self.assertEqual(inits[dq.input[0]].dtype, np.int8)
        if not (shutil.which("node") and subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=REPO,
                                                         capture_output=True).returncode == 0):
            return
        x = os.path.join(cal, "0.npy")
        want = ort(src, x, os.path.join(d, "ort_float"))
        got = ort(out, x, os.path.join(d, "ort_qdq"))
        self.assertEqual(got.shape, want.shape)
        self.assertLess(float(np.abs(got - want).max()), 0.02)


if __name__ == "__main__":
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
