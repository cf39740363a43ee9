#!/usr/bin/env python3
"""The residual Add of a quantised network in the epilogue of the int8 convolution before it
(compiler/passes/qlinear_residual_fusion.cc, kernels/cpu/qlinear_conv.cc, the residual inputs
of kiln FusedQLinearConv in ops/fused_qlinear.cc; docs/quantization.md, "The residual in the
epilogue").

The fused epilogue keeps the convolution's saturation but not its rounding, so it may differ
from the QDQ graph by one output step, and by at most one when C_scale < 2 Y_scale (the only
case fused). Checked here on QDQ models with residual blocks:

  - written here, one convolution and one residual Add [+ Relu] (identity and projection
    shortcuts, uint8 and int8, a convolution output that saturates, an output zero point):
    Kiln's output against NumPy's evaluation of the QDQ graph (the convolution exact in int64,
    each Q / DQ / Add step in float32 as ONNX defines it) within one step; against NumPy's
    evaluation of the fused formula (at most one step, and only at float32 ties: on a few
    elements); against ONNX Runtime on the same file (onnxruntime-node, when installed) within
    one step; the number of elements that differ by one step is printed. With
    `--disable-pass qlinear_residual_fusion` (the exact path) the add is not fused and Kiln
    equals the QDQ graph but for float32 ties. A C_scale of 2 Y_scale or more is not fused.
  - a float ResNet-like net (stem, an identity and a projection bottleneck block side by side,
    each ending in Add + Relu as a graph output) quantised by `kiln quantize`: both additions
    fused, Kiln within one step of ONNX Runtime on the QDQ file.

Usage: residual_epilogue_test.py KILN WORKDIR
"""
import json
import os
import subprocess
import sys
import unittest
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from qdq_testing import ONNX_TYPE, assert_compile_errors, dequantize, ort_available, run_ort

KILN = None
WORK = None
PASS = "qlinear_residual_fusion"


def run(args, env=None):
    return subprocess.run([KILN] + args, capture_output=True, text=True, env=env)


def quantize(v, scale, zp, dtype):
    """QuantizeLinear: float32 v / scale, round half to even, saturate."""
    info = np.iinfo(dtype)
    q = np.round((v.astype(np.float32) / np.float32(scale)).astype(np.float64)) + zp
    return np.clip(q, info.min, info.max).astype(dtype)


def conv_int64(xq, x_zp, wq, pad):
    """sum (x - x_zp) * w over the window, exact (NCHW, stride 1, zero point padding)."""
    n, c, h, w = xq.shape
    m, _, kh, kw = wq.shape
    x = np.pad(xq.astype(np.int64) - x_zp, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, m, h + 2 * pad - kh + 1, w + 2 * pad - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + out.shape[2], j:j + out.shape[3]]
            out += np.einsum("nchw,mc->nmhw", patch, wq[:, :, i, j].astype(np.int64))
    return out


