#!/usr/bin/env python3
"""ONNX Runtime's dynamic quantisation (quantize_dynamic) on Kiln: the dynamic_quant_fusion pass
and the kiln FusedDynamicQuantMatMul kernel, the MatMulInteger kernel for what is not fused.

Small models written with onnx.helper as quantize_dynamic writes them:
DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W_q, x_zp, W_zp) -> Cast(float) ->
Mul(., Mul(x_scale, W_scale)) [-> Add(bias)], with int8 weights per tensor or per column, one
DynamicQuantizeLinear shared by two projections, and a uint8-weight variant the pass leaves
alone. `kiln compile` must report the fusions and the fast kernels, and `kiln run` must equal
NumPy's evaluation of the unfused formula (DynamicQuantizeLinear in float32, the integer
matmul in int64, then float32 Cast, Mul and Add): to float32 rounding.

Usage: dynamic_quant_test.py KILN WORKDIR
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None


def numpy_dql(x):
    """DynamicQuantizeLinear as the ONNX spec writes it, in float32."""
    lo = np.float32(min(0.0, float(x.min())))
    hi = np.float32(max(0.0, float(x.max())))
    scale = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255.0))
    zp = np.float32(np.rint(np.clip(np.float32(0.0) - lo / scale, 0, 255)))
    q = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    return q, scale, np.uint8(zp)


def numpy_unfused(x, w_q, w_scale, bias, w_zp=None):
    q, s, zp = numpy_dql(x)
    zb = np.zeros(w_q.shape[1], np.int64) if w_zp is None else np.broadcast_to(w_zp.astype(np.int64), (w_q.shape[1],))
    acc = (q.astype(np.int64) - int(zp)) @ (w_q.astype(np.int64) - zb)
    y = acc.astype(np.int32).astype(np.float32) * (np.float32(s) * w_scale.astype(np.float32))
    if bias is not None:
        y = y + bias
    return y.astype(np.float32)


class Model:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def const(self, base, array):
        self.count += 1
        name = f"{base}{self.count}"
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def dql(self, x):
        self.count += 1
        outs = [f"xq{self.count}", f"xs{self.count}", f"xz{self.count}"]
        self.nodes.append(helper.make_node("DynamicQuantizeLinear", [x], outs, name=f"dql{self.count}"))
        return outs

    def linear(self, dq, y, k, n, per_column, bias, w_type=np.int8):
        """MatMulInteger ... Mul [-> Add]: returns the arrays NumPy needs."""
        w = self.rng.normal(0, 0.2, (k, n)).astype(np.float32)
        amax = np.abs(w).max(axis=0) if per_column else np.abs(w).max()
        w_scale = (amax / 127.0).astype(np.float32)
        if w_type == np.int8:
            w_q = np.clip(np.rint(w / w_scale), -127, 127).astype(np.int8)
            w_zp = np.zeros(w_scale.shape, np.int8)
        else:
            w_q = np.clip(np.rint(w / w_scale) + 128, 0, 255).astype(np.uint8)
            w_zp = np.full(w_scale.shape, 128, np.uint8)
        self.count += 1
        c = self.count
        mm = [helper.make_node("MatMulInteger", [dq[0], self.const("wq", w_q), dq[2], self.const("wzp", w_zp)],
                               [f"acc{c}"], name=f"mmi{c}"),
              helper.make_node("Cast", [f"acc{c}"], [f"accf{c}"], name=f"cast{c}", to=TensorProto.FLOAT),
              helper.make_node("Mul", [dq[1], self.const("ws", w_scale)], [f"sc{c}"], name=f"smul{c}"),
              helper.make_node("Mul", [f"accf{c}", f"sc{c}"], [f"mul{c}" if bias else y], name=f"mul{c}")]
        self.nodes += mm
        b = None
        if bias:
            b = self.rng.normal(0, 0.5, (n,)).astype(np.float32)
            self.nodes.append(helper.make_node("Add", [f"mul{c}", self.const("b", b)], [y], name=f"add{c}"))
        return w_q, w_scale, b, w_zp

    def save(self, path, x_shape, outputs):
        g = helper.make_graph(self.nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs],
                              self.inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def run(args):
    return subprocess.run([KILN] + args, capture_output=True, text=True)


class DynamicQuantTest(unittest.TestCase):
    def compile_and_run(self, d, model, x_shape, outputs, x):
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        model.save(path, x_shape, outputs)
        np.save(os.path.join(d, "x.npy"), x)
        report = os.path.join(d, "report.json")
        r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        od = os.path.join(d, "out")
        r = run(["run", os.path.join(d, "m.kiln"), "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", od])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(od, "outputs.json")) as f:
            meta = json.load(f)
        return rep, {name: np.load(os.path.join(od, e["file"])) for name, e in meta.items()}

    def assert_close(self, got, want, what):
        # float32 rounding of the epilogue's two or three operations
        tol = 4 * np.finfo(np.float32).eps * (np.abs(want) + 1e-30)
        bad = np.abs(got.astype(np.float64) - want.astype(np.float64)) > tol
        self.assertFalse(bad.any(), f"{what}: {int(bad.sum())} of {bad.size} differ, max "
                                    f"{float(np.abs(got - want).max())}")

    def test_fused_linear_layers(self):
        for per_column in (False, True):
            for bias in (False, True):
                tag = f"pc{int(per_column)}_b{int(bias)}"
                m = Model(seed=3 + 2 * per_column + bias)
                dq = m.dql("x")
                w_q, w_scale, b, _ = m.linear(dq, "y", 96, 40, per_column, bias)
                x = m.rng.normal(0.3, 1.5, (2, 17, 96)).astype(np.float32)
                rep, outs = self.compile_and_run(os.path.join(WORK, tag), m, [2, 17, 96], [("y", [2, 17, 40])], x)
                self.assertEqual(rep["fusions"].get("FusedDynamicQuantMatMul"), 1, rep["fusions"])
                self.assertEqual(rep["kernels"].get("kiln.FusedDynamicQuantMatMul/onednn"), 1, rep["kernels"])
                self.assert_close(outs["y"], numpy_unfused(x, w_q, w_scale, b), tag)

    def test_shared_quantisation_feeds_two_layers(self):
        m = Model(seed=21)
        dq = m.dql("x")
        w1, s1, b1, _ = m.linear(dq, "y1", 64, 32, True, True)
        w2, s2, b2, _ = m.linear(dq, "y2", 64, 24, False, True)
        x = m.rng.normal(-0.2, 2.0, (33, 64)).astype(np.float32)
        rep, outs = self.compile_and_run(os.path.join(WORK, "shared"), m, [33, 64],
                                         [("y1", [33, 32]), ("y2", [33, 24])], x)
        self.assertEqual(rep["fusions"].get("FusedDynamicQuantMatMul"), 2, rep["fusions"])
        self.assert_close(outs["y1"], numpy_unfused(x, w1, s1, b1), "y1")
        self.assert_close(outs["y2"], numpy_unfused(x, w2, s2, b2), "y2")

    def test_uint8_weights_run_unfused_on_the_matmul_integer_kernel(self):
        m = Model(seed=5)
        dq = m.dql("x")
        w_q, w_scale, b, w_zp = m.linear(dq, "y", 48, 20, True, True, w_type=np.uint8)
        x = m.rng.normal(0.0, 1.0, (1, 9, 48)).astype(np.float32)
        rep, outs = self.compile_and_run(os.path.join(WORK, "u8w"), m, [1, 9, 48], [("y", [1, 9, 20])], x)
        self.assertIsNone(rep["fusions"].get("FusedDynamicQuantMatMul"), rep["fusions"])
        self.assertEqual(rep["kernels"].get("MatMulInteger/onednn"), 1, rep["kernels"])
        self.assert_close(outs["y"], numpy_unfused(x, w_q, w_scale, b, w_zp), "u8 weights")

    def test_open_dims_run_on_the_fast_kernels_per_shape(self):
        """A model compiled without --input-shape, x [batch, seq, K], two layers deep, outputs
        declared without shapes: MatMulInteger's inference keeps the rank (MatMul's rule), so
        every chain fuses (the pass needs ranks) and the nodes get per-shape fast kernels."""
        m = Model(seed=9)
        w1, s1, b1, _ = m.linear(m.dql("x"), "h", 64, 48, True, True)
        w2, s2, b2, _ = m.linear(m.dql("h"), "y1", 48, 24, False, True)
        w3, s3, b3, z3 = m.linear(m.dql("h"), "y2", 48, 16, True, True, w_type=np.uint8)
        d = os.path.join(WORK, "open")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        m.save(path, ["batch", "seq", 64], [("h", None), ("y1", None), ("y2", None)])
        report = os.path.join(d, "report.json")
        r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        self.assertEqual(rep["fusions"].get("FusedDynamicQuantMatMul"), 2, rep["fusions"])
        self.assertEqual(rep["kernels"].get("kiln.FusedDynamicQuantMatMul/onednn"), 2, rep["kernels"])
        self.assertEqual(rep["kernels"].get("MatMulInteger/onednn"), 1, rep["kernels"])
        self.assertGreaterEqual(rep["per_shape_kernels"], 3, rep)
        for shape in ((2, 17, 64), (1, 5, 64)):
            x = m.rng.normal(0.1, 1.2, shape).astype(np.float32)
            xp = os.path.join(d, "x.npy")
            np.save(xp, x)
            od = os.path.join(d, "out_%d_%d" % shape[:2])
            r = run(["run", os.path.join(d, "m.kiln"), "--input", "x=" + xp, "--output-dir", od])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(od, "outputs.json")) as f:
                meta = json.load(f)
            outs = {name: np.load(os.path.join(od, e["file"])) for name, e in meta.items()}
            h = outs["h"]
            self.assertEqual(h.shape, shape[:2] + (48,))
            self.assert_close(h, numpy_unfused(x, w1, s1, b1), f"h at {shape}")
            # The second layer from Kiln's h: NumPy's h may round an activation to the other
            # side of a quantisation step.
            self.assert_close(outs["y1"], numpy_unfused(h, w2, s2, b2), f"y1 at {shape}")
            self.assert_close(outs["y2"], numpy_unfused(h, w3, s3, b3, z3), f"y2 at {shape}")

if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1])
