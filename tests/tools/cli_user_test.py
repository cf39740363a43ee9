#!/usr/bin/env python3
"""The kiln command as a new user meets it (issue 24, parts 3 and 4): shapes for models with
open dims, ATC's spellings, limits (threads, memory), one exit-code table, KILN_* variables,
directories where files belong, failed profiles, cold and warm runs, node counts. Small
generated models; expectations from NumPy, the ONNX graphs built here and the OS, never from
Kiln's own output.

usage: cli_user_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None
RNG = np.random.default_rng(24)
W = RNG.standard_normal((4, 6)).astype(np.float32)

# The environment of every run: no KILN_* variable of the caller's (their warnings would be
# on stderr), unless a test sets one.
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_DIFFER = 0, 1, 2, 3


def kiln(*args, code=EXIT_OK, env=None, timeout=120):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=timeout,
                       env={**BASE_ENV, **(env or {})})
    if code is not None and r.returncode != code:
        raise AssertionError(f"kiln {' '.join(args)} exited {r.returncode}, expected {code}:\n{r.stdout}\n{r.stderr}")
    return r


def path(name):
    return os.path.join(WORK, name)


def save(graph, name, opset=13):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="cli_user_test")
    onnx.checker.check_model(m)
    onnx.save(m, path(name))
    return path(name)


def linear_onnx():
    """x[N,4] -> MatMul W -> y[N,6]: N open."""
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="matmul")], "linear",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])],
                          [numpy_helper.from_array(W, "W")])
    return save(g, "linear.onnx")


def fixed_linear(name):
    """linear.onnx compiled at x:3,4 into NAME: (onnx path, kiln path)."""
    onnx_path, kiln_path = linear_onnx(), path(name)
    kiln("compile", onnx_path, "-o", kiln_path, "--input-shape", "x:3,4", "-q")
    return onnx_path, kiln_path


def width_onnx():
    """x[1,3,8,W] -> Relu -> y: the width open, as PP-OCR's recognition input."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "width",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, "W"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, "W"])])
    return save(g, "width.onnx")


def reshape_onnx():
    """x[N] -> Reshape to [2,3] -> y: runs only when N is 6."""
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], "reshape",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [shape])
    return save(g, "reshape.onnx")


