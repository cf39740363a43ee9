#!/usr/bin/env python3
"""`kiln quantize` against independent references (docs/quantization.md).

A small conv net is built with onnx.helper whose weights, biases and inputs are dyadic
rationals small enough that every intermediate tensor is exact in float32, so a NumPy forward
pass gives the very values Kiln collects. From those values this file re-implements the
calibration methods (minmax, percentile, entropy) and the scale / zero-point formulas, and
checks every tensor of `kiln quantize`'s report and every QDQ initializer of the written model.
The QDQ model must pass onnx.checker, run on ONNX Runtime (onnxruntime-node, when installed)
and on Kiln (-O0, the float QDQ graph), match the float model within a few output steps, and
Kiln must match ONNX Runtime on it within one step. Bad calibration data must give a clear
error naming the file (exit 1); a model with nothing to quantise is written unchanged (exit 0).

Usage: quantize_test.py KILN WORKDIR
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

KILN = None
WORK = None
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
ORT_SCRIPT = os.path.join(REPO, "tests", "e2e", "ort_reference.js")
BINS = 2048
QBINS = 128


def ort_available():
    if not shutil.which("node"):
        return False
    probe = subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=REPO, capture_output=True)
    return probe.returncode == 0


def run(args, env=None):
    return subprocess.run([KILN] + args, capture_output=True, text=True, env=env)


# Reference kernels only: every tensor of the test net is then computed exactly (oneDNN may
# pick Winograd for a 3x3 convolution, which is not exact), so the statistics Kiln collects
# equal the NumPy forward pass bit for bit.
EXACT_ENV = dict(os.environ, KILN_KERNELS="reference")


# ---------------------------------------------------------------- the model and its NumPy twin

def dyadic(rng, shape, lo, hi, denom):
    """Integers in [lo, hi] over denom: exact in float32 and in their sums."""
    return (rng.integers(lo, hi + 1, size=shape) / denom).astype(np.float32)


def make_net(seed=1):
    rng = np.random.default_rng(seed)
    w1 = dyadic(rng, (4, 3, 3, 3), -4, 4, 4)
    b1 = dyadic(rng, (4,), -8, 8, 8)
    w2 = dyadic(rng, (4, 4, 1, 1), -4, 4, 4)
    b2 = dyadic(rng, (4,), -8, 8, 8)
    wg = dyadic(rng, (5, 4), -4, 4, 4)  # Gemm with transB = 1
    bg = dyadic(rng, (5,), -8, 8, 8)
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"), (wg, "wg"), (bg, "bg"))]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2"),
        helper.make_node("Add", ["c2", "p1"], ["a1"], name="add1"),
        helper.make_node("GlobalAveragePool", ["a1"], ["g1"], name="gap"),
        helper.make_node("Flatten", ["g1"], ["f1"], name="flatten"),
        helper.make_node("Gemm", ["f1", "wg", "bg"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "qnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model, dict(w1=w1, b1=b1, w2=w2, b2=b2, wg=wg, bg=bg)


def conv2d(x, w, b, pad):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = h + 2 * pad - kh + 1, wd + 2 * pad - kw + 1
    out = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + oh, j:j + ow], w[:, :, i, j].astype(np.float64))
    return out + b.reshape(1, -1, 1, 1)


def forward(x, p):
    """Every tensor of the net, in float64 (exact: equal to the float32 values)."""
    t = {"x": x.astype(np.float64)}
    t["c1"] = conv2d(x, p["w1"], p["b1"], 1)
    t["r1"] = np.maximum(t["c1"], 0)
    n, c, h, w = t["r1"].shape
    t["p1"] = t["r1"].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
    t["c2"] = conv2d(t["p1"], p["w2"], p["b2"], 0)
    t["a1"] = t["c2"] + t["p1"]
    t["g1"] = t["a1"].mean(axis=(2, 3), keepdims=True)
    t["f1"] = t["g1"].reshape(n, -1)
    t["y"] = t["f1"] @ p["wg"].astype(np.float64).T + p["bg"]
    for k, v in t.items():
        assert np.array_equal(v, v.astype(np.float32)), f"{k} is not exact in float32"
    return t


# ---------------------------------------------------------------- the NumPy reference methods

def histogram(v, amax):
    a = np.abs(v.astype(np.float64)).ravel()
    if amax <= 0:
        h = np.zeros(BINS, np.int64)
        h[0] = a.size
        return h
    b = np.minimum(np.floor(a / amax * BINS), BINS - 1).astype(np.int64)
    return np.bincount(b, minlength=BINS)


def percentile_threshold(h, amax, p):
    cdf = np.cumsum(h) / h.sum()
    i = int(np.searchsorted(cdf, p / 100.0, side="left"))
    return amax * (i + 1) / BINS


def smooth(p, eps=1e-4):
    zeros = p == 0
    nz = p.size - zeros.sum()
    if nz == 0:
        return None
    eps1 = eps * zeros.sum() / nz
    return p + np.where(zeros, eps, -eps1)


def entropy_threshold(h, amax):
    if amax <= 0:
        return amax
    best, best_i = np.inf, BINS
    h = h.astype(np.float64)
    h[0] = h[1]  # the spike of zeros after ReLU, as NVIDIA's pytorch-quantization
    for i in range(QBINS, BINS + 1):
        p = h[:i].copy()
        p[i - 1] += h[i:].sum()
        m = i // QBINS
        q = np.zeros(i)
        for j in range(QBINS):
            s, e = j * m, (i if j == QBINS - 1 else j * m + m)
            nz = p[s:e] != 0
            if nz.sum():
                q[s:e][nz] = h[s:e].sum() / nz.sum()
        ps, qs = smooth(p), smooth(q)
        if ps is None or qs is None:
            continue
        ps, qs = ps / ps.sum(), qs / qs.sum()
        k = ps > 0
        kl = float(np.sum(ps[k] * np.log(ps[k] / qs[k])))
        if kl < best:
            best, best_i = kl, i
    return amax * best_i / BINS


def reference_range(v, method, percentile=99.99):
    lo, hi = float(v.min()), float(v.max())
    amax = max(abs(lo), abs(hi))
    if method == "minmax":
        return lo, hi
    h = histogram(v, amax)
    t = percentile_threshold(h, amax, percentile) if method == "percentile" else entropy_threshold(h, amax)
    return max(lo, -t), min(hi, t)


def reference_params(lo, hi, act):
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    if act == "u8":
        scale = np.float32((hi - lo) / 255.0)
        if scale < np.finfo(np.float32).tiny:
            return np.float32(1), 0
        return scale, int(np.clip(np.round(-lo / np.float64(scale)), 0, 255))
    scale = np.float32(max(abs(lo), abs(hi)) / 127.0)
    if scale < np.finfo(np.float32).tiny:
        return np.float32(1), 0
    return scale, 0


def reference_weights(w, axis):
    moved = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    scale = (np.abs(moved).max(axis=1).astype(np.float64) / 127.0).astype(np.float32)
    scale[scale < np.finfo(np.float32).tiny] = 1
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def fake_quant(v, scale, zp, act):
    lo, hi = (0, 255) if act == "u8" else (-128, 127)
    return (np.clip(np.round(v / scale) + zp, lo, hi) - zp) * scale


# ---------------------------------------------------------------- helpers

def write_samples(folder, xs):
    os.makedirs(folder, exist_ok=True)
    for i, x in enumerate(xs):
        np.save(os.path.join(folder, f"{i:03d}.npy"), x)


def inits_of(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def run_ort(model_path, x_path, out_dir):
    r = subprocess.run(["node", ORT_SCRIPT, model_path, out_dir, "x=" + x_path], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out_dir, "outputs.json")) as f:
        meta = json.load(f)
    return np.load(os.path.join(out_dir, meta["y"]["file"]))


def run_kiln(model_path, x_path, out_dir):
    compiled = out_dir + ".kiln"
    r = run(["compile", model_path, "-O", "0", "-o", compiled])
    assert r.returncode == 0, r.stderr
    r = run(["run", compiled, "--input", "x=" + x_path, "--output-dir", out_dir])
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out_dir, "outputs.json")) as f:
        meta = json.load(f)
    return np.load(os.path.join(out_dir, meta["y"]["file"]))


class QuantizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model, cls.params = make_net()
        cls.model_path = os.path.join(WORK, "net.onnx")
        onnx.save(cls.model, cls.model_path)
        rng = np.random.default_rng(7)
        # 20 calibration samples of one image each (x in [-2, 2] in steps of 1/8), a batch file
        # of 4 more, and a held-out evaluation batch.
        cls.samples = [dyadic(rng, (3, 8, 8), -16, 16, 8) for _ in range(20)]
        cls.batch = dyadic(rng, (4, 3, 8, 8), -16, 16, 8)
        cls.data = os.path.join(WORK, "calib")
        write_samples(cls.data, cls.samples)
        np.save(os.path.join(cls.data, "batch.npy"), cls.batch)
        cls.all_x = np.concatenate([np.stack(cls.samples), cls.batch])
        cls.values = forward(cls.all_x, cls.params)
        cls.eval_x = dyadic(np.random.default_rng(99), (6, 3, 8, 8), -16, 16, 8)
        cls.eval_path = os.path.join(WORK, "eval_x.npy")
        np.save(cls.eval_path, cls.eval_x)

    def quantize(self, tag, *extra, data=None, expect=0):
        out = os.path.join(WORK, tag + ".int8.onnx")
        report = os.path.join(WORK, tag + ".json")
        r = run(["quantize", self.model_path, "--calibration", data or self.data, "-o", out, "--report", report,
                 *extra], env=EXACT_ENV)
        self.assertEqual(r.returncode, expect, f"{tag}: {r.stderr}")
        if expect != 0:
            return r
        with open(report) as f:
            return out, json.load(f), r

    # -------------------------------------------------------------- scales and zero points

    def check_scales(self, method, act, *extra, percentile=99.99):
        tag = f"{method}_{act}"
        out, rep, _ = self.quantize(tag, "--method", method, "--activation-type", act, *extra)
        self.assertEqual(rep["samples"], 24)
        names = [t["name"] for t in rep["tensors"]]
        # Conv1's output pair sits behind its Relu; the Gemm output keeps the graph output name.
        self.assertEqual(names, ["x", "r1", "p1", "c2", "a1", "g1", "f1", "y"], tag)
        for t in rep["tensors"]:
            v = self.values[t["name"]]
            lo, hi = reference_range(v, method, percentile)
            scale, zp = reference_params(lo, hi, act)
            self.assertEqual(t["min"], float(v.min()), f"{tag} {t['name']} min")
            self.assertEqual(t["max"], float(v.max()), f"{tag} {t['name']} max")
            self.assertAlmostEqual(t["range"][0], lo, delta=1e-12 + 1e-9 * abs(lo), msg=f"{tag} {t['name']} lo")
            self.assertAlmostEqual(t["range"][1], hi, delta=1e-12 + 1e-9 * abs(hi), msg=f"{tag} {t['name']} hi")
            self.assertEqual(np.float32(t["scale"]), scale, f"{tag} {t['name']} scale")
            self.assertEqual(t["zero_point"], zp, f"{tag} {t['name']} zero point")
        # The model carries the same parameters, and the weights of the NumPy reference.
        q = onnx.load(out)
        onnx.checker.check_model(q, full_check=True)
        inits = inits_of(q)
        for t in rep["tensors"]:
            self.assertEqual(inits[t["name"] + "_scale"], np.float32(t["scale"]))
            zp = inits[t["name"] + "_zero_point"]
            self.assertEqual(zp.dtype, np.uint8 if act == "u8" else np.int8)
            self.assertEqual(int(zp), t["zero_point"])
        for w, axis in (("w1", 0), ("w2", 0), ("wg", 0)):
            qw, sw = reference_weights(self.params[w], axis)
            np.testing.assert_array_equal(inits[w + "_quantized"], qw, err_msg=w)
            np.testing.assert_array_equal(inits[w + "_scale"], sw, err_msg=w)
        return out, rep

    def test_minmax_u8(self):
        out, rep = self.check_scales("minmax", "u8")
        self.assertEqual(rep["quantized_nodes"]["total"], 6)
        self.assertEqual(rep["quantized_nodes"]["by_op"],
                         {"Conv": 2, "MaxPool": 1, "Add": 1, "GlobalAveragePool": 1, "Gemm": 1})

    def test_minmax_s8(self):
        self.check_scales("minmax", "s8")

    def test_percentile_u8(self):
        self.check_scales("percentile", "u8", "--percentile", "99.5", percentile=99.5)

    def test_percentile_s8_default(self):
        self.check_scales("percentile", "s8")

    def test_entropy_u8(self):
        self.check_scales("entropy", "u8")

    def test_entropy_s8(self):
        self.check_scales("entropy", "s8")

    # -------------------------------------------------------------- the QDQ model itself

    def test_qdq_model_structure_and_bias(self):
        out, rep, _ = self.quantize("structure")
        q = onnx.load(out)
        onnx.checker.check_model(q, full_check=True)
        ops = [n.op_type for n in q.graph.node]
        self.assertEqual(ops.count("QuantizeLinear"), 8)
        self.assertEqual(ops.count("DequantizeLinear"), 8 + 3 + 3)  # activations, weights, biases
        self.assertGreaterEqual([o.version for o in q.opset_import if o.domain in ("", "ai.onnx")][0], 13)
        inits = inits_of(q)
        self.assertNotIn("w1", inits)  # the float weights are gone
        scales = {t["name"]: np.float32(t["scale"]) for t in rep["tensors"]}
        # int32 biases: scale = x_scale * w_scale (float32), round half to even.
        for b, x, w in (("b1", "x", "w1"), ("b2", "p1", "w2"), ("bg", "f1", "wg")):
            _, sw = reference_weights(self.params[w], 0)
            sb = (scales[x] * sw).astype(np.float32)
            np.testing.assert_array_equal(inits[b + "_scale"], sb, err_msg=b)
            qb = np.round(self.params[b] / sb).astype(np.int32)
            np.testing.assert_array_equal(inits[b + "_quantized"], qb, err_msg=b)
            self.assertEqual(inits[b + "_quantized"].dtype, np.int32)
        # Weight DQs carry the output-channel axis.
        for n in q.graph.node:
            if n.op_type == "DequantizeLinear" and n.input[0] in ("w1_quantized", "wg_quantized"):
                self.assertEqual([a.i for a in n.attribute if a.name == "axis"], [0])
        self.assertEqual([o.name for o in q.graph.output], ["y"])

    def test_qdq_model_runs_and_matches(self):
        out, rep, _ = self.quantize("runs")
        ref = forward(self.eval_x, self.params)["y"]
        out_scale = [t["scale"] for t in rep["tensors"] if t["name"] == "y"][0]
        kiln = run_kiln(out, self.eval_path, os.path.join(WORK, "runs_kiln"))
        # Against the float model: a few output steps (eight requantised tensors on the way).
        steps = np.abs(kiln - ref) / out_scale
        self.assertLessEqual(float(steps.max()), 4.0, f"Kiln QDQ vs float: {steps.max()} steps")
        kiln_fp32 = run_kiln(self.model_path, self.eval_path, os.path.join(WORK, "runs_kiln_fp32"))
        np.testing.assert_allclose(kiln_fp32, ref, rtol=1e-6, atol=1e-6)
        if not ort_available():
            print("onnxruntime-node is not installed: ORT comparisons skipped "
                  "(npm install --ignore-scripts onnxruntime-node@1.30.0)")
            return
        ort = run_ort(out, self.eval_path, os.path.join(WORK, "runs_ort"))
        steps = np.abs(ort - ref) / out_scale
        self.assertLessEqual(float(steps.max()), 4.0, f"ORT QDQ vs float: {steps.max()} steps")
        steps = np.abs(ort - kiln) / out_scale
        self.assertLessEqual(float(steps.max()), 1.0 + 1e-3, f"ORT vs Kiln on the QDQ model: {steps.max()} steps")

    def test_torch_exported_net(self):
        """A net exported by PyTorch (BatchNorm, ReLU6 as Clip, depthwise, residual, pools, Concat)."""
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("python3-torch is not installed")
        d = os.path.join(WORK, "torch")
        os.makedirs(d, exist_ok=True)
        fp32 = os.path.join(d, "net.onnx")
        r = subprocess.run([sys.executable, os.path.join(HERE, "make_torch_net.py"), fp32], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rng = np.random.default_rng(21)
        calib = os.path.join(d, "calib")
        os.makedirs(calib, exist_ok=True)
        np.save(os.path.join(calib, "batch.npy"), rng.standard_normal((32, 3, 16, 16)).astype(np.float32))
        x_path = os.path.join(d, "x.npy")
        np.save(x_path, rng.standard_normal((4, 3, 16, 16)).astype(np.float32))
        for act, method in (("u8", "minmax"), ("s8", "percentile")):
            tag = f"{act}_{method}"
            out = os.path.join(d, tag + ".int8.onnx")
            r = run(["quantize", fp32, "--calibration", calib, "-o", out, "--activation-type", act, "--method",
                     method])
            self.assertEqual(r.returncode, 0, r.stderr)
            rep = json.loads(r.stdout)
            self.assertEqual(rep["quantized_nodes"]["by_op"],
                             {"Conv": 4, "Add": 1, "MaxPool": 1, "AveragePool": 2, "Concat": 1,
                              "GlobalAveragePool": 1, "Gemm": 1}, tag)
            names = [t["name"] for t in rep["tensors"]]
            # The stem's output pair sits behind its ReLU6 (a Clip with Constant bounds).
            self.assertTrue(any("Clip" in n for n in names), names)
            q = onnx.load(out)
            onnx.checker.check_model(q, full_check=True)
            out_scale = [t["scale"] for t in rep["tensors"] if t["name"] == "y"][0]
            kiln = run_kiln(out, x_path, os.path.join(d, tag + "_kiln"))
            ref = run_kiln(fp32, x_path, os.path.join(d, tag + "_kiln_fp32"))
            steps = np.abs(kiln - ref) / out_scale
            print(f"{tag}: Kiln QDQ vs float: max {steps.max():.2f} output steps, output scale {out_scale:.4g}")
            self.assertLessEqual(float(steps.max()), 4.0, f"{tag}: Kiln QDQ vs float: {steps.max()} steps")
            if not ort_available():
                continue
            ort = run_ort(out, x_path, os.path.join(d, tag + "_ort"))
            ort_fp32 = run_ort(fp32, x_path, os.path.join(d, tag + "_ort_fp32"))
            np.testing.assert_allclose(ref, ort_fp32, rtol=1e-4, atol=1e-5)
            steps = np.abs(ort - kiln) / out_scale
            print(f"{tag}: ORT vs Kiln on the QDQ model: max {steps.max():.3f} steps")
            self.assertLessEqual(float(steps.max()), 1.0 + 1e-3, f"{tag}: ORT vs Kiln QDQ: {steps.max()} steps")

    # -------------------------------------------------------------- options

    def test_exclude_and_op_types(self):
        out, rep, r = self.quantize("exclude", "--exclude", "conv2,fc,nosuchnode", "--op-types", "Conv,Gemm,Add")
        self.assertIn("warning: --exclude nosuchnode", r.stderr)
        self.assertEqual(rep["quantized_nodes"]["by_op"], {"Conv": 1, "Add": 1})
        self.assertTrue(any("conv2" in s and "--exclude" in s for s in rep["skipped"]), rep["skipped"])
        q = onnx.load(out)
        onnx.checker.check_model(q)
        conv2 = [n for n in q.graph.node if n.name == "conv2"][0]
        self.assertEqual(conv2.input[1], "w2")  # still float
        r = run(["quantize", self.model_path, "--calibration", self.data, "-o", out, "--op-types", "Conv,Softmax"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("Softmax", r.stderr)

    def test_calibration_size_and_seed(self):
        _, a, _ = self.quantize("size_a", "--calibration-size", "5", "--seed", "3")
        _, b, _ = self.quantize("size_b", "--calibration-size", "5", "--seed", "3")
        _, c, _ = self.quantize("size_c", "--calibration-size", "5", "--seed", "4")
        self.assertEqual(a["calibration"]["samples_used"], 5)
        self.assertEqual(a["calibration"]["samples_found"], 24)
        self.assertEqual(a["tensors"], b["tensors"])
        self.assertNotEqual(a["tensors"], c["tensors"])

    def test_progress_on_stderr(self):
        _, _, r = self.quantize("progress", "--method", "entropy", "--batch-size", "3")
        self.assertIn("calibrating 24/24 samples", r.stderr)
        self.assertIn("pass 2/2", r.stderr)

    def test_report_on_stdout(self):
        out = os.path.join(WORK, "stdout.int8.onnx")
        r = run(["quantize", self.model_path, "--calibration", self.data, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["quantized_nodes"]["total"], 6)

    def test_sample_folders_with_two_inputs(self):
        rng = np.random.default_rng(5)
        w = dyadic(rng, (2, 3, 1, 1), -4, 4, 4)
        nodes = [helper.make_node("Add", ["x", "z"], ["s"], name="add"),
                 helper.make_node("Conv", ["s", "w"], ["y"], name="conv")]
        g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4]),
                                             helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
                              [numpy_helper.from_array(w, "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        path = os.path.join(WORK, "two.onnx")
        onnx.save(m, path)
        data = os.path.join(WORK, "two_data")
        xs, zs = [], []
        for i in range(3):
            os.makedirs(os.path.join(data, f"s{i}"), exist_ok=True)
            xs.append(dyadic(rng, (1, 3, 4, 4), -8, 8, 8))
            zs.append(dyadic(rng, (3, 4, 4), -8, 8, 8))
            np.save(os.path.join(data, f"s{i}", "x.npy"), xs[-1])
            np.save(os.path.join(data, f"s{i}", "z.npy"), zs[-1])
        out = os.path.join(WORK, "two.int8.onnx")
        r = run(["quantize", path, "--calibration", data, "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["calibration"]["layout"], "sample folders")
        s = np.concatenate(xs) + np.stack(zs)
        t = {x["name"]: x for x in rep["tensors"]}
        self.assertEqual(t["s"]["max"], float(s.max()))
        self.assertEqual(t["z"]["min"], float(np.stack(zs).min()))
        onnx.checker.check_model(onnx.load(out))
        # One input missing from a sample folder.
        os.remove(os.path.join(data, "s1", "z.npy"))
        r = run(["quantize", path, "--calibration", data, "-o", out])
        self.assertEqual(r.returncode, 1)
        self.assertIn("z.npy", r.stderr)
        self.assertIn("s1", r.stderr)
        # Plain .npy files for a two-input model.
        flat = os.path.join(WORK, "two_flat")
        write_samples(flat, xs)
        r = run(["quantize", path, "--calibration", flat, "-o", out])
        self.assertEqual(r.returncode, 1)
        self.assertIn("2 inputs", r.stderr)

    def test_static_batch(self):
        rng = np.random.default_rng(8)
        w = dyadic(rng, (2, 3, 1, 1), -4, 4, 4)
        g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "b2",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 4, 4])],
                              [numpy_helper.from_array(w, "w")])
        path = os.path.join(WORK, "batch2.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
        data = os.path.join(WORK, "batch2_data")
        xs = [dyadic(rng, (3, 4, 4), -8, 8, 8) for _ in range(5)]
        write_samples(data, xs)
        r = run(["quantize", path, "--calibration", data, "-o", os.path.join(WORK, "batch2.int8.onnx")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("the last 1 left out", r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["calibration"]["samples_used"], 4)
        self.assertEqual([t["max"] for t in rep["tensors"] if t["name"] == "x"], [float(np.stack(xs[:4]).max())])
        r = run(["quantize", path, "--calibration", data, "-o", os.path.join(WORK, "batch2.int8.onnx"),
                 "--calibration-size", "1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("static batch of 2", r.stderr)

    def test_images_with_preprocess(self):
        from PIL import Image
        folder = os.path.join(WORK, "images")
        os.makedirs(folder, exist_ok=True)
        rng = np.random.default_rng(11)
        pixels = []
        for i in range(3):
            a = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
            Image.fromarray(a).save(os.path.join(folder, f"img{i}.png"))
            pixels.append(a)
        spec = "resize=8,8:mean=0.5,0.25,0.5:std=0.5,0.5,0.25:layout=NCHW:color=RGB"
        out, rep, _ = self.quantize("images", "--preprocess", spec, data=folder)
        self.assertEqual(rep["calibration"]["layout"], "images")
        x = np.stack(pixels).astype(np.float32).transpose(0, 3, 1, 2) * np.float32(1 / 255.0)
        x = (x - np.array([0.5, 0.25, 0.5], np.float32).reshape(1, 3, 1, 1)) / \
            np.array([0.5, 0.5, 0.25], np.float32).reshape(1, 3, 1, 1)
        t = {v["name"]: v for v in rep["tensors"]}
        self.assertAlmostEqual(t["x"]["min"], float(x.min()), places=5)
        self.assertAlmostEqual(t["x"]["max"], float(x.max()), places=5)
        r = self.quantize("images_nospec", data=folder, expect=1)
        self.assertIn("--preprocess", r.stderr)
        r = run(["quantize", self.model_path, "--calibration", folder, "-o", out, "--preprocess", "resize=8"])
        self.assertEqual(r.returncode, 2, r.stderr)

    # -------------------------------------------------------------- errors

    def bad_data(self, tag, array=None, raw=None):
        folder = os.path.join(WORK, "bad_" + tag)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        path = os.path.join(folder, "000.npy")
        if array is not None:
            np.save(os.path.join(folder, "000.npy"), self.samples[0])
            path = os.path.join(folder, "001.npy")
            np.save(path, array)
        r = run(["quantize", self.model_path, "--calibration", folder, "-o", os.path.join(WORK, "bad.onnx")])
        self.assertEqual(r.returncode, 1, f"{tag}: {r.stderr}")
        self.assertIn("kiln quantize: error:", r.stderr)
        self.assertNotIn("Traceback", r.stderr)
        return r.stderr, path

    def test_empty_folder(self):
        err, _ = self.bad_data("empty")
        self.assertIn("empty", err)

    def test_wrong_shape(self):
        err, path = self.bad_data("shape", np.zeros((3, 7, 8), np.float32))
        self.assertIn(path, err)
        self.assertIn("[3,7,8]", err)

    def test_wrong_dtype(self):
        err, path = self.bad_data("dtype", np.zeros((3, 8, 8), np.float64))
        self.assertIn(path, err)
        self.assertIn("float64", err)

    def test_nan_and_inf(self):
        for tag, v in (("nan", np.nan), ("inf", np.inf)):
            a = np.zeros((3, 8, 8), np.float32)
            a[1, 2, 3] = v
            err, path = self.bad_data(tag, a)
            self.assertIn(path, err)
            self.assertIn("NaN" if tag == "nan" else "infinite", err)

    def test_missing_folder_and_usage_errors(self):
        r = run(["quantize", self.model_path, "--calibration", os.path.join(WORK, "nope"), "-o",
                 os.path.join(WORK, "x.onnx")])
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not exist", r.stderr)
        for bad in (["--method", "kl"], ["--percentile", "0"], ["--activation-type", "u16"],
                    ["--calibration-size", "-1"]):
            r = run(["quantize", self.model_path, "--calibration", self.data, "-o", os.path.join(WORK, "x.onnx"),
                     *bad])
            self.assertEqual(r.returncode, 2, f"{bad}: {r.stderr}")
            self.assertIn("kiln quantize: error:", r.stderr)

    def test_nothing_quantisable(self):
        nodes = [helper.make_node("Sigmoid", ["x"], ["y"], name="sig")]
        g = helper.make_graph(nodes, "plain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        path = os.path.join(WORK, "plain.onnx")
        onnx.save(m, path)
        out = os.path.join(WORK, "plain.int8.onnx")
        r = run(["quantize", path, "--calibration", os.path.join(WORK, "nowhere"), "-o", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing to quantise", r.stderr)
        with open(path, "rb") as a, open(out, "rb") as b:
            self.assertEqual(a.read(), b.read())
        self.assertEqual(json.loads(r.stdout)["quantized_nodes"]["total"], 0)


if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
