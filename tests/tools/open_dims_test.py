#!/usr/bin/env python3
"""Models compiled with open dims, as a user meets them (docs/dynamic-shapes.md): outputs at
several shapes against NumPy, the compile summary's warning about nodes left on reference
kernels because of open dims (and its absence once the shapes are fixed), the report's
per-shape count and reasons, and `kiln inspect --nodes`. The expected nodes come from the ONNX
graphs written here.

usage: open_dims_test.py KILN_BINARY WORK_DIR
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
RNG = np.random.default_rng(24)
W = RNG.standard_normal((16, 16)).astype(np.float32)


def kiln(*args, check=True):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def save(model, name):
    path = os.path.join(WORK, name)
    onnx.save(model, path)
    return path


def heads_model():
    """x[B,S,16] -> MatMul W -> view(B, S, 2, 8) (computed from Shape) -> Transpose -> Relu."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], name="proj"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["b"], name="batch", axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], name="seq", axis=0),
        helper.make_node("Unsqueeze", ["b", "a0"], ["bu"], name="bu"),
        helper.make_node("Unsqueeze", ["t", "a0"], ["tu"], name="tu"),
        helper.make_node("Concat", ["bu", "tu", "heads"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["h", "target"], ["r"], name="split_heads"),
        helper.make_node("Transpose", ["r"], ["p"], name="perm", perm=[0, 2, 1, 3]),
        helper.make_node("Relu", ["p"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes, "heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 2, "S", 8])],
        [numpy_helper.from_array(W, "W"), i64("i0", 0), i64("i1", 1), i64("a0", [0]), i64("heads", [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="open_dims_test")
    onnx.checker.check_model(m)
    return m


def flatten_model():
    """x[B,S,16] -> Reshape to [B*S, 16] (the product computed from Shape) -> Relu: the
    product of two open dims is a computation the compiler does not follow."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "i0"], ["b"], name="batch", axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], name="seq", axis=0),
        helper.make_node("Mul", ["b", "t"], ["bt"], name="rows"),
        helper.make_node("Unsqueeze", ["bt", "a0"], ["btu"], name="btu"),
        helper.make_node("Concat", ["btu", "width"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"], name="flatten_rows"),
        helper.make_node("Relu", ["r"], ["y"], name="relu"),
    ]
    g = helper.make_graph(
        nodes, "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 16])],
        [i64("i0", 0), i64("i1", 1), i64("a0", [0]), i64("width", [16])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="open_dims_test")
    onnx.checker.check_model(m)
    return m


def numpy_heads(x):
    b, s, _ = x.shape
    return np.maximum((x @ W).reshape(b, s, 2, 8).transpose(0, 2, 1, 3), 0)


class OpenDimsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.heads = save(heads_model(), "heads.onnx")
        cls.flatten = save(flatten_model(), "flatten.onnx")

    def run_kiln(self, model, x, tag):
        np.save(os.path.join(WORK, f"x_{tag}.npy"), x)
        out = os.path.join(WORK, f"out_{tag}")
        kiln("run", model, "--input", f"x={WORK}/x_{tag}.npy", "--output-dir", out)
        return np.load(os.path.join(out, "y.npy"))

    def test_outputs_at_several_shapes_match_numpy(self):
        path = os.path.join(WORK, "heads.kiln")
        r = kiln("compile", self.heads, "-o", path, "--report", os.path.join(WORK, "heads.json"))
        self.assertNotIn("warning", r.stdout)
        for b, s in ((1, 5), (3, 2), (2, 7)):
            x = RNG.standard_normal((b, s, 16)).astype(np.float32)
            y = self.run_kiln(path, x, f"{b}x{s}")
            ref = numpy_heads(x)
            self.assertEqual(y.shape, ref.shape)
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)

    def test_report_counts_per_shape_kernels_and_follows_the_shape_computation(self):
        path = os.path.join(WORK, "heads_report.kiln")
        report = os.path.join(WORK, "heads_report.json")
        r = kiln("compile", self.heads, "-o", path, "--report", report)
        with open(report) as f:
            j = json.load(f)
        # The view's Shape/Gather/Unsqueeze/Concat are gone: its target is a constant now.
        self.assertIn("open dims:", r.stdout)
        self.assertGreater(j["per_shape_kernels"], 0)
        self.assertEqual([x for x in j["reference_fallback_reasons"] if x["shape_related"]], [])
        kernels = " ".join(j["kernels"].keys())
        for op in ("Shape/", "Gather/", "Concat/"):
            self.assertNotIn(op, kernels)

    def test_nodes_left_on_reference_kernels_by_open_dims_are_named(self):
        path = os.path.join(WORK, "flatten.kiln")
        r = kiln("compile", self.flatten, "-o", path)
        self.assertIn("warning: 1 nodes run on reference kernels because of open dims", r.stdout)
        self.assertIn("'flatten_rows' (Reshape)", r.stdout)
        self.assertIn("--input-shape", r.stdout)
        # Fixed shapes fold the computation and the warning goes.
        r = kiln("compile", self.flatten, "-o", os.path.join(WORK, "flatten_fixed.kiln"), "--input-shape", "x:2,3,16")
        self.assertNotIn("warning", r.stdout)
        # It still computes the right thing at run time.
        x = RNG.standard_normal((2, 3, 16)).astype(np.float32)
        y = self.run_kiln(path, x, "flatten")
        np.testing.assert_allclose(y, np.maximum(x.reshape(6, 16), 0), rtol=0, atol=0)

    def test_inspect_nodes_lists_kernel_shapes_and_reason(self):
        path = os.path.join(WORK, "flatten_inspect.kiln")
        kiln("compile", self.flatten, "-o", path)
        j = json.loads(kiln("inspect", path, "--json", "--nodes").stdout)
        rows = {r["name"]: r for r in j["node_table"]}
        reshape = rows["flatten_rows"]
        self.assertEqual(reshape["op"], "Reshape")
        self.assertEqual(reshape["kernel"], "reference")
        self.assertTrue(reshape["shape_related"])
        self.assertIn("open dims", reshape["reason"])
        self.assertEqual(reshape["inputs"][0]["type"], "float32[B,S,16]")
        relu = rows["relu"]
        self.assertNotEqual(relu["kernel"], "reference")
        self.assertTrue(relu["per_shape"])
        text = kiln("inspect", path, "--nodes").stdout
        self.assertIn("flatten_rows  Reshape  [reference: open dims", text)
        self.assertIn("(per shape", text)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
