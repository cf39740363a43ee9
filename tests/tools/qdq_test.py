#!/usr/bin/env python3
"""QDQ models on Kiln's int8 kernels (the qdq_folding pass, src/kernels/cpu/qlinear_conv.cc).

Small QDQ convolutional nets written with onnx.helper in the form quantisers write (uint8 or
int8 activations per tensor, int8 weights per output channel, float or int32 biases, Relu and
Relu6 between conv and QuantizeLinear, MaxPool between Q/DQ pairs) are compiled by `kiln
compile`; the compile report must show the folded patterns and the int8 kernels, and `kiln
run` must match ONNX Runtime running the same QDQ file (its own int8 kernels) within one
quantisation step of the output, and Kiln at -O0 (the float QDQ graph on reference kernels).

Usage: qdq_test.py KILN WORKDIR
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


def ort_available():
    if not shutil.which("node"):
        return False
    probe = subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=REPO, capture_output=True)
    return probe.returncode == 0


class QdqNet:
    """Builds a QDQ graph node by node, keeping the float scales it chose."""

    def __init__(self, act_type, seed):
        self.rng = np.random.default_rng(seed)
        self.act_type = act_type  # TensorProto.UINT8 or INT8
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base):
        self.count += 1
        return f"{base}{self.count}"

    def const(self, base, array):
        n = self.name(base)
        self.inits.append(numpy_helper.from_array(array, n))
        return n

    def qparams(self, lo, hi):
        """Per-tensor scale and zero point for [lo, hi] (lo <= 0 <= hi), as minmax calibration."""
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        if self.act_type == TensorProto.UINT8:
            scale = np.float32((hi - lo) / 255.0)
            zp = np.uint8(np.clip(np.rint(-lo / scale), 0, 255))
        else:
            scale = np.float32(max(-lo, hi) / 127.0)
            zp = np.int8(0)
        return self.const("scale", np.array(scale, np.float32)), self.const("zp", np.array(zp))

    def qdq(self, x, lo, hi):
        s, z = self.qparams(lo, hi)
        q, dq = self.name("q"), self.name("dq")
        self.nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [q], name=q))
        self.nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [dq], name=dq))
        return dq

    def conv(self, x, c_in, c_out, k, act, bias_kind, group=1, stride=1):
        w = self.rng.normal(0, 1.0 / np.sqrt(c_in / group * k * k), (c_out, c_in // group, k, k)).astype(np.float32)
        w_scale = (np.abs(w).reshape(c_out, -1).max(axis=1) / 127.0).astype(np.float32)
        wq = np.clip(np.rint(w / w_scale[:, None, None, None]), -127, 127).astype(np.int8)
        wdq = self.name("wdq")
        self.nodes.append(helper.make_node(
            "DequantizeLinear", [self.const("wq", wq), self.const("wscale", w_scale),
                                 self.const("wzp", np.zeros(c_out, np.int8))], [wdq], axis=0, name=wdq))
        inputs = [x, wdq]
        b = self.rng.normal(0, 0.1, c_out).astype(np.float32)
        if bias_kind == "float":
            inputs.append(self.const("b", b))
        elif bias_kind == "int32":
            # ONNX Runtime's form: int32 at scale x_scale * w_scale, dequantised.
            x_scale = self.last_scale
            b_scale = (np.float32(x_scale) * w_scale).astype(np.float32)
            bq = np.rint(b / b_scale).astype(np.int32)
            bdq = self.name("bdq")
            self.nodes.append(helper.make_node("DequantizeLinear", [self.const("bq", bq), self.const("bscale", b_scale)],
                                               [bdq], axis=0, name=bdq))
            inputs.append(bdq)
        y = self.name("conv")
        pad = k // 2
        self.nodes.append(helper.make_node("Conv", inputs, [y], name=y, kernel_shape=[k, k], pads=[pad] * 4,
                                           group=group, strides=[stride, stride]))
        if act == "relu":
            r = self.name("relu")
            self.nodes.append(helper.make_node("Relu", [y], [r], name=r))
            y = r
        elif act == "relu6":
            r = self.name("clip")
            self.nodes.append(helper.make_node("Clip", [y, self.const("lo", np.array(0, np.float32)),
                                                        self.const("hi", np.array(6, np.float32))], [r], name=r))
            y = r
        return y


def fake_quant(v, scale, zp, act_type):
    lo, hi = (0, 255) if act_type == TensorProto.UINT8 else (-128, 127)
    return ((np.clip(np.rint(v / scale) + zp, lo, hi) - zp) * scale).astype(np.float32)


def build(act_type, bias_kind, seed, shape=(1, 8, 20, 20)):
    """x -> QDQ -> conv+relu -> QDQ -> maxpool -> QDQ -> depthwise+relu6 -> QDQ -> conv -> QDQ -> y.

    Each QDQ pair's range is that of its tensor on the calibration input x, computed with
    PyTorch on the dequantised values (minmax calibration)."""
    import torch
    import torch.nn.functional as F

    net = QdqNet(act_type, seed)
    rng = np.random.default_rng(seed + 100)
    x = rng.normal(0, 1, shape).astype(np.float32)
    inits = {}

    def qdq_of(value, v):
        out = net.qdq(value, float(v.min()), float(v.max()))
        scale = float(numpy_helper.to_array(net.inits[-2]))
        zp = int(numpy_helper.to_array(net.inits[-1]))
        net.last_scale = scale
        return out, fake_quant(v, scale, zp, act_type), scale, zp

    cur, val, scale, zp = qdq_of("x", x)
    c = shape[1]
    for layer in [("conv", c, 16, 3, "relu", 1, 1), ("maxpool",), ("conv", 16, 16, 3, "relu6", 16, 1),
                  ("conv", 16, 24, 1, "", 1, 2)]:
        if layer[0] == "maxpool":
            p = net.name("pool")
            net.nodes.append(helper.make_node("MaxPool", [cur], [p], name=p, kernel_shape=[2, 2], strides=[2, 2]))
            # The same scale and zero point as its input: MaxPool commutes with quantisation.
            s_name, z_name = net.nodes[-2].input[1], net.nodes[-2].input[2]
            q, dq = net.name("q"), net.name("dq")
            net.nodes.append(helper.make_node("QuantizeLinear", [p, s_name, z_name], [q], name=q))
            net.nodes.append(helper.make_node("DequantizeLinear", [q, s_name, z_name], [dq], name=dq))
            cur = dq
            val = F.max_pool2d(torch.from_numpy(val), 2, 2).numpy()
            continue
        _, ci, co, k, act, group, stride = layer
        first = len(net.inits)
        y = net.conv(cur, ci, co, k, act, bias_kind, group, stride)
        arrays = {i.name: numpy_helper.to_array(i) for i in net.inits[first:]}
        wq = next(a for n, a in arrays.items() if n.startswith("wq"))
        ws = next(a for n, a in arrays.items() if n.startswith("wscale"))
        w = torch.from_numpy(wq.astype(np.float32) * ws[:, None, None, None])
        if bias_kind == "float":
            b = torch.from_numpy(next(a for n, a in arrays.items() if n.startswith("b")))
        elif bias_kind == "int32":
            bq = next(a for n, a in arrays.items() if n.startswith("bq"))
            bs = next(a for n, a in arrays.items() if n.startswith("bscale"))
            b = torch.from_numpy(bq.astype(np.float32) * bs)
        else:
            b = None
        v = F.conv2d(torch.from_numpy(val), w, b, stride=stride, padding=k // 2, groups=group)
        if act == "relu":
            v = F.relu(v)
        elif act == "relu6":
            v = torch.clamp(v, 0, 6)
        cur, val, scale, zp = qdq_of(y, v.numpy())
    g = helper.make_graph(net.nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, list(val.shape))], net.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model, x, scale


def build_products(act_type, seed):
    """x [6, 40] -> QDQ -> Gemm(transB, DQ(w) per row, bias) -> Relu -> QDQ -> MatMul(DQ(w) per
    column) + bias -> y (float: no QuantizeLinear after the last product)."""
    net = QdqNet(act_type, seed)
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (6, 40)).astype(np.float32)

    def weights(k, n, axis):
        w = rng.normal(0, 1 / np.sqrt(k), (k, n) if axis == 1 else (n, k)).astype(np.float32)
        s = (np.abs(w).max(axis=1 - axis) / 127).astype(np.float32)
        q = np.clip(np.rint(w / (s[None, :] if axis == 1 else s[:, None])), -127, 127).astype(np.int8)
        out = net.name("wdq")
        net.nodes.append(helper.make_node("DequantizeLinear", [net.const("wq", q), net.const("ws", s),
                                                               net.const("wz", np.zeros(n, np.int8))], [out],
                                          axis=axis, name=out))
        wf = q.astype(np.float32) * (s[None, :] if axis == 1 else s[:, None])
        return out, (wf if axis == 1 else wf.T)

    def qdq_of(value, v):
        out = net.qdq(value, float(v.min()), float(v.max()))
        scale = float(numpy_helper.to_array(net.inits[-2]))
        zp = int(numpy_helper.to_array(net.inits[-1]))
        return out, fake_quant(v, scale, zp, act_type)

    cur, val = qdq_of("x", x)
    w1, w1f = weights(40, 32, 0)
    b1 = rng.normal(0, 0.1, 32).astype(np.float32)
    g = net.name("gemm")
    net.nodes.append(helper.make_node("Gemm", [cur, w1, net.const("b", b1)], [g], transB=1, name=g))
    r = net.name("relu")
    net.nodes.append(helper.make_node("Relu", [g], [r], name=r))
    cur, val = qdq_of(r, np.maximum(val @ w1f + b1, 0))
    hidden_scale = float(numpy_helper.to_array(net.inits[-2]))
    w2, w2f = weights(32, 10, 1)
    m = net.name("matmul")
    net.nodes.append(helper.make_node("MatMul", [cur, w2], [m], name=m))
    y = net.name("add")
    net.nodes.append(helper.make_node("Add", [m, net.const("b", rng.normal(0, 0.1, 10).astype(np.float32))], [y],
                                      name=y))
    graph = helper.make_graph(net.nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 40])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [6, 10])], net.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    # What one hidden value landing a step away (a rounding tie) moves an output by.
    one_step = hidden_scale * float(np.abs(w2f).max())
    return model, x, one_step


def ort_output(model, x_path, out_dir):
    """ONNX Runtime's output of `model` on input x (tests/e2e/ort_reference.js)."""
    r = subprocess.run(["node", ORT_SCRIPT, model, out_dir, "x=" + x_path], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"ONNX Runtime failed on {model}: {r.stderr}")
    return load_output(out_dir)