class Block:
    """x (int8 / uint8 input) -> s -> DQ -> Conv(DQ(w), b) -> Q(c) -> DQ -> Add(DQ(r)) [-> Relu] -> Q(y) -> DQ -> y,
    with s = x through an identity convolution (1x1, W = I, s quantised as x: s equals x) and r = s (identity
    shortcut, r quantised as x) or r = max(r_in, r_zero_point), a second input through an identity convolution
    and a Relu (projection shortcut; the Relu keeps the epilogue from taking the sum into that convolution). The
    identity convolutions make s and r outputs of int8 convolutions, the channels-last values int8_layout keeps,
    while NumPy knows them exactly."""

    def __init__(self, tag, dtype, c_in, c_out, hw, k, x_q, w_range, c_q, r_q, y_q, relu, shortcut, tail=False, clip=None):
        # clip: (lo, hi), a Clip after the Add instead of the Relu (Relu6 is (0, 6)).
        self.tag, self.dtype, self.relu, self.shortcut, self.tail = tag, dtype, relu, shortcut, tail
        self.clip = None if clip is None else (np.float32(clip[0]), np.float32(clip[1]))
        assert not (relu and clip)
        rng = np.random.default_rng(zlib.crc32(tag.encode()))
        info = np.iinfo(dtype)
        self.x_q, self.c_q, self.r_q, self.y_q = x_q, c_q, r_q, y_q
        self.pad = k // 2
        self.xq = rng.integers(info.min, info.max + 1, (1, c_in, hw, hw)).astype(dtype)
        assert shortcut != "identity" or r_q == x_q
        self.r_in = rng.integers(info.min, info.max + 1, (1, c_out, hw, hw)).astype(dtype)
        self.rq = self.xq if shortcut == "identity" else np.maximum(self.r_in, dtype(r_q[1]))
        self.wq = rng.integers(-w_range, w_range + 1, (c_out, c_in, k, k)).astype(np.int8)
        self.w_scale = rng.uniform(0.5, 1.5, c_out).astype(np.float32) * np.float32(0.01)
        acc_scale = (np.float32(x_q[0]) * self.w_scale).astype(np.float32)
        self.bq = rng.integers(-2000, 2000, c_out).astype(np.int32)
        self.b_scale = acc_scale

    def model(self):
        t = ONNX_TYPE[self.dtype]
        inits = []

        def q(name, scale, zp):
            inits.extend([numpy_helper.from_array(np.array(scale, np.float32), name + "_s"),
                          numpy_helper.from_array(np.array(zp, self.dtype), name + "_z")])
            return [name + "_s", name + "_z"]

        xs, cs, rs, ys = q("x", *self.x_q), q("c", *self.c_q), q("r", *self.r_q), q("y", *self.y_q)
        inits += [numpy_helper.from_array(self.wq, "w"), numpy_helper.from_array(self.w_scale, "w_s"),
                  numpy_helper.from_array(np.zeros(len(self.w_scale), np.int8), "w_z"),
                  numpy_helper.from_array(self.bq, "b"), numpy_helper.from_array(self.b_scale, "b_s"),
                  numpy_helper.from_array(np.zeros(len(self.w_scale), np.int32), "b_z")]
        c_in, c_out = self.xq.shape[1], self.rq.shape[1]
        inits += [numpy_helper.from_array(np.eye(c_in, dtype=np.int8).reshape(c_in, c_in, 1, 1), "i_in"),
                  numpy_helper.from_array(np.eye(c_out, dtype=np.int8).reshape(c_out, c_out, 1, 1), "i_out"),
                  numpy_helper.from_array(np.array(1, np.float32), "i_s"),
                  numpy_helper.from_array(np.array(0, np.int8), "i_z")]
        nodes = [helper.make_node("DequantizeLinear", ["x"] + xs, ["x_in"]),
                 helper.make_node("DequantizeLinear", ["i_in", "i_s", "i_z"], ["i_in_f"]),
                 helper.make_node("Conv", ["x_in", "i_in_f"], ["s_c"], name="stem"),
                 helper.make_node("QuantizeLinear", ["s_c"] + xs, ["s_q"]),
                 helper.make_node("DequantizeLinear", ["s_q"] + xs, ["x_f"]),
                 helper.make_node("DequantizeLinear", ["w", "w_s", "w_z"], ["w_f"], axis=0),
                 helper.make_node("DequantizeLinear", ["b", "b_s", "b_z"], ["b_f"], axis=0),
                 helper.make_node("Conv", ["x_f", "w_f", "b_f"], ["c_f"], name="conv", pads=[self.pad] * 4),
                 helper.make_node("QuantizeLinear", ["c_f"] + cs, ["c_q"]),
                 helper.make_node("DequantizeLinear", ["c_q"] + cs, ["c_d"]),
                 helper.make_node("DequantizeLinear", ["r_q" if self.shortcut != "identity" else "s_q"] + rs,
                                  ["r_d"]),
                 helper.make_node("Add", ["c_d", "r_d"], ["s_f"], name="add")]
        last = "s_f"
        if self.relu:
            nodes.append(helper.make_node("Relu", ["s_f"], ["a_f"], name="relu"))
            last = "a_f"
        if self.clip:
            inits += [numpy_helper.from_array(np.array(self.clip[0], np.float32), "clip_lo"),
                      numpy_helper.from_array(np.array(self.clip[1], np.float32), "clip_hi")]
            nodes.append(helper.make_node("Clip", ["s_f", "clip_lo", "clip_hi"], ["a_f"], name="clip"))
            last = "a_f"
        nodes.append(helper.make_node("QuantizeLinear", [last] + ys, ["y_q"]))
        if self.tail:
            # y through one more identity convolution (y equals its output): the sum is then
            # read by an int8 convolution and stored channels-last, as in ResNet.
            nodes += [helper.make_node("DequantizeLinear", ["y_q"] + ys, ["t_in"]),
                      helper.make_node("DequantizeLinear", ["i_out", "i_s", "i_z"], ["i_tail_f"]),
                      helper.make_node("Conv", ["t_in", "i_tail_f"], ["t_c"], name="tail"),
                      helper.make_node("QuantizeLinear", ["t_c"] + ys, ["t_q"])]
        nodes.append(helper.make_node("DequantizeLinear", ["t_q" if self.tail else "y_q"] + ys, ["y"]))
        inputs = [helper.make_tensor_value_info("x", t, list(self.xq.shape))]
        if self.shortcut != "identity":
            inputs.append(helper.make_tensor_value_info("r", t, list(self.rq.shape)))
            nodes[0:0] = [helper.make_node("DequantizeLinear", ["r"] + rs, ["r_in"]),
                      helper.make_node("DequantizeLinear", ["i_out", "i_s", "i_z"], ["i_out_f"]),
                      helper.make_node("Conv", ["r_in", "i_out_f"], ["r_c"], name="shortcut"),
                      helper.make_node("Relu", ["r_c"], ["r_a"], name="shortcut_relu"),
                      helper.make_node("QuantizeLinear", ["r_a"] + rs, ["r_q"])]
        graph = helper.make_graph(nodes, "residual_block", inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(self.rq.shape))], inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m

    def conv_value(self):
        """v = (acc + B) * x_scale * w_scale, in float64 (the acc exact)."""
        acc = conv_int64(self.xq, self.x_q[1], self.wq, self.pad) + self.bq[None, :, None, None]
        return acc * self.b_scale.astype(np.float64)[None, :, None, None]

    def qdq_graph(self):
        """The QDQ graph as ONNX defines it: Q(c) of the convolution, then DQ, Add, Relu, Q in float32."""
        cq = quantize(self.conv_value().astype(np.float32), *self.c_q, self.dtype)
        s = dequantize(cq, *self.c_q) + dequantize(self.rq, *self.r_q)
        if self.relu:
            s = np.maximum(s, np.float32(0))
        if self.clip:
            s = np.minimum(np.maximum(s, self.clip[0]), self.clip[1])  # ONNX Clip: max first, then min
        return quantize(s, *self.y_q, self.dtype)

    def fused_formula(self):
        """The fused epilogue (ops/fused_qlinear.cc) in float64: C saturated, not rounded."""
        info = np.iinfo(self.dtype)
        sc, zc = np.float64(np.float32(self.c_q[0])), self.c_q[1]
        v = np.clip(self.conv_value(), (info.min - zc) * sc, (info.max - zc) * sc)
        t = v + (self.rq.astype(np.float64) - self.r_q[1]) * np.float64(np.float32(self.r_q[0]))
        if self.relu:
            t = np.maximum(t, 0)
        if self.clip:
            t = np.minimum(np.maximum(t, np.float64(self.clip[0])), np.float64(self.clip[1]))
        q = np.round(t / np.float64(np.float32(self.y_q[0]))) + self.y_q[1]
        return np.clip(q, info.min, info.max).astype(self.dtype)