def if_onnx():
    """x[2] -> Relu -> If(cond) {then: Neg, Abs; else: Identity} -> y: 2 nodes of its own, 3
    in the bodies."""
    then_g = helper.make_graph([helper.make_node("Neg", ["r"], ["t1"], name="neg"),
                                helper.make_node("Abs", ["t1"], ["t2"], name="abs")], "then", [],
                               [helper.make_tensor_value_info("t2", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Identity", ["r"], ["e1"], name="id")], "else", [],
                               [helper.make_tensor_value_info("e1", TensorProto.FLOAT, [2])])
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
        "branch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return save(g, "if.onnx")


def physical_memory_bytes():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def one_error_line(test, r, command):
    lines = r.stderr.strip().splitlines()
    test.assertEqual(len(lines), 1, r.stderr)
    test.assertTrue(lines[0].startswith(f"kiln {command}: error: "), lines[0])
    return lines[0]


class InputShapeTest(unittest.TestCase):
    """--input-shape on run, bench, profile, compare; open dims are never filled with 1."""

    @classmethod
    def setUpClass(cls):
        cls.onnx = linear_onnx()
        cls.dynamic = path("linear_dynamic.kiln")
        kiln("compile", cls.onnx, "-o", cls.dynamic, "-q")

    def test_random_inputs_for_open_dims_need_a_shape(self):
        for cmd in (["run", self.onnx], ["run", self.dynamic], ["bench", self.dynamic, "--loops", "1"],
                    ["profile", self.dynamic, "--output", path("never_profile")], ["compare", self.onnx]):
            with self.subTest(cmd=cmd):
                r = kiln(*cmd, code=EXIT_ERROR)
                line = one_error_line(self, r, cmd[0])
                self.assertIn("'x'", line)
                self.assertIn("--input-shape", line)
        self.assertFalse(os.path.exists(path("never_profile")))

    def test_onnx_is_compiled_at_the_given_shape(self):
        x = RNG.standard_normal((5, 4)).astype(np.float32)
        np.save(path("x5.npy"), x)
        for cmd in ("run", "bench"):
            with self.subTest(cmd=cmd):
                if cmd == "run":
                    out = path("out_onnx_shape")
                    kiln("run", self.onnx, "--input-shape", "x:5,4", "--input", "x=" + path("x5.npy"),
                         "--output-dir", out)
                    np.testing.assert_allclose(np.load(os.path.join(out, "y.npy")), x @ W, rtol=1e-5, atol=1e-5)
                else:
                    j = json.loads(kiln("bench", self.onnx, "--input-shape", "x:5,4", "--loops", "3", "--json").stdout)
                    self.assertEqual(j["inferences"], 3)
        # compare compiles both sides at the shape and its random inputs take it.
        r = kiln("compare", self.onnx, "--input-shape", "x:5,4")
        self.assertIn("[5,6]", r.stdout)

    def test_dynamic_kiln_takes_the_given_shape(self):
        j = json.loads(kiln("run", self.dynamic, "--input-shape", "x:7,4", "--json").stdout)
        self.assertEqual(j["outputs"][0]["shape"], [7, 6])
        j = json.loads(kiln("bench", self.dynamic, "--input-shape", "x:3,4", "--loops", "2", "--json").stdout)
        self.assertEqual(j["inferences"], 2)
        out = path("profile_dynamic")
        kiln("profile", self.dynamic, "--input-shape", "x:3,4", "--loops", "2", "--output", out)
        self.assertTrue(os.path.isfile(os.path.join(out, "op_summary.csv")))

    def test_given_inputs_are_checked_against_the_shape(self):
        np.save(path("x2.npy"), np.zeros((2, 4), np.float32))
        r = kiln("run", self.dynamic, "--input-shape", "x:3,4", "--input", "x=" + path("x2.npy"), code=EXIT_ERROR)
        line = one_error_line(self, r, "run")
        self.assertIn("[2,4]", line)
        self.assertIn("[3,4]", line)

    def test_shapes_the_model_contradicts_are_model_errors(self):
        for spec, text in (("y:3,4", "'y'"), ("x:3,5", "[3,5]"), ("x:3,4,1", "[3,4,1]")):
            with self.subTest(spec=spec):
                r = kiln("run", self.dynamic, "--input-shape", spec, code=EXIT_ERROR)
                self.assertIn(text, one_error_line(self, r, "run"))

    def test_malformed_shapes_are_usage_errors(self):
        for cmd in ("run", "bench", "profile", "compare"):
            with self.subTest(cmd=cmd):
                r = kiln(cmd, self.onnx, "--input-shape", "x:3,four", code=EXIT_USAGE)
                self.assertIn("'four'", one_error_line(self, r, cmd))
        # A run needs every size: -1 is for compile.
        r = kiln("run", self.onnx, "--input-shape", "x:-1,4", code=EXIT_USAGE)
        self.assertIn("-1", one_error_line(self, r, "run"))


class AtcFormsTest(unittest.TestCase):
    """ATC's spellings: -1 dims, --dynamic_dims gears, --dynamic_batch_size, underscores."""

    @classmethod
    def setUpClass(cls):
        cls.width = width_onnx()
        cls.linear = linear_onnx()

    def buckets(self, kiln_path):
        j = json.loads(kiln("inspect", kiln_path, "--json").stdout)
        return j["buckets"]["kind"], [v["shapes"] for v in j["buckets"]["variants"]]

    def test_dynamic_dims_gears_fill_the_minus_one_dims(self):
        atc = path("width_atc.kiln")
        kiln("compile", self.width, "-o", atc, "--input_shape", "x:1,3,8,-1", "--dynamic_dims", "16;32", "-q")
        want = ("dims", [{"x": [1, 3, 8, 16]}, {"x": [1, 3, 8, 32]}])
        self.assertEqual(self.buckets(atc), want)
        # Kiln's own form gives the same buckets.
        own = path("width_own.kiln")
        kiln("compile", self.width, "-o", own, "--dynamic-dims", "x:1,3,8,16;x:1,3,8,32", "-q")
        self.assertEqual(self.buckets(own), want)
        # And the model runs at a gear's shape (Relu: NumPy's maximum).
        x = RNG.standard_normal((1, 3, 8, 32)).astype(np.float32)
        np.save(path("x_w32.npy"), x)
        kiln("run", atc, "--input", "x=" + path("x_w32.npy"), "--output_dir", path("out_atc"))
        np.testing.assert_array_equal(np.load(os.path.join(path("out_atc"), "y.npy")), np.maximum(x, 0))

    def test_dynamic_batch_size_with_minus_one(self):
        out = path("linear_batch.kiln")
        kiln("compile", self.linear, "-o", out, "--input_shape", "x:-1,4", "--dynamic_batch_size", "1,4,8", "-q")
        self.assertEqual(self.buckets(out), ("batch", [{"x": [1, 4]}, {"x": [4, 4]}, {"x": [8, 4]}]))

    def test_minus_one_leaves_a_dim_open(self):
        out = path("width_open.kiln")
        kiln("compile", self.width, "-o", out, "--input-shape", "x:1,3,8,-1", "-q")
        shape = json.loads(kiln("inspect", out, "--json").stdout)["inputs"][0]["shape"]
        self.assertEqual(shape[:3], [1, 3, 8])
        self.assertNotIsInstance(shape[3], int)

    def test_bad_atc_forms_are_usage_errors(self):
        out = path("never.kiln")
        cases = [
            (["--input-shape", "x:1,3,8,-1", "--dynamic-dims", "16,5"], "gives 2 values"),
            (["--dynamic-dims", "16;32"], "-1 dims of --input-shape"),
            (["--input-shape", "x:1,3,-2,8"], "-1 for a dim left open"),
            (["--input-shape", "x:1,3,8,-1", "--dynamic-dims", "0"], ">= 1"),
        ]
        for args, text in cases:
            with self.subTest(args=args):
                r = kiln("compile", self.width, "-o", out, *args, code=EXIT_USAGE)
                self.assertIn(text, one_error_line(self, r, "compile"))
        self.assertFalse(os.path.exists(out))

    def test_every_option_takes_underscores(self):
        j = json.loads(kiln("run", self.linear, "--input_shape", "x:2,4", "--json", "--reference_kernels").stdout)
        self.assertEqual(j["kernels"], "reference")
        self.assertEqual(j["outputs"][0]["shape"], [2, 6])
        r = kiln("run", self.linear, "--no_such_option", code=EXIT_USAGE)
        self.assertIn("no-such-option", r.stderr)


class LimitsTest(unittest.TestCase):
    """--threads above the cores, shapes above the memory."""

    @classmethod
    def setUpClass(cls):
        cls.linear, cls.fixed = fixed_linear("linear_fixed.kiln")
        cls.cores = len(os.sched_getaffinity(0))

    def test_threads_above_the_cores_are_capped_with_a_warning(self):
        for cmd, key in (("run", "threads"), ("bench", "threads_per_device")):
            with self.subTest(cmd=cmd):
                extra = ["--loops", "2"] if cmd == "bench" else []
                r = kiln(cmd, self.fixed, "--threads", "1000", "--json", *extra)
                self.assertEqual(json.loads(r.stdout)[key], self.cores)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn("warning", lines[0])
                self.assertIn("--threads 1000", lines[0])
                self.assertIn(str(self.cores), lines[0])
        # KILN_NUM_THREADS above the cores: capped the same way, with a warning naming it.
        r = kiln("run", self.fixed, "--json", env={"KILN_NUM_THREADS": "1000"})
        self.assertEqual(json.loads(r.stdout)["threads"], self.cores)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("KILN_NUM_THREADS=1000", lines[0])
        # Within the cores: no warning.
        r = kiln("run", self.fixed, "--threads", "1", "--json")
        self.assertEqual(json.loads(r.stdout)["threads"], 1)
        self.assertEqual(r.stderr, "")

    def test_a_shape_beyond_the_memory_is_refused_at_compile(self):
        out = path("huge.kiln")
        n = physical_memory_bytes() // 16 + 1  # x alone is 16 bytes a row; y is 24
        start = time.monotonic()
        r = kiln("compile", self.linear, "-o", out, "--input-shape", f"x:{n},4", code=EXIT_ERROR)
        line = one_error_line(self, r, "compile")
        self.assertIn("'y'", line)  # the largest value, named
        self.assertIn(f"{n * 24} bytes", line)
        self.assertFalse(os.path.exists(out))
        self.assertLess(time.monotonic() - start, 60)

    def test_a_shape_beyond_the_device_memory_is_refused_at_run(self):
        # Compiled for a value of 1/64 of this machine's memory, then loaded on one of 1024
        # logical devices, which gets 1/1024 of it: refused at load, fast, naming the value.
        n = physical_memory_bytes() // 64 // 24
        big = path("big.kiln")
        kiln("compile", self.linear, "-o", big, "--input-shape", f"x:{n},4", "-q")
        start = time.monotonic()
        r = kiln("run", big, env={"KILN_DEVICES": "cpu:1024"}, code=EXIT_ERROR, timeout=60)
        line = one_error_line(self, r, "run")
        self.assertIn("'y'", line)
        self.assertIn(f"{n * 24} bytes", line)
        self.assertIn("memory", line)
        self.assertLess(time.monotonic() - start, 30)
        # An open dim given a size beyond the memory: refused before the input is allocated.
        dynamic = path("linear_dyn_limits.kiln")
        kiln("compile", self.linear, "-o", dynamic, "-q")
        rows = physical_memory_bytes() // 16 * 2
        r = kiln("run", dynamic, "--input-shape", f"x:{rows},4", code=EXIT_ERROR, timeout=60)
        line = one_error_line(self, r, "run")
        self.assertIn("'x'", line)
        self.assertIn(f"{rows * 16} bytes", line)


class ExitCodeTest(unittest.TestCase):
    """One table for every subcommand: 0 ok, 1 model/run error, 2 usage, 3 results differ."""

    @classmethod
    def setUpClass(cls):
        cls.linear, cls.fixed = fixed_linear("linear_exit.kiln")

    def test_the_same_mistake_gives_the_same_code(self):
        for cmd in ("run", "bench", "profile", "compare"):
            model = self.linear if cmd == "compare" else self.fixed
            for args in (["--threads", "0"], ["--threads", "-1"], ["--loops", "0"], ["--loops", "-1"],
                         ["--warmup", "-1"], ["--threads", "two"], ["--no-such-option"]):
                if cmd == "compare" and args[0] in ("--loops", "--warmup"):
                    continue
                if cmd == "profile" and args[0] == "--threads":
                    continue
                with self.subTest(cmd=cmd, args=args):
                    r = kiln(cmd, model, *args, code=EXIT_USAGE)
                    self.assertEqual(r.stdout, "")
                    self.assertIn(args[0], r.stderr)

    def test_usage_and_model_errors(self):
        kiln("frobnicate", code=EXIT_USAGE)
        kiln("run", code=EXIT_USAGE)  # the model is required
        kiln("run", self.fixed, "--input", "x", code=EXIT_USAGE)
        kiln("run", path("missing.kiln"), code=EXIT_ERROR)
        kiln("compile", self.linear, code=EXIT_USAGE)  # no -o
        kiln("compile", self.linear, "-o", path("p.kiln"), "--precision", "fp8", code=EXIT_USAGE)
        kiln("compile", self.linear, "-o", path("p.kiln"), "-O", "7", code=EXIT_USAGE)
        kiln("inspect", path("missing.onnx"), code=EXIT_ERROR)

    def test_compare_tells_differ_from_error(self):
        kiln("compare", self.linear, "--input-shape", "x:3,4", code=EXIT_OK)
        r = kiln("compare", self.linear, "--input-shape", "x:3,4", env={"KILN_DEBUG_PERTURB_NODE": "matmul"},
                 code=EXIT_DIFFER)
        self.assertIn("verdict: DIFFER", r.stdout)
        kiln("compare", path("missing.onnx"), code=EXIT_ERROR)
        kiln("compare", self.linear, "--rtol", "-1", code=EXIT_USAGE)


class EnvironmentTest(unittest.TestCase):
    """Unknown or malformed KILN_* values: one warning line each, naming what is taken."""

    @classmethod
    def setUpClass(cls):
        cls.fixed = fixed_linear("linear_env.kiln")[1]

    def test_malformed_values_are_named_with_the_values_taken(self):
        env = {"KILN_LOG_LEVEL": "verbose", "KILN_KERNELS": "foo", "KILN_NUM_THREADS": "abc"}
        r = kiln("run", self.fixed, "--json", env=env)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 3, r.stderr)
        expected = {"KILN_LOG_LEVEL='verbose'": "debug", "KILN_KERNELS='foo'": "reference",
                    "KILN_NUM_THREADS='abc'": "integer"}
        for name, value_taken in expected.items():
            line = [l for l in lines if name in l]
            self.assertEqual(len(line), 1, (name, r.stderr))
            self.assertIn("warning", line[0])
            self.assertIn(value_taken, line[0])
        # The run itself goes on with the defaults.
        self.assertEqual(json.loads(r.stdout)["kernels"], "fast")

    def test_a_misspelt_variable_is_named_with_the_likely_one(self):
        r = kiln("run", self.fixed, env={"KILN_NUM_THREAD": "1"})
        lines = r.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("KILN_NUM_THREAD ", lines[0])
        self.assertIn("KILN_NUM_THREADS?", lines[0])

    def test_good_values_are_silent(self):
        env = {"KILN_LOG_LEVEL": "error", "KILN_KERNELS": "reference", "KILN_NUM_THREADS": "1"}
        r = kiln("run", self.fixed, "--json", env=env)
        self.assertEqual(r.stderr, "")
        j = json.loads(r.stdout)
        self.assertEqual((j["kernels"], j["threads"]), ("reference", 1))

    def test_every_variable_is_documented(self):
        # docs/cli.md lists each KILN_* variable that `kiln env --json` declares, and no other.
        declared = {k["name"] for k in json.loads(kiln("env", "--json").stdout)["variables"]}
        docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "cli.md")
        with open(docs) as f:
            text = f.read()
        section = text.split("## Environment variables")[1].split("\n## ")[0]
        documented = set(re.findall(r"^\| `(KILN_[A-Z0-9_]+)`", section, re.M))
        self.assertEqual(documented, declared)

    def test_every_variable_read_is_declared(self):
        # Each getenv("KILN_...") in Kiln's sources names a variable of src/core/env_knobs.cc,
        # so none is read without being documented and checked.
        declared = {k["name"] for k in json.loads(kiln("env", "--json").stdout)["variables"]}
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        read = {}
        for top in ("src", "tools", "bench", "tests"):
            for folder, _, files in os.walk(os.path.join(root, top)):
                for name in files:
                    if name.endswith((".cc", ".h", ".c")):
                        with open(os.path.join(folder, name), errors="replace") as f:
                            for var in re.findall(r'getenv\("(KILN_[A-Z0-9_]+)"\)', f.read()):
                                read.setdefault(var, os.path.relpath(os.path.join(folder, name), root))
        self.assertIn("KILN_NUM_THREADS", read)
        self.assertEqual({v: f for v, f in read.items() if v not in declared}, {})


