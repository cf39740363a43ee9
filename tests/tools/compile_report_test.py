#!/usr/bin/env python3
"""`kiln compile --report`: the JSON fields of issue 5 (compile_ms, nodes, passes, fusions,
kernels, reference_fallbacks, memory, variants) and the printed summary, checked for
presence and consistency with the model itself (ONNX node counts, sizes computed with NumPy)
and with `kiln inspect --json` of the compiled model.

usage: compile_report_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_test import residual_model  # noqa: E402  (the same small CNN)

KILN = None
WORK = None
RNG = np.random.default_rng(3)


def kiln(*args, check=0, env=None):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=120,
                       env=None if env is None else {**os.environ, **env})
    if check is not None and r.returncode != check:
        raise AssertionError(f"kiln {' '.join(args)} exited {r.returncode}, expected {check}:\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def mlp_model():
    """x[N,16] -> MatMul -> Add -> Relu -> MatMul -> Add -> y[N,4], batch symbolic."""
    w1 = RNG.standard_normal((16, 32)).astype(np.float32)
    b1 = RNG.standard_normal(32).astype(np.float32)
    w2 = RNG.standard_normal((32, 4)).astype(np.float32)
    b2 = RNG.standard_normal(4).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
        helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
        helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["m2", "b2"], ["y"], name="add2"),
    ]
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="report_test")
    onnx.checker.check_model(m)
    return m, sum(a.nbytes for a in (w1, b1, w2, b2))


def compile_with_report(model_path, name, *extra, env=None):
    out = os.path.join(WORK, name + ".kiln")
    rep = os.path.join(WORK, name + ".json")
    r = kiln("compile", model_path, "-o", out, "--report", rep, *extra, env=env)
    with open(rep) as f:
        report = json.load(f)
    inspect = json.loads(kiln("inspect", out, "--json").stdout)
    return r, report, inspect


class CompileReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cnn = os.path.join(WORK, "cnn.onnx")
        onnx.save(residual_model(), cls.cnn)
        cls.cnn_nodes = len(residual_model().graph.node)
        model, cls.mlp_weight_bytes = mlp_model()
        cls.mlp = os.path.join(WORK, "mlp.onnx")
        onnx.save(model, cls.mlp)

    def check_consistent(self, report, inspect, onnx_nodes):
        for key in ("compile_ms", "nodes", "passes", "fusions", "kernels", "reference_fallbacks", "memory",
                    "variants"):
            self.assertIn(key, report)
        self.assertGreater(report["compile_ms"], 0)
        self.assertEqual(report["nodes"]["before"], onnx_nodes)
        self.assertEqual(report["nodes"]["after"], inspect["nodes"])
        for p in report["passes"]:
            self.assertEqual(set(p) & {"name", "changed", "ms"}, {"name", "changed", "ms"})
        # Fusions: the sum over the passes' records, one per fused (kiln-domain) node here
        # (kiln.TransData and kiln.Pooling are layout_assignment's: a layout conversion and
        # a pool in the blocked layout, not fusions).
        fused_nodes = sum(c for op, c in inspect["op_histogram"].items()
                          if op.startswith("kiln.") and op not in ("kiln.TransData", "kiln.Pooling"))
        self.assertEqual(sum(report["fusions"].values()), fused_nodes)
        per_pass = {}
        for p in report["passes"]:
            for pattern, c in p.get("fusions", {}).items():
                per_pass[pattern] = per_pass.get(pattern, 0) + c
        self.assertEqual(per_pass, report["fusions"])
        # Kernels: every node counted once under its domain-qualified op type and the
        # implementation it will run on; the fallbacks are the nodes on reference kernels.
        per_op = {}
        for key, c in report["kernels"].items():
            op, impl = key.rsplit("/", 1)
            self.assertTrue(impl)
            per_op[op] = per_op.get(op, 0) + c
        self.assertEqual(per_op, inspect["op_histogram"])
        on_reference = sum(c for key, c in report["kernels"].items() if key.endswith("/reference"))
        self.assertEqual(len(report["reference_fallbacks"]), on_reference)
        self.assertEqual(len(set(report["reference_fallbacks"])), on_reference)
        m = report["memory"]
        self.assertLessEqual(m["lower_bound_bytes"], m["arena_bytes"])
        self.assertLessEqual(m["arena_bytes"], m["naive_bytes"])
        self.assertEqual(m["arena_bytes"] % 64, 0)
        self.assertEqual(m["weights_bytes"], inspect["weight_bytes"])

    def test_cnn_report(self):
        r, report, inspect = compile_with_report(self.cnn, "cnn")
        self.check_consistent(report, inspect, self.cnn_nodes)
        # One variant: the model's input shapes and the arena of the graph.
        self.assertEqual(report["variants"], [{"shapes": {"x": [1, 3, 8, 8]},
                                               "arena_bytes": report["memory"]["arena_bytes"]}])
        # The largest intermediate ([1,8,8,8] float32 = 2048 bytes) must fit in the arena, and
        # the naive sum holds every intermediate of the compiled graph at least once.
        self.assertGreaterEqual(report["memory"]["arena_bytes"], 1 * 8 * 8 * 8 * 4)
        self.assertIn(f"nodes: {self.cnn_nodes} -> {inspect['nodes']}", r.stdout)
        self.assertIn("arena", r.stdout)
        self.assertIn("naive", r.stdout)
        self.assertIn("lower bound", r.stdout)
        if report["fusions"]:
            top = max(report["fusions"], key=report["fusions"].get)
            self.assertIn(top, r.stdout)

    def test_mlp_report_and_weights(self):
        r, report, inspect = compile_with_report(self.mlp, "mlp", "--input-shape", "x:3,16")
        self.check_consistent(report, inspect, 5)
        self.assertEqual(report["memory"]["weights_bytes"], self.mlp_weight_bytes)
        self.assertEqual(report["variants"][0]["shapes"], {"x": [3, 16]})

    def test_symbolic_shapes_named(self):
        _, report, inspect = compile_with_report(self.mlp, "mlp_open")
        self.assertEqual(report["variants"][0]["shapes"], {"x": ["N", 16]})
        self.assertEqual(report["nodes"]["after"], inspect["nodes"])

    def test_O0_has_no_fusions(self):
        _, report, inspect = compile_with_report(self.cnn, "cnn_O0", "-O0")
        self.check_consistent(report, inspect, self.cnn_nodes)
        self.assertEqual(report["fusions"], {})
        self.assertFalse(any(op.startswith("kiln.") for op in report["kernels"]))

    def test_reference_kernels_env(self):
        # KILN_KERNELS=reference: every node on its reference kernel, every node a fallback,
        # and no kernels line in the summary.
        r, report, inspect = compile_with_report(self.cnn, "cnn_ref", env={"KILN_KERNELS": "reference"})
        self.check_consistent(report, inspect, self.cnn_nodes)
        self.assertEqual(report["kernels"], {op + "/reference": c for op, c in inspect["op_histogram"].items()})
        self.assertEqual(len(report["reference_fallbacks"]), inspect["nodes"])
        self.assertNotIn("on fast kernels", r.stdout)

    def test_fast_kernels_line(self):
        # The summary names the fast kernels exactly when the report has any.
        r, report, inspect = compile_with_report(self.cnn, "cnn_fast")
        fast = {k: c for k, c in report["kernels"].items() if not k.endswith("/reference")}
        if not fast:
            self.assertNotIn("on fast kernels", r.stdout)
            return
        self.assertIn(f"kernels: {sum(fast.values())} of {inspect['nodes']} nodes on fast kernels", r.stdout)
        for key in fast:
            self.assertIn(key, r.stdout)

    def test_quiet_prints_nothing(self):
        r = kiln("compile", self.cnn, "-o", os.path.join(WORK, "q.kiln"), "-q", "--report",
                 os.path.join(WORK, "q.json"))
        self.assertEqual(r.stdout, "")
        self.assertTrue(os.path.exists(os.path.join(WORK, "q.json")))

    def test_bucket_variants(self):
        if "--dynamic-batch-size" not in kiln("compile", "--help").stdout:
            self.skipTest("kiln compile has no --dynamic-batch-size")
        _, report, _ = compile_with_report(self.mlp, "mlp_buckets", "--dynamic-batch-size", "1,4,8")
        variants = report["variants"]
        self.assertEqual([v["shapes"]["x"] for v in variants], [[1, 16], [4, 16], [8, 16]])
        arenas = [v["arena_bytes"] for v in variants]
        self.assertEqual(arenas, sorted(arenas))
        self.assertLess(arenas[0], arenas[-1])
        # The memory section describes the first (smallest) variant's graph.
        self.assertEqual(report["memory"]["arena_bytes"], arenas[0])

    def test_unwritable_report(self):
        r = kiln("compile", self.cnn, "-o", os.path.join(WORK, "x.kiln"), "--report",
                 os.path.join(WORK, "no_such_dir", "r.json"), check=1)
        self.assertIn("cannot write report", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    del sys.argv[1:]
    unittest.main(verbosity=2)