def steps(a, b, scale):
    """|a - b| in whole steps of two dequantised outputs."""
    return np.rint(np.abs(a.astype(np.float64) - b.astype(np.float64)) / np.float64(np.float32(scale)))


class ResidualEpilogueTest(unittest.TestCase):
    def compile_and_run(self, d, model_path, feeds, extra=(), env=None, tag="out"):
        kiln_path = os.path.join(d, tag + ".kiln")
        report = kiln_path + ".json"
        r = run(["compile", model_path, "-O", "3", "-o", kiln_path, "--report", report] + list(extra))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        out = os.path.join(d, tag)
        args = ["run", kiln_path, "--output-dir", out]
        for k, v in feeds.items():
            args += ["--input", f"{k}={v}"]
        r = run(args, env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "outputs.json")) as f:
            listing = json.load(f)
        return rep, {k: np.load(os.path.join(out, v["file"])) for k, v in listing.items()}

    def check_block(self, block, fused=True):
        d = os.path.join(WORK, block.tag)
        os.makedirs(d, exist_ok=True)
        model_path = os.path.join(d, "m.onnx")
        onnx.save(block.model(), model_path)
        feeds = {"x": os.path.join(d, "x.npy")}
        np.save(feeds["x"], block.xq)
        if block.shortcut != "identity":
            feeds["r"] = os.path.join(d, "r.npy")
            np.save(feeds["r"], block.r_in)
        y_scale = block.y_q[0]
        pattern = "QDQ:Conv+Add" + ("+Relu" if block.relu else "+Clip" if block.clip else "")
        qdq = dequantize(block.qdq_graph(), *block.y_q)
        rep, got = self.compile_and_run(d, model_path, feeds)
        got = got["y"]
        self.assertEqual(rep["fusions"].get(pattern, 0), 1 if fused else 0, f"{block.tag}: {rep['fusions']}")
        if fused:
            self.assertNotIn("kiln.FusedQLinearAdd/simd", rep["kernels"], block.tag)
        s = steps(got, qdq, y_scale)
        print(f"{block.tag}: {'fused' if fused else 'not fused'}, {int((s > 0).sum())} of {s.size} elements one step "
              f"from the QDQ graph", file=sys.stderr)
        self.assertLessEqual(s.max(), 1, f"{block.tag}: Kiln vs the QDQ graph, {s.max()} steps")
        if fused:
            # Against the fused formula: float32 against float64 evaluation, so ties only.
            s = steps(got, dequantize(block.fused_formula(), *block.y_q), y_scale)
            self.assertLessEqual(s.max(), 1, f"{block.tag}: Kiln vs the fused formula")
            self.assertLessEqual(int((s > 0).sum()), max(2, s.size // 1000), f"{block.tag}: Kiln vs the fused formula")
            # The fused node's reference kernel evaluates the formula in float64 too.
            _, ref = self.compile_and_run(d, model_path, feeds, env=dict(os.environ, KILN_KERNELS="reference"),
                                          tag="reference")
            s = steps(ref["y"], dequantize(block.fused_formula(), *block.y_q), y_scale)
            self.assertLessEqual(int((s > 0).sum()), max(2, s.size // 1000), f"{block.tag}: reference kernel")
            # The exact path: the addition as its own pass, the QDQ graph's result but for ties.
            rep, exact = self.compile_and_run(d, model_path, feeds, extra=["--disable-pass", PASS], tag="exact")
            self.assertNotIn(pattern, rep["fusions"], block.tag)
            s = steps(exact["y"], qdq, y_scale)
            self.assertLessEqual(int((s > 0).sum()), max(2, s.size // 1000), f"{block.tag}: exact path")
        if ort_available():
            ort = run_ort(model_path, os.path.join(d, "ort_out"), feeds)["y"]
            s = steps(got, ort, y_scale)
            print(f"{block.tag}: {int((s > 0).sum())} of {s.size} elements one step from ONNX Runtime",
                  file=sys.stderr)
            self.assertLessEqual(s.max(), 1, f"{block.tag}: Kiln vs ONNX Runtime, {s.max()} steps")
        return got

    def test_uint8_identity_shortcut_relu(self):
        # ResNet's scales: C_scale / Y_scale = 1.5 (scales of no round value, as calibrated ones), zero points as kiln quantize writes them.
        self.check_block(Block("u8_identity", np.uint8, 64, 64, 9, 1, (0.0513, 0), 40, (0.2987, 131), (0.0513, 0), (0.1991, 0),
                               True, "identity", tail=True))

    def test_uint8_projection_3x3(self):
        self.check_block(Block("u8_projection", np.uint8, 24, 40, 7, 3, (0.0407, 3), 20, (0.2461, 120), (0.1033, 128),
                               (0.1298, 0), True, "projection"))

    def test_int8_without_activation(self):
        self.check_block(Block("s8_no_act", np.int8, 32, 48, 6, 1, (0.0493, 0), 60, (0.2019, 0), (0.0688, 0), (0.1512, 0),
                               False, "projection"))

    def test_saturating_convolution_output(self):
        # C_scale small: most convolution values leave C's range; the clip keeps the bound.
        block = Block("u8_saturating", np.uint8, 64, 32, 8, 1, (0.0509, 0), 60, (0.0203, 128), (0.0491, 0), (0.0302, 5), True,
                      "projection", tail=True)
        c = quantize(block.conv_value().astype(np.float32), *block.c_q, np.uint8)
        self.assertGreater(float(np.mean((c == 0) | (c == 255))), 0.3, "the case saturates C")
        self.check_block(block)

    def test_uint8_identity_shortcut_relu6(self):
        # MobileNet-style Relu6 (Clip 0..6) after the addition: Y's range [0, 7.68] puts the upper
        # bound inside it, so both bounds bind (checked), in the epilogue as an eltwise clip.
        # C_scale / Y_scale = 1.50, as for every case fused here.
        block = Block("u8_identity_relu6", np.uint8, 64, 64, 9, 1, (0.0513, 0), 40, (0.0452, 131), (0.0513, 0),
                      (0.0301, 0), False, "identity", tail=True, clip=(0, 6))
        y = block.qdq_graph()
        self.assertGreater(float(np.mean(y == 0)), 0.1, "the case clips at 0")
        self.assertGreater(float(np.mean(y == 199)), 0.1, "the case clips at 6 (q = 199)")
        self.check_block(block)

    def test_int8_projection_clip_with_negative_bound(self):
        # Clip(-1.5, 6) on int8 with an output zero point: a lower bound other than the zero point.
        block = Block("s8_projection_clip", np.int8, 24, 40, 7, 3, (0.0407, 0), 20, (0.0617, -8), (0.1033, 0),
                      (0.0412, -20), False, "projection", clip=(-1.5, 6))
        y = block.qdq_graph()
        lo, hi = quantize(np.float32(-1.5), 0.0412, -20, np.int8), quantize(np.float32(6), 0.0412, -20, np.int8)
        self.assertGreater(float(np.mean(y == lo)), 0.05, "the case clips at -1.5")
        self.assertGreater(float(np.mean(y == hi)), 0.05, "the case clips at 6")
        self.check_block(block)

    def test_wide_convolution_scale_is_not_fused(self):
        # C_scale = 2.52 Y_scale: the bound would be 1.26 steps, so the addition stays a pass.
        self.check_block(Block("u8_wide", np.uint8, 16, 16, 5, 1, (0.0511, 0), 40, (0.2497, 128), (0.0511, 0), (0.0989, 0), True,
                               "identity"), fused=False)


def resnet_like_float(path):
    """stem Conv+Relu -> two bottleneck blocks side by side (identity; projection with stride 1),
    each 1x1 -> 3x3 -> 1x1 convs, Add with the shortcut, Relu: two graph outputs."""
    rng = np.random.default_rng(28)
    inits, nodes = [], []

    def conv(name, x, c_in, c_out, k, relu):
        w = (rng.standard_normal((c_out, c_in, k, k)) * np.sqrt(2.0 / (c_in * k * k))).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, name + "_w"),
                      numpy_helper.from_array((rng.standard_normal(c_out) * 0.1).astype(np.float32), name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], name=name, pads=[k // 2] * 4))
        if not relu:
            return name
        nodes.append(helper.make_node("Relu", [name], [name + "_r"], name=name + "_relu"))
        return name + "_r"

    s = conv("stem", "x", 3, 32, 3, True)
    for out, proj in (("y_identity", False), ("y_projection", True)):
        b = out[2:]
        t = conv(b + "_c1", s, 32, 16, 1, True)
        t = conv(b + "_c2", t, 16, 16, 3, True)
        t = conv(b + "_c3", t, 16, 32, 1, False)
        r = conv(b + "_ds", s, 32, 32, 1, False) if proj else s
        nodes.append(helper.make_node("Add", [t, r], [b + "_sum"], name=b + "_add"))
        nodes.append(helper.make_node("Relu", [b + "_sum"], [out], name=b + "_out"))
    graph = helper.make_graph(nodes, "resnet_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                    [1, 3, 16, 16])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 32, 16, 16])
                               for o in ("y_identity", "y_projection")], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, path)


class QuantizedResNetLikeTest(unittest.TestCase):
    def test_kiln_quantize_model_within_one_step_of_onnx_runtime(self):
        d = os.path.join(WORK, "resnet_like")
        calib = os.path.join(d, "calib")
        os.makedirs(calib, exist_ok=True)
        rng = np.random.default_rng(7)
        for i in range(8):
            np.save(os.path.join(calib, f"{i:02d}.npy"), rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
        x_path = os.path.join(d, "x.npy")
        np.save(x_path, rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
        float_path, qdq_path = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx")
        resnet_like_float(float_path)
        r = run(["quantize", float_path, "--calibration", calib, "-o", qdq_path,
                 "--report", os.path.join(d, "quant.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        rep, got = ResidualEpilogueTest.compile_and_run(self, d, qdq_path, {"x": x_path})
        self.assertEqual(rep["fusions"].get("QDQ:Conv+Add+Relu"), 2, rep["fusions"])
        if not ort_available():
            self.skipTest("onnxruntime-node is not installed")
        _, exact = ResidualEpilogueTest.compile_and_run(self, d, qdq_path, {"x": x_path}, extra=["--disable-pass", PASS],
                                                        tag="exact")
        ort = run_ort(qdq_path, os.path.join(d, "ort_out"), {"x": x_path})
        qdq = onnx.load(qdq_path)
        inits = {i.name: numpy_helper.to_array(i) for i in qdq.graph.initializer}
        producer = {o: n for n in qdq.graph.node for o in n.output}
        for name in ("y_identity", "y_projection"):
            dq = producer[name]  # the graph output is a DequantizeLinear's
            self.assertEqual(dq.op_type, "DequantizeLinear")
            s = steps(got[name], ort[name], float(inits[dq.input[1]]))
            e = steps(exact[name], ort[name], float(inits[dq.input[1]]))
            print(f"resnet_like {name}: {int((s > 0).sum())} of {s.size} elements one step from ONNX Runtime "
                  f"({int((e > 0).sum())} with --disable-pass {PASS})", file=sys.stderr)
            self.assertLessEqual(e.max(), 1, f"{name}: Kiln's exact path vs ONNX Runtime, {e.max()} steps")
            self.assertLessEqual(s.max(), 1, f"{name}: Kiln vs ONNX Runtime, {s.max()} steps")


def kiln_residual_conv_model(r_dims, r_type=TensorProto.UINT8, drop_last=False):
    """One kiln FusedQLinearConv node (1x1, 4 channels) with a residual R given as an input."""
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z"),
             numpy_helper.from_array(np.ones((4, 4, 1, 1), np.int8), "w"),
             numpy_helper.from_array(np.array(0.5, np.float32), "ws"), numpy_helper.from_array(np.array(0, np.int8), "wz")]
    ins = ["x", "s", "z", "w", "ws", "wz", "s", "z", "", "r", "s", "z", "s", "z"]
    node = helper.make_node("FusedQLinearConv", ins[:-1] if drop_last else ins, ["y"], name="qconv", domain="kiln")
    graph = helper.make_graph([node], "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 3, 3]),
                                                helper.make_tensor_value_info("r", r_type, r_dims)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("kiln", 1)])


class BadResidualConvTest(unittest.TestCase):
    def test_bad_residual_inputs_fail_to_compile_with_the_reason(self):
        cases = [("shape", kiln_residual_conv_model([1, 4, 2, 2]), "must have Y's shape"),
                 ("dtype", kiln_residual_conv_model([1, 4, 3, 3], TensorProto.FLOAT), "must be int8 or uint8"),
                 ("missing", kiln_residual_conv_model([1, 4, 3, 3], drop_last=True), "a residual takes inputs 9..13")]
        assert_compile_errors(self, KILN, WORK, "'qconv' (kiln.FusedQLinearConv)", cases)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: residual_epilogue_test.py KILN WORKDIR")
    KILN = os.path.abspath(sys.argv[1])
    WORK = os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1])
