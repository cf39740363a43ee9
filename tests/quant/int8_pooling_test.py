#!/usr/bin/env python3
"""DequantizeLinear -> GlobalAveragePool -> QuantizeLinear folded into kiln
QLinearGlobalAveragePool (compiler/passes/qdq_folding.cc, kernels/cpu/qlinear_global_average_pool.cc).

Every model is a QDQ graph written here, compiled by `kiln compile` (-O3: with the int8_layout
pass) and run by `kiln run`; its output is checked against
  - NumPy's evaluation of the float graph (DequantizeLinear in float32, the mean in float64,
    QuantizeLinear with round half to even and saturation), and
  - ONNX Runtime on the same file (onnxruntime-node, when installed: ORT folds the chain into
    its own QLinearGlobalAveragePool),
within one quantisation step of y (the integer mean rounds once; the float graph's mean may
land on the other side of a .5 tie). The compile report must show the fold and the kernel.

Cases: uint8 and int8, batch 2, odd spatial sizes, x and y of different scales and zero
points; the pool reading a graph input (plain NCHW), and the pool reading an int8
convolution's output, which int8_layout stores channels-last (x_format NC1HWC0). Not folded
(run in float, same checks): y of another dtype than x.

Bad nodes (kiln QLinearGlobalAveragePool written into a model): a clear error naming the node
and what is wrong, at compile time (rank, x_format, dtypes) or at run time (a y_scale of 0 fed
as an input, on the reference kernel).

Usage: int8_pooling_test.py KILN WORKDIR
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

from qdq_testing import ONNX_TYPE, ORT_SCRIPT, REPO, assert_compile_errors, dequantize, ort_available

KILN = None
WORK = None


def run(args, env=None):
    return subprocess.run([KILN] + args, capture_output=True, text=True, env=env)


def quantize(v, scale, zp, dtype):
    info = np.iinfo(dtype)
    q = np.round(v.astype(np.float64) / np.float64(np.float32(scale))) + zp  # np.round: half to even
    return np.clip(q, info.min, info.max).astype(dtype)


def numpy_qdq_gap(xq, x_scale, x_zp, y_scale, y_zp, y_dtype):
    """The float graph DQ -> GlobalAveragePool -> Q -> DQ."""
    mean = dequantize(xq, x_scale, x_zp).astype(np.float64).mean(axis=(2, 3), keepdims=True).astype(np.float32)
    return quantize(mean, y_scale, y_zp, y_dtype)


def qparams(prefix, scale, zp, dtype):
    return [numpy_helper.from_array(np.array(scale, np.float32), prefix + "_scale"),
            numpy_helper.from_array(np.array(zp, dtype), prefix + "_zp")]


def gap_model(x_dims, x_dtype, x_scale, x_zp, y_scale, y_zp, y_dtype, through_conv):
    """x (x_dtype, a graph input) [-> DQ -> identity Conv -> Q] -> DQ -> GlobalAveragePool -> Q
    -> DQ -> y (float32). The identity convolution (1x1, weight 1 on the diagonal, output
    quantised with x's own scale and zero point) gives back x exactly, as an int8 convolution's
    output: the value int8_layout stores channels-last."""
    nodes, inits = [], qparams("x", x_scale, x_zp, x_dtype) + qparams("y", y_scale, y_zp, y_dtype)
    pooled_in = "x"
    if through_conv:
        c = x_dims[1]
        inits += [numpy_helper.from_array(np.eye(c, dtype=np.int8).reshape(c, c, 1, 1), "w"),
                  numpy_helper.from_array(np.ones(c, np.float32), "w_scale"),
                  numpy_helper.from_array(np.zeros(c, np.int8), "w_zp")]
        nodes += [helper.make_node("DequantizeLinear", ["x", "x_scale", "x_zp"], ["x_f"]),
                  helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["w_f"], axis=0),
                  helper.make_node("Conv", ["x_f", "w_f"], ["c_f"], name="conv"),
                  helper.make_node("QuantizeLinear", ["c_f", "x_scale", "x_zp"], ["c_q"])]
        pooled_in = "c_q"
    nodes += [helper.make_node("DequantizeLinear", [pooled_in, "x_scale", "x_zp"], ["p_f"]),
              helper.make_node("GlobalAveragePool", ["p_f"], ["g_f"], name="gap"),
              helper.make_node("QuantizeLinear", ["g_f", "y_scale", "y_zp"], ["g_q"]),
              helper.make_node("DequantizeLinear", ["g_q", "y_scale", "y_zp"], ["y"])]
    graph = helper.make_graph(nodes, "int8_gap", [helper.make_tensor_value_info("x", ONNX_TYPE[x_dtype], x_dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_dims[:2] + [1, 1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


class Int8GlobalAveragePoolTest(unittest.TestCase):
    def compile_and_run(self, d, model_path, x_path, env=None):
        report = os.path.join(d, "report.json")
        r = run(["compile", model_path, "-O", "3", "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        out = os.path.join(d, "kiln_out" if env is None else "kiln_reference_out")
        r = run(["run", os.path.join(d, "m.kiln"), "--input", "x=" + x_path, "--output-dir", out], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "outputs.json")) as f:
            return rep, np.load(os.path.join(out, json.load(f)["y"]["file"]))

    def run_ort(self, d, model_path, x_path):
        out = os.path.join(d, "ort_out")
        r = subprocess.run(["node", ORT_SCRIPT, model_path, out, "x=" + x_path], cwd=REPO, capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "outputs.json")) as f:
            return np.load(os.path.join(out, json.load(f)["y"]["file"]))

    def check_case(self, tag, x_dims, x_dtype, x_scale, x_zp, y_scale, y_zp, y_dtype, through_conv, folded):
        d = os.path.join(WORK, tag)
        os.makedirs(d, exist_ok=True)
        rng = np.random.default_rng(zlib.crc32(tag.encode()))
        info = np.iinfo(x_dtype)
        xq = rng.integers(info.min, info.max + 1, x_dims).astype(x_dtype)
        x_path = os.path.join(d, "x.npy")
        np.save(x_path, xq)
        model_path = os.path.join(d, "m.onnx")
        onnx.save(gap_model(x_dims, x_dtype, x_scale, x_zp, y_scale, y_zp, y_dtype, through_conv), model_path)
        rep, got = self.compile_and_run(d, model_path, x_path)
        fusions = rep.get("fusions", {})
        kernels = rep.get("kernels", {})
        if folded:
            self.assertEqual(fusions.get("QDQ:GlobalAveragePool"), 1, f"{tag}: {fusions}")
            self.assertEqual(kernels.get("kiln.QLinearGlobalAveragePool/kiln"), 1, f"{tag}: {kernels}")
            if through_conv:
                self.assertGreaterEqual(fusions.get("int8 NHWC values", 0), 1, f"{tag}: {fusions}")
        else:
            self.assertNotIn("QDQ:GlobalAveragePool", fusions, tag)
        want_q = numpy_qdq_gap(xq, x_scale, x_zp, y_scale, y_zp, y_dtype)
        want = dequantize(want_q, y_scale, y_zp)
        self.assertEqual(got.shape, want.shape, tag)
        steps = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.float64(np.float32(y_scale))
        self.assertLessEqual(steps.max(), 1.0 + 1e-6, f"{tag}: Kiln vs NumPy, {steps.max()} steps")
        # The op's reference kernel (plain and channels-last) holds to the same bound.
        _, ref = self.compile_and_run(d, model_path, x_path, dict(os.environ, KILN_KERNELS="reference"))
        steps = np.abs(ref.astype(np.float64) - want.astype(np.float64)) / np.float64(np.float32(y_scale))
        self.assertLessEqual(steps.max(), 1.0 + 1e-6, f"{tag}: reference kernels vs NumPy, {steps.max()} steps")
        if ort_available():
            ort = self.run_ort(d, model_path, x_path)
            steps = np.abs(got.astype(np.float64) - ort.astype(np.float64)) / np.float64(np.float32(y_scale))
            self.assertLessEqual(steps.max(), 1.0 + 1e-6, f"{tag}: Kiln vs ONNX Runtime, {steps.max()} steps")
        return want_q

    def test_uint8_graph_input_plain(self):
        self.check_case("u8_plain", [2, 40, 7, 5], np.uint8, 0.02, 3, 0.011, 7, np.uint8, False, True)

    def test_int8_graph_input_plain(self):
        self.check_case("s8_plain", [2, 33, 9, 3], np.int8, 0.05, -4, 0.004, 2, np.int8, False, True)

    def test_uint8_channels_last_after_int8_conv(self):
        # 300 channels: more than one of the kernel's channel runs (256), one partial.
        self.check_case("u8_channels_last", [2, 300, 7, 7], np.uint8, 0.03, 0, 0.007, 0, np.uint8, True, True)

    def test_int8_channels_last_after_int8_conv(self):
        self.check_case("s8_channels_last", [1, 64, 5, 9], np.int8, 0.1, 0, 0.02, -3, np.int8, True, True)

    def test_saturating_y(self):
        # y_scale small enough that most means leave uint8's range: saturation on both sides.
        want_q = self.check_case("u8_saturating", [1, 48, 4, 4], np.uint8, 0.5, 128, 0.05, 128, np.uint8, False, True)
        self.assertTrue(np.any(want_q == 0) and np.any(want_q == 255), "the case saturates on both sides")

    def test_other_output_dtype_is_not_folded(self):
        self.check_case("u8_to_s8", [1, 16, 6, 6], np.uint8, 0.02, 10, 0.01, 0, np.int8, False, False)


def kiln_gap_model(x_dims, x_type=TensorProto.UINT8, zp_dtype=np.uint8, attrs=None, y_scale_input=False):
    """A model of one kiln QLinearGlobalAveragePool node (x, and y_scale when asked, as inputs)."""
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"), numpy_helper.from_array(np.array(3, zp_dtype), "xz"),
             numpy_helper.from_array(np.array(1, zp_dtype), "yz")]
    inputs = [helper.make_tensor_value_info("x", x_type, x_dims)]
    if y_scale_input:
        inputs.append(helper.make_tensor_value_info("ys", TensorProto.FLOAT, []))
    else:
        inits.append(numpy_helper.from_array(np.array(0.05, np.float32), "ys"))
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], name="qgap", domain="kiln",
                            **(attrs or {}))
    graph = helper.make_graph([node], "qgap", inputs, [helper.make_tensor_value_info("y", x_type, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("kiln", 1)])


class BadQLinearGlobalAveragePoolTest(unittest.TestCase):
    def test_bad_nodes_fail_to_compile_with_the_reason(self):
        cases = [("rank2", kiln_gap_model([1, 4]), "expected [N, C, S...] of rank >= 3"),
                 ("format", kiln_gap_model([1, 4, 3, 3], attrs={"x_format": "NHWC"}), "x_format 'NHWC'"),
                 ("blocked_rank4", kiln_gap_model([1, 4, 3, 3], attrs={"x_format": "NC1HWC0"}), "[N, 1, H, W, C]"),
                 ("zero_point_dtype", kiln_gap_model([1, 4, 3, 3], zp_dtype=np.int8), "must be uint8, got int8"),
                 ("float_x", kiln_gap_model([1, 4, 3, 3], TensorProto.FLOAT, np.float32), "X must be uint8 or int8")]
        assert_compile_errors(self, KILN, WORK, "'qgap' (kiln.QLinearGlobalAveragePool)", cases)

    def test_zero_y_scale_at_run_time_is_an_error(self):
        d = os.path.join(WORK, "bad_y_scale")
        os.makedirs(d, exist_ok=True)
        onnx.save(kiln_gap_model([1, 4, 3, 3], y_scale_input=True), os.path.join(d, "m.onnx"))
        r = run(["compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln")])
        self.assertEqual(r.returncode, 0, r.stderr)
        x = np.arange(36, dtype=np.uint8).reshape(1, 4, 3, 3)
        np.save(os.path.join(d, "x.npy"), x)
        for ys, ok in ((0.0, False), (0.05, True)):
            np.save(os.path.join(d, "ys.npy"), np.array(ys, np.float32))
            out = os.path.join(d, "out")
            r = run(["run", os.path.join(d, "m.kiln"), "--input", "x=" + os.path.join(d, "x.npy"), "--input",
                     "ys=" + os.path.join(d, "ys.npy"), "--output-dir", out])
            if not ok:
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn("x_scale / (positions * y_scale) is not finite", r.stderr)
                continue
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(os.path.join(out, "outputs.json")) as f:
                got = np.load(os.path.join(out, json.load(f)["y"]["file"]))
            want = quantize(dequantize(x, 0.1, 3).astype(np.float64).mean(axis=(2, 3), keepdims=True), 0.05, 1, np.uint8)
            np.testing.assert_array_equal(got, want)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: int8_pooling_test.py KILN WORKDIR")
    KILN = os.path.abspath(sys.argv[1])
    WORK = os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1])
