#!/usr/bin/env python3
"""`kiln quantize` stores Transpose(W) of a constant W transposed (src/quant/transpose_folding.cc).

MatMul(x, Transpose(W)), as PyTorch exports linear layers, must come out with the MatMul
reading DequantizeLinear of an int8 initializer whose dequantised values are NumPy's W.T within
half a quantisation step per column, no Transpose left, and W itself gone. A Transpose of an
activation is left alone.

Usage: transpose_folding_test.py KILN WORKDIR
"""
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = WORK = None


class TransposeFoldingTest(unittest.TestCase):
    def test_linear_layer_weights(self):
        d = os.path.join(WORK, "linear")
        os.makedirs(os.path.join(d, "calib"), exist_ok=True)
        rng = np.random.default_rng(2)
        w = rng.normal(0, 0.2, (12, 16)).astype(np.float32)  # [out, in], as nn.Linear stores it
        nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="t", perm=[1, 0]),
                 helper.make_node("MatMul", ["x", "wt"], ["h"], name="mm"),
                 helper.make_node("Transpose", ["h"], ["y"], name="t_act", perm=[1, 0, 2])]
        g = helper.make_graph(nodes, "lin", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2, 12])],
                              [numpy_helper.from_array(w, "w")])
        src, out = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
        for i in range(3):
            np.save(os.path.join(d, "calib", f"{i}.npy"), rng.normal(0, 1, (2, 3, 16)).astype(np.float32))
        r = subprocess.run([KILN, "quantize", src, "--calibration", os.path.join(d, "calib"), "-o", out,
                            "--op-types", "MatMul", "--report", os.path.join(d, "r.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        q = onnx.load(out)
        inits = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
        self.assertNotIn("w", inits)
        self.assertEqual([n.name for n in q.graph.node if n.op_type == "Transpose"], ["t_act"])
        mm = next(n for n in q.graph.node if n.op_type == "MatMul")
        dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] == mm.input[1])
        wq, scale = inits[dq.input[0]], inits[dq.input[1]]
        self.assertEqual(wq.dtype, np.int8)
        self.assertEqual(wq.shape, (16, 12))
        got = wq.astype(np.float64) * scale.reshape(1, -1)
        self.assertTrue(np.all(np.abs(got - w.T) <= 0.5 * scale.reshape(1, -1) + 1e-7))


if __name__ == "__main__":
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
