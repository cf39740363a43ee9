#!/usr/bin/env python3
"""`kiln profile` and `kiln profile diff` as a user runs them, and KILN_PROFILE=DIR on
`kiln run`: the files written, the printed tables, one-line errors for bad input.

usage: profile_test.py KILN_BINARY WORK_DIR
"""
import csv
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
FILES = ["timeline.json", "op_summary.csv", "op_statistic.csv", "api_statistic.csv"]


def kiln(*args, env=None, check=True):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=300, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def conv_model():
    """x[1,3,16,16] -> Conv(8, 3x3) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(8->5)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = numpy_helper.from_array(rng.standard_normal((5, 8)).astype(np.float32), "g")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", kernel_shape=[3, 3]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "g"], ["y"], name="fc", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        initializer=[w, g])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(WORK, "convnet.onnx")
    onnx.save(model, path)
    return path


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class ProfileTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.onnx = conv_model()
        cls.kiln_model = os.path.join(WORK, "convnet.kiln")
        kiln("compile", cls.onnx, "-o", cls.kiln_model)
        cls.out = os.path.join(WORK, "prof_kiln")
        shutil.rmtree(cls.out, ignore_errors=True)
        cls.result = kiln("profile", cls.kiln_model, "--loops", "4", "--warmup", "1", "--output", cls.out)

    def test_files_and_table(self):
        for f in FILES:
            self.assertTrue(os.path.isfile(os.path.join(self.out, f)), f)
        self.assertIn("top 10 op types", self.result.stdout)
        self.assertIn("all ops", self.result.stdout)
        stats = read_csv(os.path.join(self.out, "op_statistic.csv"))
        types = {r["op type"]: int(r["calls"]) for r in stats}
        # Every op type runs once per loop (after fusion, whatever the types are).
        self.assertTrue(types)
        for t, calls in types.items():
            self.assertEqual(calls, 4, t)
            self.assertIn(t, self.result.stdout)
        with open(os.path.join(self.out, "timeline.json")) as f:
            trace = json.load(f)
        ops = [e for e in trace["traceEvents"] if e.get("cat") == "op"]
        self.assertEqual(len(ops), sum(types.values()))

    def test_onnx_input_records_compile_phases(self):
        out = os.path.join(WORK, "prof_onnx")
        shutil.rmtree(out, ignore_errors=True)
        kiln("profile", self.onnx, "--loops", "1", "--output", out)
        with open(os.path.join(out, "timeline.json")) as f:
            trace = json.load(f)
        phases = [e for e in trace["traceEvents"] if e.get("cat") == "compile"]
        names = {e["name"] for e in phases}
        self.assertIn("compile", names)
        self.assertGreater(len(names), 3)  # the whole compile and its passes

    def test_kiln_profile_env_on_kiln_compile(self):
        out = os.path.join(WORK, "prof_compile")
        shutil.rmtree(out, ignore_errors=True)
        env = dict(os.environ, KILN_PROFILE=out)
        kiln("compile", self.onnx, "-o", os.path.join(WORK, "env_compiled.kiln"), "-q", env=env)
        with open(os.path.join(out, "timeline.json")) as f:
            trace = json.load(f)
        phases = [e for e in trace["traceEvents"] if e.get("cat") == "compile"]
        names = [e["name"] for e in phases]
        self.assertEqual(names[0], "compile")
        self.assertIn("shape_inference", names)  # a required pass: runs at every level
        whole = phases[0]
        for p in phases[1:]:  # every pass lies inside the whole compile
            self.assertGreaterEqual(p["ts"], whole["ts"])
            self.assertLessEqual(p["ts"] + p["dur"], whole["ts"] + whole["dur"] + 1e-3)

    def test_diff_with_itself_reports_no_change(self):
        r = kiln("profile", "diff", self.out, self.out)
        self.assertIn("no change", r.stdout)
        self.assertIn("+0.000 us", r.stdout)

    def test_diff_of_two_runs_lists_types_and_nodes(self):
        other = os.path.join(WORK, "prof_kiln2")
        shutil.rmtree(other, ignore_errors=True)
        kiln("profile", self.kiln_model, "--loops", "2", "--output", other)
        r = kiln("profile", "diff", self.out, other)
        self.assertIn("end to end", r.stdout)
        self.assertIn("per op type", r.stdout)
        self.assertIn("largest node regressions", r.stdout)
        self.assertIn("largest node gains", r.stdout)

    def one_line_error(self, r, prefix):
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith(prefix), lines[0])

    def test_diff_bad_directories(self):
        missing = os.path.join(WORK, "no_such_profile")
        self.one_line_error(kiln("profile", "diff", self.out, missing, check=False), "kiln profile diff: error:")
        garbled = os.path.join(WORK, "garbled_profile")
        os.makedirs(garbled, exist_ok=True)
        with open(os.path.join(garbled, "timeline.json"), "w") as f:
            f.write("{")
        with open(os.path.join(garbled, "op_summary.csv"), "wb") as f:
            f.write(b"\x00\xff,\"unterminated\n1,2\n")
        r = kiln("profile", "diff", garbled, self.out, check=False)
        self.one_line_error(r, "kiln profile diff: error:")
        self.assertIn("op_summary.csv", r.stderr)
        not_dir = os.path.join(WORK, "convnet.onnx")
        self.one_line_error(kiln("profile", "diff", not_dir, self.out, check=False), "kiln profile diff: error:")

    def test_bad_model_and_options(self):
        self.one_line_error(kiln("profile", os.path.join(WORK, "missing.kiln"), "--output",
                                 os.path.join(WORK, "prof_missing"), check=False), "kiln profile: error:")
        r = kiln("profile", self.kiln_model, "--loops", "0", check=False)
        self.assertEqual(r.returncode, 2)
        r = kiln("profile", check=False)
        self.assertEqual(r.returncode, 2)

    def test_kiln_profile_env_on_kiln_run(self):
        out = os.path.join(WORK, "prof_env")
        shutil.rmtree(out, ignore_errors=True)
        env = dict(os.environ, KILN_PROFILE=out)
        kiln("run", self.kiln_model, "--loops", "3", env=env)
        for f in FILES:
            self.assertTrue(os.path.isfile(os.path.join(out, f)), f)
        rows = read_csv(os.path.join(out, "op_summary.csv"))
        self.assertTrue(rows)
        apis = {r["api"] for r in read_csv(os.path.join(out, "api_statistic.csv"))}
        self.assertIn("kilnmdlLoadFromFile", apis)


if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