class ReferenceTest(unittest.TestCase):
    """docs/cli.md names every subcommand and every option that --help lists."""

    def test_every_subcommand_and_option_is_documented(self):
        docs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "cli.md")
        with open(docs) as f:
            text = f.read()
        top = kiln("--help").stdout
        subcommands = re.findall(r"^  ([a-z][a-z-]+) {2,}", top.split("Subcommands:")[1], re.M)
        self.assertIn("run", subcommands)
        for sub in subcommands + ["profile diff"]:
            with self.subTest(subcommand=sub):
                self.assertTrue(f"`kiln {sub}" in text, f"kiln {sub}")
                help_text = kiln(*sub.split(), "--help").stdout.split("Subcommands:")[0]
                for option in set(re.findall(r"(--[a-z][a-z-]+)", help_text)) - {"--help"}:
                    self.assertTrue(re.search(re.escape(option) + r"(?![a-z-])", text), f"kiln {sub} {option}")


class FilesTest(unittest.TestCase):
    """Directories where files belong (and the reverse) are named as such."""

    @classmethod
    def setUpClass(cls):
        cls.linear, cls.fixed = fixed_linear("linear_files.kiln")
        cls.dir = path("a_directory.onnx")  # named like a model, as in the issue
        os.makedirs(cls.dir, exist_ok=True)

    def test_directories_are_named(self):
        cases = [
            (["run", self.fixed, "--input", "x=" + self.dir], "run"),
            (["run", self.dir], "run"),
            (["bench", self.dir], "bench"),
            (["inspect", self.dir], "inspect"),
            (["compile", self.dir, "-o", path("d.kiln")], "compile"),
            (["compile", self.linear, "-o", self.dir], "compile"),
            (["compile", self.linear, "-o", path("r.kiln"), "--report", self.dir], "compile"),
        ]
        for args, cmd in cases:
            with self.subTest(args=args):
                r = kiln(*args, code=EXIT_ERROR)
                line = one_error_line(self, r, cmd)
                self.assertIn(self.dir, line)
                self.assertIn("is a directory", line)
                self.assertNotIn("no such file", line)
                self.assertNotIn("unexpected failure", line)

    def test_files_where_directories_belong_are_named(self):
        for args, cmd in ((["run", self.fixed, "--output-dir", self.linear], "run"),
                          (["profile", self.fixed, "--output", self.linear], "profile")):
            with self.subTest(args=args):
                r = kiln(*args, code=EXIT_ERROR)
                self.assertIn("is a file, not a directory", one_error_line(self, r, cmd))


