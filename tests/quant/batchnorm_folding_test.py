#!/usr/bin/env python3
"""`kiln quantize` folds BatchNormalization into the Conv before it (src/quant/batchnorm_folding.cc).

A Conv -> BatchNormalization -> Relu model written with onnx.helper is quantised; the QDQ
model must have no BatchNormalization left, and its dequantised weights and biases must be
PyTorch's folding of the same Conv and BatchNorm (torch.nn.utils.fusion.fuse_conv_bn_eval)
within half a quantisation step per channel. A BatchNormalization whose parameters another
node also reads is left alone. The same for Mul / Add by constants after a Conv (PP-OCRv4's
"learnable affine blocks"), against NumPy's W * k and B * k + d.

Usage: batchnorm_folding_test.py KILN WORKDIR
"""
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = WORK = None


def conv_bn_model(rng, shared_scale=False):
    w = rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 6).astype(np.float32)
    gamma = rng.uniform(0.5, 2.0, 6).astype(np.float32)
    beta = rng.normal(0, 0.5, 6).astype(np.float32)
    mean = rng.normal(0, 0.5, 6).astype(np.float32)
    var = rng.uniform(0.2, 3.0, 6).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w, "w"), (b, "b"), (gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn",
                              epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])]
    if shared_scale:  # another reader of gamma: the normalisation must stay
        nodes.append(helper.make_node("Identity", ["gamma"], ["g2"], name="id"))
        outputs.append(helper.make_tensor_value_info("g2", TensorProto.FLOAT, [6]))
    g = helper.make_graph(nodes, "convbn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), (w, b, gamma, beta, mean, var)


def conv_affine_model(rng, shared_scale=False):
    """Conv -> Mul(k: one value) -> Add(d: one per channel, [1, C, 1, 1]) -> Relu."""
    w = rng.normal(0, 0.3, (6, 3, 3, 3)).astype(np.float32)
    b = rng.normal(0, 0.1, 6).astype(np.float32)
    k = np.array([1.7], np.float32)
    d = rng.normal(0, 0.5, (1, 6, 1, 1)).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (k, "k"), (d, "d"))]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["k", "c"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "d"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])]
    if shared_scale:  # another reader of k: the Mul must stay (and the Add after it)
        nodes.append(helper.make_node("Identity", ["k"], ["k2"], name="id"))
        outputs.append(helper.make_tensor_value_info("k2", TensorProto.FLOAT, [1]))
    g = helper.make_graph(nodes, "convaffine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), (w, b, k, d)


def torch_folded(params):
    import torch
    from torch.nn.utils.fusion import fuse_conv_bn_eval

    w, b, gamma, beta, mean, var = params
    conv = torch.nn.Conv2d(3, 6, 3, padding=1)
    bn = torch.nn.BatchNorm2d(6, eps=1e-3)
    with torch.no_grad():
        conv.weight.copy_(torch.from_numpy(w))
        conv.bias.copy_(torch.from_numpy(b))
        bn.weight.copy_(torch.from_numpy(gamma))
        bn.bias.copy_(torch.from_numpy(beta))
        bn.running_mean.copy_(torch.from_numpy(mean))
        bn.running_var.copy_(torch.from_numpy(var))
    fused = fuse_conv_bn_eval(conv.eval(), bn.eval())
    return fused.weight.detach().numpy(), fused.bias.detach().numpy()


def dequantized(model, name_of_dq_output):
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == name_of_dq_output:
            q, s = inits[n.input[0]], inits[n.input[1]]
            shape = [-1] + [1] * (q.ndim - 1)
            return q.astype(np.float64) * s.reshape(shape), s
    raise AssertionError(f"no DequantizeLinear writes {name_of_dq_output}")


class BatchNormFoldingTest(unittest.TestCase):
    def quantise(self, tag, model):
        d = os.path.join(WORK, tag)
        os.makedirs(os.path.join(d, "calib"), exist_ok=True)
        rng = np.random.default_rng(5)
        for i in range(4):
            np.save(os.path.join(d, "calib", f"{i}.npy"), rng.normal(0, 1, (1, 3, 8, 8)).astype(np.float32))
        src, out = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx")
        onnx.save(model, src)
        r = subprocess.run([KILN, "quantize", src, "--calibration", os.path.join(d, "calib"), "-o", out,
                            "--report", os.path.join(d, "report.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return onnx.load(out)

    def test_folded_weights_are_pytorchs(self):
        model, params = conv_bn_model(np.random.default_rng(1))
        q = self.quantise("fold", model)
        ops = [n.op_type for n in q.graph.node]
        self.assertNotIn("BatchNormalization", ops)
        conv = next(n for n in q.graph.node if n.op_type == "Conv")
        w, w_scale = dequantized(q, conv.input[1])
        b, _ = dequantized(q, conv.input[2])
        want_w, want_b = torch_folded(params)
        # Within half a step of each channel's weight scale, and of the bias's (x_scale * w_scale).
        step = w_scale.reshape(-1, 1, 1, 1)
        self.assertTrue(np.all(np.abs(w - want_w) <= 0.5 * step + 1e-7), np.abs(w - want_w).max())
        self.assertLess(float(np.abs(b - want_b).max()), 1e-3)
        # The Conv's output is the normalisation's: Relu reads it, the QDQ pair follows Relu.
        self.assertEqual(conv.output[0], "n")

    def test_affine_folded_into_conv(self):
        model, (w0, b0, k, d) = conv_affine_model(np.random.default_rng(3))
        q = self.quantise("affine", model)
        ops = [n.op_type for n in q.graph.node]
        self.assertNotIn("Mul", ops)
        self.assertNotIn("Add", ops)
        conv = next(n for n in q.graph.node if n.op_type == "Conv")
        w, w_scale = dequantized(q, conv.input[1])
        b, _ = dequantized(q, conv.input[2])
        want_w = w0.astype(np.float64) * float(k[0])
        want_b = b0.astype(np.float64) * float(k[0]) + d.ravel()
        step = w_scale.reshape(-1, 1, 1, 1)
        self.assertTrue(np.all(np.abs(w - want_w) <= 0.5 * step + 1e-7), np.abs(w - want_w).max())
        self.assertLess(float(np.abs(b - want_b).max()), 1e-3)
        self.assertEqual(conv.output[0], "a")  # the Add's output: Relu reads it, the QDQ pair follows Relu

    def test_shared_affine_constant_stays_unfolded(self):
        model, _ = conv_affine_model(np.random.default_rng(4), shared_scale=True)
        ops = [n.op_type for n in self.quantise("affine_shared", model).graph.node]
        self.assertIn("Mul", ops)

    def test_shared_parameters_stay_unfolded(self):
        model, _ = conv_bn_model(np.random.default_rng(2), shared_scale=True)
        q = self.quantise("shared", model)
        self.assertIn("BatchNormalization", [n.op_type for n in q.graph.node])


if __name__ == "__main__":
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
