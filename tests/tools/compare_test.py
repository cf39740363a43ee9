#!/usr/bin/env python3
"""`kiln compare`: -O0 vs optimised runs, the table, the verdict, the exit code and naming the
first diverging node; and `kiln conformance --check-levels`. A divergence is injected with
KILN_DEBUG_PERTURB_NODE (adds a delta to one node's output in the optimised run only).
Reference values come from NumPy.

usage: compare_test.py KILN_BINARY WORK_DIR
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
RNG = np.random.default_rng(11)
W1 = (RNG.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
B1 = (RNG.standard_normal(8) * 0.1).astype(np.float32)
W2 = (RNG.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32)
B2 = (RNG.standard_normal(8) * 0.1).astype(np.float32)
WF = (RNG.standard_normal((8, 5)) * 0.5).astype(np.float32)
BF = (RNG.standard_normal(5) * 0.1).astype(np.float32)


def kiln(*args, env=None, check=None):
    full_env = dict(os.environ)
    full_env.pop("KILN_DEBUG_PERTURB_NODE", None)
    full_env.pop("KILN_DEBUG_PERTURB_DELTA", None)
    full_env.update(env or {})
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=120, env=full_env)
    if check is not None and r.returncode != check:
        raise AssertionError(f"kiln {' '.join(args)} exited {r.returncode}, expected {check}:\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def residual_model():
    """x[1,3,8,8] -> Conv -> Relu -> Conv -> Add(residual) -> Relu -> GAP -> Flatten -> MatMul
    -> Add -> y[1,5]: patterns the fusion passes rewrite (Conv+Relu, Conv+Add+Relu, MatMul+Add)."""
    nodes = [
        helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "W2", "B2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["s"], name="residual"),
        helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "WF"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "BF"], ["y"], name="fc_bias"),
    ]
    g = helper.make_graph(
        nodes, "residual",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        [numpy_helper.from_array(a, n) for a, n in
         ((W1, "W1"), (B1, "B1"), (W2, "W2"), (B2, "B2"), (WF, "WF"), (BF, "BF"))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="compare_test")
    onnx.checker.check_model(m)
    return m


def conv2d(x, w, b):
    """NCHW convolution, stride 1, pads 1, in float64."""
    n, c, h, wd = x.shape
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(k):
        for j in range(k):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b[None, :, None, None]


def numpy_model(x):
    x = x.astype(np.float64)
    r1 = np.maximum(conv2d(x, W1, B1), 0)
    r2 = np.maximum(conv2d(r1, W2, B2) + r1, 0)
    return r2.mean(axis=(2, 3)) @ WF + BF


class CompareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = os.path.join(WORK, "residual.onnx")
        onnx.save(residual_model(), cls.model)
        cls.x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
        cls.x_path = os.path.join(WORK, "x.npy")
        np.save(cls.x_path, cls.x)
        # The optimised graph's values in execution order, from a clean run.
        cls.clean_json = os.path.join(WORK, "clean.json")
        cls.clean = kiln("compare", cls.model, "--input", f"x={cls.x_path}", "--json", cls.clean_json, check=0)
        with open(cls.clean_json) as f:
            cls.report = json.load(f)

    def test_agreeing_levels_exit_0(self):
        self.assertIn("verdict: AGREE", self.clean.stdout)
        self.assertTrue(self.report["outputs_agree"])
        self.assertIsNone(self.report["first_divergence"])
        self.assertEqual(self.report["diverged"], 0)
        self.assertEqual(self.report["opt_level"], 3)
        for v in self.report["values"]:
            self.assertTrue(v["within_tolerance"], v)
            self.assertLessEqual(v["error"], 1.0)

    def test_values_are_the_models(self):
        # The compared output holds the model's values: its max |ref| is NumPy's max |y|.
        y = numpy_model(self.x)
        out = [v for v in self.report["values"] if v["model_output"]]
        self.assertEqual([v["value"] for v in out], ["y"])
        self.assertAlmostEqual(out[0]["max_abs_reference"], float(np.max(np.abs(y))), delta=1e-4)
        self.assertEqual(out[0]["shape"], "float32[1,5]")
        self.assertEqual(out[0]["reference_shape"], "float32[1,5]")
        # Intermediate values of both graphs are compared, not just the output: r1 (relu1's
        # output, kept by any Conv+Relu fusion) is there with NumPy's max.
        r1 = [v for v in self.report["values"] if v["value"] == "r1"]
        self.assertEqual(len(r1), 1)
        r1_ref = np.maximum(conv2d(self.x.astype(np.float64), W1, B1), 0)
        self.assertAlmostEqual(r1[0]["max_abs_reference"], float(np.max(r1_ref)), delta=1e-4)

    def test_names_the_perturbed_node(self):
        values = self.report["values"]
        # Every node of the optimised graph with a compared value, perturbed in turn: compare
        # must name exactly that node as the first divergence.
        for i, v in enumerate(values):
            if not v["node"]:
                continue
            with self.subTest(node=v["node"]):
                out_json = os.path.join(WORK, f"perturbed_{i}.json")
                r = kiln("compare", self.model, "--input", f"x={self.x_path}", "--json", out_json,
                         env={"KILN_DEBUG_PERTURB_NODE": v["node"]}, check=3)
                with open(out_json) as f:
                    rep = json.load(f)
                first = rep["first_divergence"]
                self.assertEqual(first["node"], v["node"])
                self.assertEqual(first["value"], v["value"])
                self.assertEqual(first["op_type"], v["op_type"])
                self.assertAlmostEqual(first["max_abs_error"], 1e-2, delta=1e-4)
                self.assertGreater(first["error"], 1.0)
                # Everything before it in execution order still agrees.
                self.assertTrue(all(x["within_tolerance"] for x in rep["values"][:i]))
                self.assertFalse(rep["outputs_agree"])
                self.assertIn(f"produced by node '{v['node']}'", r.stdout)
                self.assertIn("verdict: DIFFER", r.stdout)

    def test_perturbation_within_tolerance_agrees(self):
        node = self.report["values"][0]["node"]
        r = kiln("compare", self.model, "--input", f"x={self.x_path}",
                 env={"KILN_DEBUG_PERTURB_NODE": node, "KILN_DEBUG_PERTURB_DELTA": "1e-9"}, check=0)
        self.assertIn("verdict: AGREE", r.stdout)

    def test_tolerance_options(self):
        # A 1e-2 perturbation passes with a tolerance of 1e-1 absolute.
        node = self.report["values"][0]["node"]
        kiln("compare", self.model, "--atol", "0.1", env={"KILN_DEBUG_PERTURB_NODE": node}, check=0)

    def test_random_inputs_and_levels(self):
        for level in ("1", "2", "3"):
            r = kiln("compare", self.model, "-O", level, "--seed", "5", check=0)
            self.assertIn(f"-O{level}", r.stdout)
        # Random inputs are deterministic for a seed.
        a = os.path.join(WORK, "seed_a.json")
        b = os.path.join(WORK, "seed_b.json")
        kiln("compare", self.model, "--seed", "3", "--json", a, check=0)
        kiln("compare", self.model, "--seed", "3", "--json", b, check=0)
        with open(a) as fa, open(b) as fb:
            self.assertEqual(json.load(fa)["values"], json.load(fb)["values"])

    def test_kernels_mode(self):
        # --kernels: the -O3 graph on fast kernels vs the same graph on reference kernels.
        out_json = os.path.join(WORK, "kernels.json")
        r = kiln("compare", self.model, "--kernels", "--input", f"x={self.x_path}", "--json", out_json, check=0)
        self.assertIn("reference kernels at -O3", r.stdout)
        self.assertIn("fast kernels at -O3", r.stdout)
        self.assertIn("verdict: AGREE", r.stdout)
        self.assertIn("(fast kernels vs reference kernels", r.stdout)
        with open(out_json) as f:
            rep = json.load(f)
        self.assertEqual(rep["compared"], "kernels")
        self.assertEqual(self.report["compared"], "levels")
        self.assertEqual(rep["nodes"]["reference"], rep["nodes"]["optimised"])
        # Every value of the -O3 graph is compared, the model output with NumPy's values.
        self.assertEqual([v["value"] for v in rep["values"]], [v["value"] for v in self.report["values"]])
        y = [v for v in rep["values"] if v["model_output"]]
        self.assertAlmostEqual(y[0]["max_abs_reference"], float(np.max(np.abs(numpy_model(self.x)))), delta=1e-4)
        # A perturbed node of the fast-kernel run is named; KILN_KERNELS=reference does not
        # turn the fast side off (compare sets both sides itself).
        node = rep["values"][0]["node"]
        r = kiln("compare", self.model, "--kernels", "--input", f"x={self.x_path}",
                 env={"KILN_DEBUG_PERTURB_NODE": node, "KILN_KERNELS": "reference"}, check=3)
        self.assertIn(f"produced by node '{node}'", r.stdout)
        self.assertIn("verdict: DIFFER", r.stdout)

    def test_kernels_mode_compares_blocked_values_as_they_are(self):
        # 32-channel convolutions store their outputs NC1HWC0 (both block sizes divide 32);
        # with --kernels both runs hold them blocked, so nothing may read as a shape mismatch.
        rng = np.random.default_rng(5)
        wa = (rng.standard_normal((32, 3, 3, 3)) * 0.3).astype(np.float32)
        wb = (rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32)
        nodes = [helper.make_node("Conv", ["x", "WA"], ["a"], name="conv_a", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["a"], ["ra"], name="relu_a"),
                 helper.make_node("Conv", ["ra", "WB"], ["b"], name="conv_b", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["b"], ["rb"], name="relu_b"),
                 helper.make_node("GlobalAveragePool", ["rb"], ["y"], name="gap")]
        g = helper.make_graph(nodes, "blocked",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])],
                              [numpy_helper.from_array(wa, "WA"), numpy_helper.from_array(wb, "WB")])
        path = os.path.join(WORK, "blocked.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
        out_json = os.path.join(WORK, "blocked.json")
        r = kiln("compare", path, "--kernels", "--json", out_json, check=0)
        self.assertIn("verdict: AGREE", r.stdout)
        with open(out_json) as f:
            rep = json.load(f)
        blocked = [v for v in rep["values"] if len(v["shape"].split(",")) == 5]
        self.assertTrue(blocked, "no value stored blocked: the test no longer covers the layout")
        for v in rep["values"]:
            self.assertEqual(v["mismatch"], "", v)
            self.assertEqual(v["shape"], v["reference_shape"], v)

    def test_precision_of_the_optimised_side(self):
        # bf16 moves every product by about bfloat16's rounding (2^-8 of the operands): at the
        # default rtol 1e-4 the first convolution already diverges, at 1e-2 the model agrees.
        r = kiln("compare", self.model, "--input", f"x={self.x_path}", "--precision", "bf16", check=3)
        self.assertIn("-O3 bf16", r.stdout)
        self.assertIn("first divergence", r.stdout)
        self.assertIn("kiln.FusedConv", r.stdout.split("first divergence")[1].splitlines()[0])
        r = kiln("compare", self.model, "--input", f"x={self.x_path}", "--precision", "bf16", "--rtol", "1e-2",
                 check=0)
        self.assertIn("verdict: AGREE", r.stdout)
        # Kept in float32 (every node by op type), bf16 changes nothing at the default rtol.
        r = kiln("compare", self.model, "--input", f"x={self.x_path}", "--precision", "bf16",
                 "--keep-dtype", "Conv,MatMul", check=0)
        self.assertIn("verdict: AGREE", r.stdout)
        r = kiln("compare", self.model, "--precision", "fp8", check=2)
        self.assertIn("expected fp32, bf16 or mixed", r.stderr)

    def test_values_stored_in_bf16_are_compared_by_value(self):
        # 32-channel convolutions in a chain: under bf16, with 16-channel blocks (AVX-512), the
        # outputs that only bf16 convolutions read are stored in bfloat16 (precision.md); the
        # comparison reads them as numbers, not as a dtype mismatch.
        w = [numpy_helper.from_array((RNG.standard_normal((32, 32, 3, 3)) * 0.05).astype(np.float32), f"W{i}")
             for i in range(4)]
        nodes = [helper.make_node("Conv", ["x" if i == 0 else f"c{i - 1}", f"W{i}"], [f"c{i}"], name=f"conv{i}",
                                  pads=[1, 1, 1, 1]) for i in range(4)]
        nodes.append(helper.make_node("GlobalAveragePool", ["c3"], ["y"], name="gap"))
        g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 1, 1])], w)
        path = os.path.join(WORK, "chain.onnx")
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
        compiled = kiln("compile", path, "-o", os.path.join(WORK, "chain.kiln"), "--precision", "bf16", check=0)
        r = kiln("compare", path, "--precision", "bf16", "--rtol", "1e-2", "--rows", "10", check=0)
        self.assertIn("verdict: AGREE", r.stdout)
        self.assertNotIn("dtype", r.stdout)
        if "1 convolution outputs stored in bf16" in compiled.stdout + compiled.stderr:  # c1
            self.assertIn("0 of 5 values diverge", r.stdout)

    def test_errors(self):
        r = kiln("compare", self.model, "--input", f"nope={self.x_path}", check=1)
        self.assertIn("no input named 'nope'", r.stderr)
        r = kiln("compare", self.model, env={"KILN_DEBUG_PERTURB_NODE": "no_such_node"}, check=1)
        self.assertIn("no_such_node", r.stderr)
        kiln_path = os.path.join(WORK, "residual.kiln")
        kiln("compile", self.model, "-o", kiln_path, "-q", check=0)
        r = kiln("compare", kiln_path, check=1)
        self.assertIn("needs the ONNX model", r.stderr)
        r = kiln("compare", os.path.join(WORK, "missing.onnx"), check=1)
        self.assertIn("missing.onnx", r.stderr)
        kiln("compare", self.model, "-O", "4", check=2)


class ConformanceLevelsTest(unittest.TestCase):
    """`kiln conformance --check-levels`: a test folder of the ONNX backend layout whose
    expected output comes from NumPy; the -O3 vs -O0 check agrees, and reports a mismatch
    when the -O3 graph is perturbed."""

    @classmethod
    def setUpClass(cls):
        cls.suite = os.path.join(WORK, "levels_suite")
        test = os.path.join(cls.suite, "test_residual")
        data = os.path.join(test, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        onnx.save(residual_model(), os.path.join(test, "model.onnx"))
        x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
        y = numpy_model(x).astype(np.float32)
        for name, array in (("input_0.pb", x), ("output_0.pb", y)):
            with open(os.path.join(data, name), "wb") as f:
                f.write(numpy_helper.from_array(array).SerializeToString())
        # A node of the -O3 graph, named by compare (fused or not).
        report = os.path.join(WORK, "levels_nodes.json")
        kiln("compare", os.path.join(test, "model.onnx"), "--json", report, check=0)
        with open(report) as f:
            cls.node = json.load(f)["values"][0]["node"]

    def conformance(self, name, env=None, check=None):
        out = os.path.join(WORK, name + ".json")
        r = kiln("conformance", self.suite, "--check-levels", "--jobs", "1", "--json", out, env=env, check=check)
        with open(out) as f:
            return r, json.load(f)

    def test_levels_agree(self):
        r, results = self.conformance("levels_agree", check=0)
        self.assertIn("levels: 1 tests checked, 1 agree, 0 mismatches", r.stdout)
        self.assertEqual([(t["status"], t["levels"]) for t in results], [("pass", "agree")])

    def test_levels_mismatch_fails_the_run(self):
        # Results that differ: exit code 3 (docs/cli.md), apart from errors (1) and usage (2).
        r, results = self.conformance("levels_mismatch", env={"KILN_DEBUG_PERTURB_NODE": self.node}, check=3)
        self.assertIn("levels: 1 tests checked, 0 agree, 1 mismatches", r.stdout)
        self.assertIn("LEVELS levels_suite/test_residual: -O3 and -O0 disagree: output 'y'", r.stdout)
        self.assertEqual(results[0]["levels"], "mismatch")
        self.assertIn("output 'y'", results[0]["levels_message"])

    def test_no_level_check_without_the_option(self):
        r = kiln("conformance", self.suite, "--jobs", "1", check=0)
        self.assertNotIn("levels:", r.stdout)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    del sys.argv[1:]
    unittest.main(verbosity=2)