class FailedProfileTest(unittest.TestCase):
    """A profile of a failing run is not written; profile diff refuses an empty one."""

    @classmethod
    def setUpClass(cls):
        cls.model = path("reshape.kiln")
        kiln("compile", reshape_onnx(), "-o", cls.model, "-q")

    def test_a_failing_run_writes_no_profile_and_keeps_the_old_one(self):
        out = path("prof_fail")
        shutil.rmtree(out, ignore_errors=True)
        r = kiln("profile", self.model, "--input-shape", "x:5", "--output", out, code=EXIT_ERROR)
        self.assertIn("reshape", one_error_line(self, r, "profile").lower())
        self.assertFalse(os.path.exists(out))
        # A good profile first, then a failing run into the same directory: it stays as it was.
        kiln("profile", self.model, "--input-shape", "x:6", "--loops", "2", "--output", out)
        with open(os.path.join(out, "op_summary.csv")) as f:
            before = f.read()
        self.assertIn("Reshape", before)
        kiln("profile", self.model, "--input-shape", "x:5", "--output", out, code=EXIT_ERROR)
        with open(os.path.join(out, "op_summary.csv")) as f:
            self.assertEqual(f.read(), before)
        self.assertEqual([n for n in os.listdir(WORK) if ".partial" in n], [])

    def test_diff_refuses_an_empty_profile(self):
        good = path("prof_good")
        kiln("profile", self.model, "--input-shape", "x:6", "--loops", "2", "--output", good)
        empty = path("prof_empty")  # what a failed run used to leave: the header and no rows
        os.makedirs(empty, exist_ok=True)
        with open(os.path.join(good, "op_summary.csv")) as f:
            header = f.readline()
        with open(os.path.join(empty, "op_summary.csv"), "w") as f:
            f.write(header)
        with open(os.path.join(empty, "timeline.json"), "w") as f:
            f.write("[]\n")
        for a, b in ((empty, good), (good, empty)):
            r = kiln("profile", "diff", a, b, code=EXIT_ERROR)
            line = one_error_line(self, r, "profile diff")
            self.assertIn(empty, line)
            self.assertIn("no op records", line)
            self.assertNotIn("-100", r.stdout)
        kiln("profile", "diff", good, good)