def run(args, **kw):
    return subprocess.run([KILN] + args, capture_output=True, text=True, **kw)


def load_output(out_dir):
    with open(os.path.join(out_dir, "outputs.json")) as f:
        meta = json.load(f)
    (entry,) = meta.values()
    return np.load(os.path.join(out_dir, entry["file"]))


class QdqTest(unittest.TestCase):
    def check_model(self, tag, act_type, bias_kind):
        d = os.path.join(WORK, tag)
        os.makedirs(d, exist_ok=True)
        model, x, out_scale = build(act_type, bias_kind, seed=len(tag))
        path = os.path.join(d, "m.onnx")
        onnx.save(model, path)
        np.save(os.path.join(d, "x.npy"), x)
        report = os.path.join(d, "report.json")
        r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        text = json.dumps(rep)
        # Three convolutions and the pool folded, on oneDNN's int8 kernels.
        for pattern in ("QDQ:Conv+Relu", "QDQ:Conv+Clip", "QDQ:MaxPool", '"QDQ:Conv"'):
            self.assertIn(pattern, text, f"{tag}: {pattern} not in the compile report")
        # Every convolution on a oneDNN int8 kernel, none on the reference.
        kernels = rep["kernels"]
        self.assertEqual(kernels.get("QLinearConv/onednn", 0) + kernels.get("kiln.FusedQLinearConv/onednn", 0), 3,
                         f"{tag}: {kernels}")
        outs = {}
        for level in ("3", "0"):
            od = os.path.join(d, "O" + level)
            compiled = os.path.join(d, f"m_O{level}.kiln")
            r = run(["compile", path, "-O", level, "-o", compiled])
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run(["run", compiled, "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", od])
            self.assertEqual(r.returncode, 0, r.stderr)
            outs[level] = load_output(od)
        # -O3 (integer kernels) against -O0 (the float QDQ graph): the same quantised values up
        # to one step where a rounding tie fell the other way.
        steps = np.abs(outs["3"] - outs["0"]) / out_scale
        self.assertLessEqual(float(steps.max()), 1.0 + 1e-3, f"{tag}: -O3 vs -O0 differ by {steps.max()} steps")
        if not ort_available():
            return
        ort = ort_output(path, os.path.join(d, "x.npy"), os.path.join(d, "ort"))
        steps = np.abs(outs["3"] - ort) / out_scale
        self.assertLessEqual(float(steps.max()), 1.0 + 1e-3, f"{tag}: Kiln vs ONNX Runtime differ by {steps.max()} steps")
        self.assertLessEqual(float(np.mean(steps > 0.5)), 0.01, f"{tag}: more than 1% of outputs a step off")

    def test_products(self):
        for act_type, tag in ((TensorProto.UINT8, "u8"), (TensorProto.INT8, "s8")):
            d = os.path.join(WORK, "products_" + tag)
            os.makedirs(d, exist_ok=True)
            model, x, one_step = build_products(act_type, seed=7)
            path = os.path.join(d, "m.onnx")
            onnx.save(model, path)
            np.save(os.path.join(d, "x.npy"), x)
            report = os.path.join(d, "report.json")
            r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(report) as f:
                rep = json.load(f)
            self.assertEqual(rep["fusions"].get("QDQ:Gemm+Bias+Relu"), 1, rep["fusions"])
            self.assertEqual(rep["fusions"].get("QDQ:MatMul+Bias+Float"), 1, rep["fusions"])
            self.assertEqual(rep["kernels"].get("kiln.FusedQLinearMatMul/onednn"), 2, rep["kernels"])
            outs = {}
            for level in ("3", "0"):
                compiled = os.path.join(d, f"m_O{level}.kiln")
                self.assertEqual(run(["compile", path, "-O", level, "-o", compiled]).returncode, 0)
                od = os.path.join(d, "O" + level)
                r = run(["run", compiled, "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", od])
                self.assertEqual(r.returncode, 0, r.stderr)
                outs[level] = load_output(od)
            # The float output: float32 rounding, plus at most two hidden values a step away.
            tol = 2 * one_step + 1e-5 * float(np.abs(outs["0"]).max())
            self.assertLess(float(np.abs(outs["3"] - outs["0"]).max()), tol, tag)
            if ort_available():
                ort = ort_output(path, os.path.join(d, "x.npy"), os.path.join(d, "ort"))
                self.assertLess(float(np.abs(outs["3"] - ort).max()), tol, tag)

    def test_compile_precision_int8(self):
        """kiln compile --precision int8 --calibration: kiln quantize, then the QDQ model compiled."""
        d = os.path.join(WORK, "compile_int8")
        cal = os.path.join(d, "calib")
        os.makedirs(cal, exist_ok=True)
        rng = np.random.default_rng(11)
        w1 = rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32)
        w2 = rng.normal(0, 0.2, (4, 8, 3, 3)).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
                 helper.make_node("Conv", ["r1", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
        g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 12, 12])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
        src = os.path.join(d, "m.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), src)
        for i in range(4):
            np.save(os.path.join(cal, f"{i}.npy"), rng.normal(0, 1, (1, 3, 12, 12)).astype(np.float32))
        x = os.path.join(cal, "0.npy")
        out, report = os.path.join(d, "m.kiln"), os.path.join(d, "r.json")
        r = run(["compile", src, "--precision", "int8", "--calibration", cal, "-o", out, "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        self.assertEqual(rep["fusions"].get("QDQ:Conv+Relu"), 1, rep["fusions"])
        self.assertEqual(rep["kernels"].get("kiln.FusedQLinearConv/onednn", 0) + rep["kernels"].get("QLinearConv/onednn", 0),
                         2, rep["kernels"])
        od = os.path.join(d, "out")
        r = run(["run", out, "--input", "x=" + x, "--output-dir", od])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = load_output(od).ravel()
        if ort_available():
            ref = ort_output(src, x, os.path.join(d, "ort")).ravel()
            self.assertGreater(float(got @ ref / np.linalg.norm(got) / np.linalg.norm(ref)), 0.999)
        # Usage errors: int8 without data, data without int8.
        self.assertEqual(run(["compile", src, "--precision", "int8", "-o", out]).returncode, 2)
        self.assertEqual(run(["compile", src, "--calibration", cal, "-o", out]).returncode, 2)

    def test_pytorch_quantized_export(self):
        """A model quantised by PyTorch (eager mode: fuse, prepare, calibrate, convert) and exported
        by torch.onnx: Q -> Cast -> DQ chains, weights and biases as Constant nodes, a bias zero
        point computed by ConstantOfShape -> Cast. Kiln must fold every Conv and the Linear into
        int8 kernels and match ONNX Runtime within one step of the output scale."""
        import torch
        import torch.nn as nn

        d = os.path.join(WORK, "pytorch")
        os.makedirs(d, exist_ok=True)

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.q = torch.ao.quantization.QuantStub()
                self.dq = torch.ao.quantization.DeQuantStub()
                self.c1 = nn.Conv2d(3, 16, 3, padding=1)
                self.r1 = nn.ReLU()
                self.c2 = nn.Conv2d(16, 8, 3, padding=1, stride=2)
                self.fc = nn.Linear(8 * 8 * 8, 10)

            def forward(self, x):
                x = self.r1(self.c1(self.q(x)))
                return self.dq(self.fc(torch.flatten(self.c2(x), 1)))

        torch.manual_seed(0)
        m = Net().eval()
        engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "fbgemm"
        m.qconfig = torch.ao.quantization.get_default_qconfig(engine)
        torch.ao.quantization.fuse_modules(m, [["c1", "r1"]], inplace=True)
        prepared = torch.ao.quantization.prepare(m)
        for _ in range(8):
            prepared(torch.randn(1, 3, 16, 16))
        q = torch.ao.quantization.convert(prepared)
        x = torch.randn(1, 3, 16, 16)
        path = os.path.join(d, "m.onnx")
        torch.onnx.export(q, x, path, opset_version=13, input_names=["x"], output_names=["y"])
        np.save(os.path.join(d, "x.npy"), x.numpy())
        report = os.path.join(d, "r.json")
        r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        self.assertEqual(rep["kernels"].get("kiln.FusedQLinearConv/onednn", 0) + rep["kernels"].get("QLinearConv/onednn", 0),
                         2, rep["kernels"])
        self.assertEqual(rep["kernels"].get("kiln.FusedQLinearMatMul/onednn"), 1, rep["kernels"])
        od = os.path.join(d, "out")
        r = run(["run", os.path.join(d, "m.kiln"), "--input", "x=" + os.path.join(d, "x.npy"), "--output-dir", od])
        self.assertEqual(r.returncode, 0, r.stderr)
        got = load_output(od)
        step = float(q.fc.scale)
        # PyTorch's own int8 kernels: within a step too (they round the same way up to ties).
        self.assertLessEqual(float(np.abs(got - q(x).numpy()).max()), step * (1 + 1e-3))
        if ort_available():
            ort = ort_output(path, os.path.join(d, "x.npy"), os.path.join(d, "ort"))
            self.assertLessEqual(float(np.abs(got - ort).max()), step * (1 + 1e-3))

    def test_uint8_float_bias(self):
        self.check_model("u8_float_bias", TensorProto.UINT8, "float")

    def test_int8_int32_bias(self):
        self.check_model("s8_int32_bias", TensorProto.INT8, "int32")

    def test_uint8_no_bias(self):
        self.check_model("u8_no_bias", TensorProto.UINT8, "none")


if __name__ == "__main__":
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
