#!/usr/bin/env python3
"""ConvInteger on Kiln's oneDNN int8 kernel (src/kernels/cpu/conv_integer.cc).

1. The ONNX backend node tests test_convinteger_* (tests/onnx/backend/node), with W and
   w_zero_point made initializers (the kernel packs constant weights; the tests feed every input)
   and x_zero_point left a graph input (a zero point given at run time): `kiln compile` must
   put the node on the onednn kernel and `kiln run` must give the test's output exactly.
2. Larger random cases against NumPy's integer convolution (int64 sums of (x - x_zp) *
   (w - w_zp) over zero-padded windows): uint8 / int8 X and W; zero points absent, constant,
   given at run time, per output channel, ones that make the kernel's weight correction run;
   pads (asymmetric, auto_pad), strides, dilations, groups, depthwise, 1-D and 3-D, and sums
   past float32's exact integers (2^24: on brgconv, or refused with the reason for an int8 X).
   All in one model, compiled and run once; outputs equal exactly.
3. Open dims (compiled without --input-shape), run at two shapes: the kernel per shape.

Usage: conv_integer_test.py KILN WORKDIR
"""
import glob
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
HERE = os.path.dirname(os.path.abspath(__file__))
BACKEND = os.path.join(os.path.dirname(HERE), "onnx", "backend", "node")


def run(args):
    return subprocess.run([KILN] + args, capture_output=True, text=True)


def out_extent(n, k, s, d, pb, pe):
    return (n + pb + pe - ((k - 1) * d + 1)) // s + 1


def numpy_conv_integer(x, w, x_zp, w_zp, strides, dilations, pads, group):
    """ONNX ConvInteger in int64: (x - x_zp) padded with 0, times (w - w_zp[m])."""
    nd = x.ndim - 2
    xc = x.astype(np.int64) - (0 if x_zp is None else int(x_zp))
    zw = np.zeros(w.shape[0], np.int64) if w_zp is None else np.broadcast_to(
        np.asarray(w_zp).astype(np.int64).reshape(-1), (w.shape[0],))
    wc = w.astype(np.int64) - zw.reshape((-1,) + (1,) * (w.ndim - 1))
    xp = np.pad(xc, [(0, 0), (0, 0)] + [(pads[d], pads[d + nd]) for d in range(nd)])
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    ks = w.shape[2:]
    out = [out_extent(x.shape[2 + d], ks[d], strides[d], dilations[d], pads[d], pads[d + nd]) for d in range(nd)]
    y = np.zeros((n, m) + tuple(out), np.int64)
    mg = m // group
    for kidx in np.ndindex(*ks):
        sl = tuple(slice(kidx[d] * dilations[d], kidx[d] * dilations[d] + (out[d] - 1) * strides[d] + 1, strides[d])
                   for d in range(nd))
        patch = xp[(slice(None), slice(None)) + sl]  # [n, c, out...]
        for g in range(group):
            xs = patch[:, g * cg:(g + 1) * cg]
            ws = wc[(slice(g * mg, (g + 1) * mg), slice(None)) + kidx]  # [mg, cg]
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", xs, ws)
    return y.astype(np.int32)  # wrapping, as ONNX allows (no case here wraps)