class WarmupTest(unittest.TestCase):
    def test_run_warms_up_once_and_reports_the_cold_run_apart(self):
        fixed = fixed_linear("linear_warm.kiln")[1]
        j = json.loads(kiln("run", fixed, "--json").stdout)
        self.assertEqual(j["warmup"], 1)
        self.assertEqual(j["loops"], 1)
        self.assertGreater(j["first_run_ms"], 0)
        r = kiln("run", fixed, "--loops", "3")
        self.assertRegex(r.stdout, r"first run \(cold\): [0-9.]+ ms")
        self.assertRegex(r.stdout, r"latency over 3 loops after 1 warm-up")
        j = json.loads(kiln("run", fixed, "--json", "--warmup", "0").stdout)
        self.assertEqual(j["warmup"], 0)


class NodeCountTest(unittest.TestCase):
    def test_compile_report_and_inspect_count_the_same_nodes(self):
        # At -O0 nothing is fused or removed: the graph keeps its 2 nodes (Relu, If); the If's
        # bodies hold 3 more, which inspect reports apart.
        model = if_onnx()
        out, report = path("if.kiln"), path("if_report.json")
        r = kiln("compile", model, "-o", out, "-O", "0", "--report", report)
        counts = re.findall(r"(\d+) -> (\d+) nodes", r.stdout)
        self.assertTrue(counts, r.stdout)
        self.assertTrue(all(c == ("2", "2") for c in counts), counts)
        with open(report) as f:
            self.assertEqual(json.load(f)["nodes"], {"before": 2, "after": 2})
        j = json.loads(kiln("inspect", out, "--json").stdout)
        self.assertEqual((j["nodes"], j["subgraph_nodes"]), (2, 3))
        self.assertEqual(sum(j["op_histogram"].values()), 5)
        self.assertIn("nodes: 2 (plus 3 in If/Loop/Scan bodies", kiln("inspect", out).stdout)
        j = json.loads(kiln("inspect", model, "--json").stdout)
        self.assertEqual((j["nodes"], j["subgraph_nodes"]), (2, 3))


