#!/usr/bin/env python3
"""`kiln quantize --sensitivity / --min-cosine / --accuracy-budget` (src/quant/sensitivity.cc).

A small conv net whose last layer is made hard to quantise (one huge outlier weight per
output channel, on an input channel that is always 0: per-channel int8 then rounds every other
weight of it to zero, while in float the outlier changes nothing) is quantised
with a cosine budget. The report must list every quantised node with its two measurements,
put the outlier layer first and keep it float, and the written model must leave exactly the
reported nodes unquantised. ONNX Runtime, running the chosen QDQ model and the float model on
the held-out samples (the last fifth of the calibration files), must see the budget met, and
the fully quantised model must miss it: the fallback is what meets it.

Usage: sensitivity_test.py KILN WORKDIR
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


def ort_available():
    return shutil.which("node") and subprocess.run(["node", "-e", "require('onnxruntime-node')"], cwd=REPO,
                                                   capture_output=True).returncode == 0


def model(rng, spatial=(10, 10), sigmoid=False):
    def conv(name, x, c_in, c_out, outlier=False, dead_channel=False):
        w = rng.normal(0, 1 / np.sqrt(9 * c_in), (c_out, c_in, 3, 3)).astype(np.float32)
        if outlier:
            # Per-channel scale 60/127: every other weight of the channel rounds to 0. The
            # outlier reads input channel 0, which the Relu before keeps at 0, so in float it
            # changes nothing and the layer's real output is lost only when quantised.
            w[:, 0, 0, 0] = 60.0
        b = rng.normal(0, 0.05, c_out).astype(np.float32)
        if dead_channel:
            b[0] = -100.0  # output channel 0 is always negative: 0 after the Relu
        inits.extend([numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")])
        nodes.append(helper.make_node("Conv", [x, name + "_w", name + "_b"], [name], name=name, pads=[1, 1, 1, 1]))
        return name

    nodes, inits = [], []
    y = conv("conv1", "x", 4, 8)
    nodes.append(helper.make_node("Relu", [y], ["relu1"], name="relu1"))
    y = conv("conv2", "relu1", 8, 8, dead_channel=True)
    nodes.append(helper.make_node("Relu", [y], ["relu2"], name="relu2"))
    y = conv("conv3", "relu2", 8, 6, outlier=True)
    if sigmoid:  # a probability map, as a text detector's head gives
        nodes.append(helper.make_node("Sigmoid", [y], ["prob"], name="sigmoid"))
        y = "prob"
    g = helper.make_graph(nodes, "sens", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, *spatial])],
                          [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 6, *spatial])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def ort_outputs(path, inputs, out_dir):
    outs = []
    for i, x in enumerate(inputs):
        d = os.path.join(out_dir, str(i))
        r = subprocess.run(["node", ORT_SCRIPT, path, d, "x=" + x], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(d, "outputs.json")) as f:
            (entry,) = json.load(f).values()
        outs.append(np.load(os.path.join(d, entry["file"])).ravel().astype(np.float64))
    return outs


def mask_iou(a, b, threshold):
    """The IoU of {a > threshold} and {b > threshold}, pooled over the samples."""
    both = sum(int(np.sum((x > threshold) & (y > threshold))) for x, y in zip(a, b))
    either = sum(int(np.sum((x > threshold) | (y > threshold))) for x, y in zip(a, b))
    return both / either if either else 1.0


def mean_cosine(a, b):
    return float(np.mean([x @ y / np.linalg.norm(x) / np.linalg.norm(y) for x, y in zip(a, b)]))


def calibration_set(d):
    """Ten random [1, 4, 10, 10] samples in D/calib: the folder and the files in order."""
    cal = os.path.join(d, "calib")
    os.makedirs(cal, exist_ok=True)
    rng = np.random.default_rng(3)
    files = []
    for i in range(10):
        files.append(os.path.join(cal, f"{i:02d}.npy"))
        np.save(files[-1], rng.normal(0, 1, (1, 4, 10, 10)).astype(np.float32))
    return cal, files


class SensitivityTest(unittest.TestCase):
    def test_outlier_layer_falls_back_to_float(self):
        d = os.path.join(WORK, "outlier")
        cal, files = calibration_set(d)
        src, out, rep = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx"), os.path.join(d, "sens.json")
        onnx.save(model(np.random.default_rng(4)), src)
        target = 0.999
        r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", out, "--sensitivity", rep,
                            "--min-cosine", str(target), "--report", os.path.join(d, "report.json")],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("kept float", r.stderr)
        with open(rep) as f:
            s = json.load(f)
        self.assertEqual(s["metric"], "cosine")
        self.assertEqual(s["evaluation_samples"], 2)  # a fifth of 10
        self.assertEqual({l["node"] for l in s["layers"]}, {"conv1", "conv2", "conv3"})
        self.assertEqual(s["layers"][0]["node"], "conv3", s["layers"])  # the most sensitive first
        self.assertLess(s["all_int8"], target)
        self.assertTrue(s["budget_met"])
        self.assertGreaterEqual(s["chosen"], target)
        self.assertIn("conv3", s["kept_float"])
        for l in s["layers"]:
            self.assertTrue(0 <= l["only_int8"] <= 1 and 0 <= l["only_float"] <= 1, l)
        # The written model: the kept-float nodes read no DequantizeLinear output, the others do.
        q = onnx.load(out)
        dq_outputs = {n.output[0] for n in q.graph.node if n.op_type == "DequantizeLinear"}
        for n in q.graph.node:
            if n.op_type == "Conv":
                self.assertEqual(n.input[1] in dq_outputs, n.name not in s["kept_float"], n.name)
        if not ort_available():
            return
        held_out = files[-2:]
        ref = ort_outputs(src, held_out, os.path.join(d, "ort_float"))
        chosen = ort_outputs(out, held_out, os.path.join(d, "ort_chosen"))
        self.assertGreaterEqual(mean_cosine(ref, chosen), target - 1e-4)

    def test_mask_iou_budget(self):
        """--min-mask-iou: the metric of a thresholded map (a detector's probabilities). The
        outlier layer, whose loss moves the mask, must stay float; ONNX Runtime running the
        float, fully quantised and chosen models on the held-out samples must see the fully
        quantised one miss the IoU NumPy computes and the chosen one meet it."""
        d = os.path.join(WORK, "mask")
        cal, files = calibration_set(d)
        src, out, rep = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx"), os.path.join(d, "sens.json")
        onnx.save(model(np.random.default_rng(4), sigmoid=True), src)
        target, threshold = 0.95, 0.6
        r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", out, "--sensitivity", rep,
                            "--min-mask-iou", str(target), "--mask-threshold", str(threshold),
                            "--report", os.path.join(d, "report.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("mask_iou", r.stderr)
        with open(rep) as f:
            s = json.load(f)
        self.assertEqual(s["metric"], "mask_iou")
        self.assertEqual(s["mask_threshold"], threshold)
        self.assertEqual(s["layers"][0]["node"], "conv3", s["layers"])
        self.assertLess(s["all_int8"], target)
        self.assertTrue(s["budget_met"])
        self.assertGreaterEqual(s["chosen"], target)
        self.assertIn("conv3", s["kept_float"])
        if not ort_available():
            return
        # The fully quantised model, written without a budget.
        full = os.path.join(d, "full.int8.onnx")
        r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", full, "--eval-fraction", "0.2",
                            "--sensitivity", os.path.join(d, "full_sens.json"), "--report",
                            os.path.join(d, "full_report.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        held_out = files[-2:]
        ref = ort_outputs(src, held_out, os.path.join(d, "ort_float"))
        self.assertLess(mask_iou(ref, ort_outputs(full, held_out, os.path.join(d, "ort_full")), threshold), target)
        self.assertGreaterEqual(mask_iou(ref, ort_outputs(out, held_out, os.path.join(d, "ort_chosen")), threshold),
                                target)

    def test_samples_of_different_shapes(self):
        """Held-out samples of several sizes (OCR crops differ in width): the variants keep the
        model's open dims and every sample runs."""
        d = os.path.join(WORK, "shapes")
        cal = os.path.join(d, "calib")
        os.makedirs(cal, exist_ok=True)
        rng = np.random.default_rng(6)
        for i in range(10):
            np.save(os.path.join(cal, f"{i:02d}.npy"), rng.normal(0, 1, (1, 4, 10, 8 + 2 * (i % 3))).astype(np.float32))
        src, out, rep = os.path.join(d, "m.onnx"), os.path.join(d, "m.int8.onnx"), os.path.join(d, "sens.json")
        onnx.save(model(np.random.default_rng(4), spatial=(10, "w")), src)
        r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", out, "--sensitivity", rep,
                            "--report", os.path.join(d, "report.json")], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(rep) as f:
            s = json.load(f)
        self.assertEqual(len(s["layers"]), 3)
        self.assertLess(s["all_int8"], 0.999)  # the outlier layer, as above
        self.assertEqual(s["layers"][0]["node"], "conv3")

    def test_usage_errors(self):
        src = os.path.join(WORK, "outlier", "m.onnx")
        cal = os.path.join(WORK, "outlier", "calib")
        for extra in (["--min-cosine", "0.99", "--accuracy-budget", "1%"], ["--accuracy-budget", "abc"],
                      ["--min-mask-iou", "0.99", "--min-cosine", "0.99"], ["--min-mask-iou", "1.5"],
                      ["--min-mask-iou", "0.99", "--mask-threshold", "nan"],
                      ["--min-cosine", "0.99", "--eval-fraction", "1.5"]):
            r = subprocess.run([KILN, "quantize", src, "--calibration", cal, "-o", os.path.join(WORK, "x.onnx")] + extra,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, (extra, r.stderr))
            self.assertIn("kiln quantize: error:", r.stderr)


if __name__ == "__main__":
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