def same_pads(in_dims, ks, strides, dilations, upper):
    pb, pe = [], []
    for n, k, s, d in zip(in_dims, ks, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        pb.append(small if upper else big)
        pe.append(big if upper else small)
    return pb + pe


class ConvIntegerTest(unittest.TestCase):
    def compile_and_run(self, d, path, feeds):
        report = os.path.join(d, "report.json")
        r = run(["compile", path, "-o", os.path.join(d, "m.kiln"), "--report", report])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(report) as f:
            rep = json.load(f)
        args = ["run", os.path.join(d, "m.kiln"), "--output-dir", os.path.join(d, "out")]
        for name, array in feeds.items():
            p = os.path.join(d, name + ".npy")
            np.save(p, array)
            args += ["--input", f"{name}={p}"]
        r = run(args)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(d, "out", "outputs.json")) as f:
            meta = json.load(f)
        return rep, {name: np.load(os.path.join(d, "out", e["file"])) for name, e in meta.items()}

    def test_backend_node_tests_on_the_onednn_kernel(self):
        tests = sorted(glob.glob(os.path.join(BACKEND, "test_convinteger_*")))
        self.assertGreaterEqual(len(tests), 2, BACKEND)
        for t in tests:
            name = os.path.basename(t)
            model = onnx.load(os.path.join(t, "model.onnx"))
            g = model.graph
            data = os.path.join(t, "test_data_set_0")
            values = {}
            for i, vi in enumerate(g.input):
                tp = onnx.TensorProto()
                with open(os.path.join(data, f"input_{i}.pb"), "rb") as f:
                    tp.ParseFromString(f.read())
                values[vi.name] = numpy_helper.to_array(tp)
            want = onnx.TensorProto()
            with open(os.path.join(data, "output_0.pb"), "rb") as f:
                want.ParseFromString(f.read())
            want = numpy_helper.to_array(want)
            node = g.node[0]
            constant = [n for n in node.input[1:] if n and n != (node.input[2] if len(node.input) > 2 else None)]
            feeds = {k: v for k, v in values.items() if k not in constant}
            inputs = [vi for vi in g.input if vi.name not in constant]
            del g.input[:]
            g.input.extend(inputs)
            g.initializer.extend(numpy_helper.from_array(values[n], n) for n in constant)
            d = os.path.join(WORK, name)
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "m.onnx")
            onnx.save(model, path)
            rep, outs = self.compile_and_run(d, path, feeds)
            self.assertEqual(rep["kernels"].get("ConvInteger/onednn"), 1, f"{name}: {rep['kernels']}")
            got = outs[g.output[0].name]
            self.assertEqual(got.dtype, np.int32, name)
            np.testing.assert_array_equal(got, want, name)

    def test_random_cases_equal_numpy(self):
        rng = np.random.default_rng(28)
        u8, s8 = np.uint8, np.int8
        # (tag, x dims, w dims, x dtype, w dtype, x_zp: None | ("const"|"input", v), w_zp:
        #  None | scalar | "per-channel", attrs)
        cases = [
            ("plain_u8", [1, 16, 14, 14], [32, 16, 3, 3], u8, u8, ("input", 3), 128, dict(pads=[1, 1, 1, 1])),
            ("per_channel_wzp", [2, 8, 11, 9], [12, 8, 3, 2], u8, u8, ("input", 200), "per-channel",
             dict(strides=[2, 1], pads=[1, 0, 2, 1])),
            ("s8_groups_dilated", [1, 16, 13, 13], [24, 4, 3, 3], s8, s8, None, None,
             dict(group=4, dilations=[2, 2], pads=[2, 2, 2, 2])),
            ("depthwise_correction", [1, 24, 10, 10], [24, 1, 3, 3], u8, s8, ("const", 17), "per-channel",
             dict(group=24, pads=[1, 1, 1, 1], strides=[2, 2])),
            ("no_zero_points_u8_weights", [1, 8, 9, 9], [16, 8, 3, 3], u8, u8, None, None, {}),
            ("conv1d_same_upper", [2, 8, 50], [12, 8, 5], s8, u8, ("input", -5), 90,
             dict(strides=[3], auto_pad="SAME_UPPER")),
            ("conv3d", [1, 4, 6, 7, 8], [8, 4, 3, 3, 3], u8, s8, ("input", 128), 0, dict(pads=[1, 1, 1, 1, 1, 1])),
            ("pointwise_batch", [3, 32, 7, 7], [64, 32, 1, 1], u8, s8, ("const", 0), None, {}),
            # 2304-term sums of 255 * 127: ~7.5e7, past float32's exact integers (2^24).
            ("large_sums", [1, 256, 6, 6], [16, 256, 3, 3], u8, s8, None, None, dict(pads=[1, 1, 1, 1])),
            ("large_sums_zero_point", [1, 256, 6, 6], [16, 256, 3, 3], u8, s8, ("input", 2), None,
             dict(pads=[1, 1, 1, 1])),
            ("large_sums_s8_groups", [1, 256, 4, 4], [16, 128, 3, 3], s8, s8, None, None,
             dict(group=2, pads=[1, 1, 1, 1])),
            ("large_sums_correction", [1, 256, 6, 6], [16, 256, 3, 3], u8, u8, ("input", 1), 0,
             dict(pads=[1, 1, 1, 1])),
        ]
        nodes, inits, inputs, outputs, feeds, want = [], [], [], [], {}, {}
        for tag, xd, wd, xt, wt, xzp, wzp, attrs in cases:
            info = np.iinfo(xt)
            if tag.startswith("large_sums"):
                x = rng.integers(info.max - 5, info.max + 1, xd).astype(xt)
                w = np.full(wd, np.iinfo(wt).max, wt)
            else:
                x = rng.integers(info.min, info.max + 1, xd).astype(xt)
                w = rng.integers(np.iinfo(wt).min, np.iinfo(wt).max + 1, wd).astype(wt)
            ins = ["x_" + tag, "w_" + tag]
            inputs.append(helper.make_tensor_value_info(ins[0], TensorProto.UINT8 if xt == u8 else TensorProto.INT8, xd))
            feeds[ins[0]] = x
            inits.append(numpy_helper.from_array(w, ins[1]))
            x_zp_value = None
            if xzp is not None or wzp is not None:
                if xzp is None:
                    ins.append("")
                else:
                    kind, x_zp_value = xzp
                    zp = np.array(x_zp_value, xt)
                    ins.append("xzp_" + tag)
                    if kind == "const":
                        inits.append(numpy_helper.from_array(zp, ins[-1]))
                    else:
                        inputs.append(helper.make_tensor_value_info(
                            ins[-1], TensorProto.UINT8 if xt == u8 else TensorProto.INT8, []))
                        feeds[ins[-1]] = zp
            w_zp_value = None
            if wzp is not None:
                w_zp_value = (rng.integers(np.iinfo(wt).min, np.iinfo(wt).max + 1, wd[0]).astype(wt)
                              if wzp == "per-channel" else np.array(wzp, wt))
                ins.append("wzp_" + tag)
                inits.append(numpy_helper.from_array(w_zp_value, ins[-1]))
            nd = len(xd) - 2
            strides = attrs.get("strides", [1] * nd)
            dilations = attrs.get("dilations", [1] * nd)
            if attrs.get("auto_pad") == "SAME_UPPER":
                pads = same_pads(xd[2:], wd[2:], strides, dilations, True)
            else:
                pads = attrs.get("pads", [0] * 2 * nd)
            y = numpy_conv_integer(x, w, x_zp_value, w_zp_value, strides, dilations, pads, attrs.get("group", 1))
            nodes.append(helper.make_node("ConvInteger", ins, ["y_" + tag], name="conv_" + tag, **attrs))
            outputs.append(helper.make_tensor_value_info("y_" + tag, TensorProto.INT32, list(y.shape)))
            want["y_" + tag] = y
        g = helper.make_graph(nodes, "conv_integer", inputs, outputs, inits)
        d = os.path.join(WORK, "random")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)]), path)
        rep, outs = self.compile_and_run(d, path, feeds)
        # int8 X whose sums may pass 2^24: no exact oneDNN kernel, the reference kernel says why.
        self.assertEqual(rep["kernels"].get("ConvInteger/onednn"), len(cases) - 1, rep["kernels"])
        reasons = {r["node"]: r["reason"] for r in rep["reference_fallback_reasons"]}
        self.assertEqual(list(reasons), ["conv_large_sums_s8_groups"], reasons)
        self.assertIn("may pass 2^24", reasons["conv_large_sums_s8_groups"])
        for name, y in want.items():
            np.testing.assert_array_equal(outs[name], y, name)

    def test_open_dims_run_on_the_kernel_per_shape(self):
        """X [N, 4, H, W] compiled without --input-shape: the kernel is prepared per shape."""
        rng = np.random.default_rng(7)
        w = rng.integers(0, 256, (8, 4, 3, 3)).astype(np.uint8)
        node = helper.make_node("ConvInteger", ["x", "w", "xzp", "wzp"], ["y"], name="conv", pads=[1, 1, 1, 1])
        g = helper.make_graph([node], "open", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 4, "H", "W"]),
                                               helper.make_tensor_value_info("xzp", TensorProto.UINT8, [])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.uint8(30), "wzp")])
        d = os.path.join(WORK, "open")
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "m.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 10)]), path)
        for i, shape in enumerate(((1, 4, 9, 7), (2, 4, 5, 12))):
            x = rng.integers(0, 256, shape).astype(np.uint8)
            run_dir = os.path.join(d, str(i))
            os.makedirs(run_dir, exist_ok=True)
            rep, outs = self.compile_and_run(run_dir, path, {"x": x, "xzp": np.array(7, np.uint8)})
            self.assertEqual(rep["kernels"].get("ConvInteger/onednn"), 1, rep["kernels"])
            self.assertEqual(rep["per_shape_kernels"], 1, rep)
            want = numpy_conv_integer(x, w, 7, np.uint8(30), [1, 1], [1, 1], [1, 1, 1, 1], 1)
            np.testing.assert_array_equal(outs["y"], want, f"open dims at {shape}")


if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1])
