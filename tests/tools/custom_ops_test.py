#!/usr/bin/env python3
"""`kiln compile --custom-ops PLUGIN.so` (docs/dsl.md): ops a plugin defines by DSL expressions
compile into a model, fuse into convolution epilogues and element-wise programs (the compile
report shows it), run as DSL kernels, and give NumPy's values; the compiled .kiln runs with no
plugin. Must-fail: a plugin that throws, refuses, returns a wrong shape, defines a bad compute,
is not a library or has no entry point is reported with a message and exit code 1, not a crash.

usage: custom_ops_test.py KILN_BINARY WORK_DIR
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KILN = None
WORK = None
RNG = np.random.default_rng(31)


def kiln(*args, check=0, env=None):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    if check is not None and r.returncode != check:
        raise AssertionError(f"kiln {' '.join(args)} exited {r.returncode}, expected {check}:\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def build_plugin(variant, extra=()):
    out = os.path.join(WORK, f"plugin_{variant}{'_'.join(extra).replace('-', '').replace('=', '_')}.so")
    subprocess.run(["c++", "-std=c++17", "-O1", "-shared", "-fPIC", f"-DVARIANT={variant}", *extra,
                    "-I", os.path.join(ROOT, "include"), os.path.join(HERE, "custom_ops", "test_plugin.cc"),
                    "-o", out], check=True, timeout=120)
    return out


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


class Model:
    """x[1,8,6,6] -> Conv 1x1 -> PSwish(beta=1.7) -> Add(x) -> Mish -> GatedAdd(gate[1,8,1,1], alpha=0.25) -> y."""

    def __init__(self):
        self.w = RNG.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.5
        self.b = RNG.standard_normal(8).astype(np.float32) * 0.1
        self.gate = RNG.standard_normal((1, 8, 1, 1)).astype(np.float32)
        self.x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
        nodes = [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
            helper.make_node("PSwish", ["c"], ["p"], name="pswish", domain="my.ops", beta=1.7),
            helper.make_node("Add", ["p", "x"], ["a"], name="add"),
            helper.make_node("Mish", ["a"], ["m"], name="mish", domain="my.ops"),
            helper.make_node("GatedAdd", ["m", "gate"], ["y"], name="gated", domain="my.ops", alpha=0.25),
        ]
        g = helper.make_graph(
            nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
            [numpy_helper.from_array(self.w, "w"), numpy_helper.from_array(self.b, "b"),
             numpy_helper.from_array(self.gate, "gate")])
        self.model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
        self.path = os.path.join(WORK, "custom.onnx")
        onnx.save(self.model, self.path)
        np.save(os.path.join(WORK, "x.npy"), self.x)

    def reference(self):
        x = self.x.astype(np.float64)
        c = np.einsum("oc,nchw->nohw", self.w[:, :, 0, 0].astype(np.float64), x) + self.b.reshape(1, 8, 1, 1)
        p = c * sigmoid(np.float64(np.float32(1.7)) * c)
        a = p + x
        m = a * np.tanh(softplus(a))
        return m + 0.25 * sigmoid(self.gate.astype(np.float64))


class CustomOpsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = Model()
        cls.good = build_plugin("good")

    def compile_and_run(self, name, *extra, env=None):
        out = os.path.join(WORK, name + ".kiln")
        rep = os.path.join(WORK, name + ".json")
        cache = os.path.join(WORK, name + "_dsl_cache")
        r = kiln("compile", self.model.path, "--custom-ops", self.good, "-o", out, "--report", rep, *extra,
                 env={**(env or {}), "KILN_DSL_CACHE_DIR": cache})
        with open(rep) as f:
            report = json.load(f)
        # The .kiln runs without the plugin, from an empty DSL cache: the kernels are built again
        # from the compute the model holds.
        run_cache = os.path.join(WORK, name + "_run_cache")
        shutil.rmtree(run_cache, ignore_errors=True)
        outdir = os.path.join(WORK, name + "_out")
        kiln("run", out, "--input", "x=" + os.path.join(WORK, "x.npy"), "--output-dir", outdir,
             env={"KILN_DSL_CACHE_DIR": run_cache})
        y = np.load(os.path.join(outdir, "y.npy"))
        built = sorted(f for f in os.listdir(run_cache) if f.endswith(".so")) if os.path.isdir(run_cache) else []
        return r, report, y, built

    def check_values(self, y):
        ref = self.model.reference()
        self.assertEqual(y.shape, ref.shape)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)

    def test_fused_into_conv_epilogue_and_elementwise_program(self):
        r, report, y, built = self.compile_and_run("fused")
        self.assertIn("custom op my.ops::PSwish from", r.stdout)
        fusions = report["fusions"]
        self.assertEqual(fusions.get("Conv+Silu (custom my.ops::PSwish)"), 1, fusions)
        self.assertEqual(fusions.get("Elementwise(3 ops) (custom my.ops::Mish, my.ops::GatedAdd)"), 1, fusions)
        self.assertEqual(report["reference_fallbacks"], [])
        self.check_values(y)
        # Mish and GatedAdd ran as DSL kernels (PSwish as oneDNN's swish post-op).
        self.assertEqual(len(built), 2, built)

    def test_dsl_kernels_when_the_epilogue_is_off(self):
        r, report, y, built = self.compile_and_run("no_epilogue", env={"KILN_CUSTOM_OP_EPILOGUE": "0"})
        fusions = report["fusions"]
        self.assertFalse(any("PSwish" in k and k.startswith("Conv") for k in fusions), fusions)
        self.assertEqual(fusions.get("Elementwise(4 ops) (custom my.ops::PSwish, my.ops::Mish, my.ops::GatedAdd)"), 1,
                         fusions)
        self.check_values(y)
        self.assertEqual(len(built), 3, built)

    def test_tuned_schedule_from_a_tuning_db(self):
        # kiln tune MODEL records each distinct DSL kernel (Mish and GatedAdd: PSwish is the
        # convolution's epilogue) ...
        db = os.path.join(WORK, "tuning.json")
        if os.path.exists(db):
            os.remove(db)
        r = kiln("tune", self.model.path, "--custom-ops", self.good, "--db", db, "--trials", "3", "--reps", "2",
                 env={"KILN_DSL_CACHE_DIR": os.path.join(WORK, "tune_cache")})
        self.assertIn("2 distinct kernel(s)", r.stdout)
        with open(db) as f:
            entries = json.load(f)["entries"]
        self.assertEqual(len(entries), 2, entries)
        self.assertTrue(all(e["op"].startswith("elementwise/") and e["shape"] == [1, 1024] for e in entries))
        # ... and kiln compile --tuning-db gives those nodes the recorded schedule. Record a split
        # the default never uses, so the generated kernels must differ from the default's.
        for e in entries:
            e["knobs"]["col_split"] = 48
        with open(db, "w") as f:
            json.dump({"version": 1, "entries": entries}, f)
        r, report, y, built = self.compile_and_run("tuned", "--tuning-db", db)
        tuned = report["tuned_dsl_kernels"]
        self.assertEqual(sorted(t["dsl_split"] for t in tuned), [48, 48], tuned)
        self.assertIn("tuned schedule:", r.stdout)
        self.check_values(y)
        sources = [open(os.path.join(WORK, "tuned_run_cache", b[:-3] + ".cc")).read() for b in built]
        self.assertEqual(sum("v_n_inner < 48L" in src or "48L" in src for src in sources), 2, built)
        # Without the database (or without a matching entry) the default schedule and no list.
        _, report, y, built = self.compile_and_run("untuned")
        self.assertNotIn("tuned_dsl_kernels", report)
        sources = [open(os.path.join(WORK, "untuned_run_cache", b[:-3] + ".cc")).read() for b in built]
        self.assertFalse(any("48L" in src for src in sources))
        self.check_values(y)
        r = kiln("compile", self.model.path, "--custom-ops", self.good, "-o", os.path.join(WORK, "x.kiln"),
                 "--tuning-db", os.path.join(WORK, "missing.json"), check=1)
        self.assertIn("no such file", r.stderr)

    def test_unfused_at_O0(self):
        r, report, y, built = self.compile_and_run("o0", "-O0")
        self.assertEqual(report["kernels"].get("kiln.DslElementwise/kiln"), 3, report["kernels"])
        self.check_values(y)
        self.assertEqual(len(built), 3, built)

    def test_reference_kernels_agree(self):
        out = os.path.join(WORK, "ref.kiln")
        kiln("compile", self.model.path, "--custom-ops", self.good, "-o", out, "-q")
        outdir = os.path.join(WORK, "ref_out")
        kiln("run", out, "--input", "x=" + os.path.join(WORK, "x.npy"), "--output-dir", outdir, "--reference-kernels")
        self.check_values(np.load(os.path.join(outdir, "y.npy")))

    def test_without_the_plugin_the_op_is_unknown(self):
        r = kiln("compile", self.model.path, "-o", os.path.join(WORK, "none.kiln"), check=1)
        self.assertIn("PSwish", r.stderr)

    def expect_error(self, plugin, *fragments):
        r = kiln("compile", self.model.path, "--custom-ops", plugin, "-o", os.path.join(WORK, "bad.kiln"), check=1)
        for f in fragments:
            self.assertIn(f, r.stderr)

    def test_plugin_that_throws_in_its_entry(self):
        self.expect_error(build_plugin("throw_entry"), "threw an exception: the plugin failed on purpose")

    def test_plugin_whose_shape_inference_throws(self):
        self.expect_error(build_plugin("throw_infer"), "'pswish' (my.ops.PSwish)",
                          "shape inference threw an exception: shape inference failed on purpose")

    def test_plugin_returning_a_wrong_shape(self):
        self.expect_error(build_plugin("wrong_shape"), "'pswish' (my.ops.PSwish)", "returned [1,8,6,7]",
                          "broadcast of its inputs, [1,8,6,6]")

    def test_plugin_with_a_bad_compute(self):
        self.expect_error(build_plugin("bad_compute"), "definition was refused", "unknown function 'frobnicate'")

    def test_plugin_that_refuses(self):
        self.expect_error(build_plugin("refuse"), "refused to load", "needs a licence file")

    def test_not_a_library(self):
        bad = os.path.join(WORK, "not_a_library.so")
        with open(bad, "w") as f:
            f.write("this is text\n")
        self.expect_error(bad, "is not a loadable shared library")

    def test_missing_file(self):
        self.expect_error(os.path.join(WORK, "missing.so"), "no such file")

    def test_library_without_the_entry_point(self):
        self.expect_error(build_plugin("good", ("-Dkiln_custom_ops_register=something_else",)),
                          "does not export kiln_custom_ops_register")


class TorchModelTest(unittest.TestCase):
    """The acceptance model (bench/custom_op/make_models.py, at 64x64 here): an EfficientNet-style
    network exported by PyTorch with a custom-domain PSwish(beta=1.5) activation, compiled with the
    plugin's DSL definition, against PyTorch's output."""

    def test_efficientnet_style_model_against_pytorch(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("python3-torch is not installed")
        work = os.path.join(WORK, "torch_model")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "custom_op", "make_models.py"), work, "--size",
                        "64"], check=True, timeout=600, capture_output=True)
        good = build_plugin("good")
        for name, extra, env in (("custom", ["--custom-ops", good], {}),
                                 ("custom_dsl", ["--custom-ops", good], {"KILN_CUSTOM_OP_EPILOGUE": "0"})):
            out = os.path.join(work, name + ".kiln")
            rep = os.path.join(work, name + ".json")
            kiln("compile", os.path.join(work, "custom.onnx"), "-o", out, "--report", rep, "-q", *extra, env=env)
            with open(rep) as f:
                fusions = json.load(f)["fusions"]
            epilogue = sum(c for k, c in fusions.items() if k.startswith("Conv") and "my.ops::PSwish" in k)
            # 1 stem + 2 per block (expand, depthwise; the first block's expand too) + 1 per SE + 1 head.
            self.assertEqual(epilogue, 0 if name == "custom_dsl" else 32, fusions)
            outdir = os.path.join(work, name + "_out")
            kiln("run", out, "--input", "x=" + os.path.join(work, "input.npy"), "--output-dir", outdir)
            y = np.load(os.path.join(outdir, "y.npy"))
            ref = np.load(os.path.join(work, "custom_ref.npy"))
            np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
            # The check tells beta 1.5 from SiLU's 1: the built-in model's output is far off.
            self.assertGreater(np.abs(np.load(os.path.join(work, "builtin_ref.npy")) - y).max(), 1e-3)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    del sys.argv[1:]
    unittest.main(verbosity=2)