class StartupTest(unittest.TestCase):
    def libraries_a_run_loads(self):
        """The libraries `kiln run` loads, linked or dlopen'ed (LD_DEBUG=files)."""
        fixed = fixed_linear("linear_startup.kiln")[1]
        r = subprocess.run([KILN, "run", fixed, "--loops", "2"], capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, LD_DEBUG="files"))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        loaded = re.findall(r"file=(\S+) \[0\];", r.stderr)
        self.assertTrue(loaded, "LD_DEBUG=files printed no loaded library")
        return loaded

    def test_ffmpeg_is_loaded_only_to_decode_video(self):
        # FFmpeg brings ~130 shared libraries (28 MiB of RSS, 50 ms of start-up) that only
        # video decoding needs: `kiln` loads it on first use (src/apps/video/libav.h), so a
        # process that runs a model maps none of it.
        loaded = self.libraries_a_run_loads()
        self.assertFalse([f for f in loaded if re.match(r"libav(codec|format|util)\.", f)], loaded)

    def test_running_a_model_maps_no_library_of_the_apps_module(self):
        # OpenCV, cpp-httplib with OpenSSL, and libonnx are the apps module's
        # (tools/apps_module.h), libcrypto comm's on first use: with them a `kiln run`'s peak
        # RSS was 10.6 MiB larger (issue 33). Neither linked nor dlopen'ed.
        loaded = self.libraries_a_run_loads()
        unwanted = r"(.*/)?lib(opencv_\w+|cpp-httplib|ssl|crypto|onnx|polyclipping|turbojpeg|kiln_apps)\.so"
        self.assertFalse([f for f in loaded if re.match(unwanted, f)], loaded)

    def test_the_c_api_library_needs_no_crypto_or_opencv(self):
        lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(KILN))), "lib", "libkiln.so")
        if not os.path.exists(lib):
            self.skipTest(f"no {lib}")
        r = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotRegex(r.stdout, r"lib(opencv_\w+|cpp-httplib|ssl|crypto)\.so")

    def test_a_module_command_loads_the_module(self):
        r = subprocess.run([KILN, "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        for command in ("ocr", "video-bench", "serve", "loadgen", "quantize"):
            self.assertRegex(r.stdout, rf"\n\s+{command}\s", command)
        r = subprocess.run([KILN, "ocr", "--help"], capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--det", r.stdout)
        # --version lists nothing: the module stays unloaded.
        r = subprocess.run([KILN, "--version"], capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, LD_DEBUG="files"))
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.assertNotIn("libkiln_apps.so", r.stderr)

    def test_a_missing_module_is_an_error_naming_it(self):
        # A kiln without its module (copied alone): the module's commands say what is missing,
        # the others run.
        alone = os.path.join(WORK, "kiln_alone", "bin")
        os.makedirs(alone, exist_ok=True)
        exe = os.path.join(alone, "kiln")
        shutil.copy2(KILN, exe)
        env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
        for args in (["ocr", "--help"], ["serve", "models"], ["quantize", "m.onnx"]):
            r = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertRegex(r.stderr, rf"^kiln {args[0]}: error: .*libkiln_apps\.so, which cannot be loaded")
        r = subprocess.run([exe, "run", fixed_linear("linear_startup.kiln")[1], "--loops", "1"],
                           capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    del sys.argv[1:]
    unittest.main(verbosity=2)
