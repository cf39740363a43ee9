#!/usr/bin/env python3
"""The kiln command as a user runs it: compile, run, inspect, their options, outputs and
errors. Reference values come from NumPy.

usage: cli_test.py KILN_BINARY WORK_DIR
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
RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 6)).astype(np.float32)
B = RNG.standard_normal(6).astype(np.float32)


def kiln(*args, check=True):
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def save(model, name):
    path = os.path.join(WORK, name)
    onnx.save(model, path)
    return path


def linear_model():
    """x[N,4] -> MatMul W -> Add b -> Relu -> 'scores/relu:0'; ArgMax -> 'label'."""
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "B"], ["z"], name="add"),
        helper.make_node("Relu", ["z"], ["scores/relu:0"], name="relu"),
        helper.make_node("ArgMax", ["scores/relu:0"], ["label"], name="argmax", axis=1, keepdims=0),
    ]
    g = helper.make_graph(
        nodes, "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("scores/relu:0", TensorProto.FLOAT, ["N", 6]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["N"])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="cli_test")
    onnx.checker.check_model(m)
    return m


def numpy_linear(x):
    s = np.maximum(x @ W + B, 0)
    return s, np.argmax(s, axis=1)


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.onnx_path = save(linear_model(), "linear.onnx")
        cls.kiln_path = os.path.join(WORK, "linear.kiln")
        kiln("compile", cls.onnx_path, "-o", cls.kiln_path, "--input-shape", "x:3,4")

    def test_help_for_every_subcommand(self):
        r = kiln("--help")
        for sub in ("compile", "run", "inspect"):
            self.assertIn(sub, r.stdout)
            h = kiln(sub, "--help")
            self.assertIn("--", h.stdout)
        self.assertIn("--input-shape", kiln("compile", "--help").stdout)
        self.assertIn("--output-dir", kiln("run", "--help").stdout)

    def test_run_writes_outputs_matching_numpy(self):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        np.save(os.path.join(WORK, "x.npy"), x)
        out = os.path.join(WORK, "out")
        kiln("run", self.kiln_path, "--input", "x=" + os.path.join(WORK, "x.npy"), "--output-dir", out)
        index = json.load(open(os.path.join(out, "outputs.json")))
        self.assertEqual(index["scores/relu:0"], {"file": "scores_relu_0.npy", "dtype": "float32", "shape": [3, 6]})
        self.assertEqual(index["label"], {"file": "label.npy", "dtype": "int64", "shape": [3]})
        scores, label = numpy_linear(x)
        got = np.load(os.path.join(out, "scores_relu_0.npy"))
        np.testing.assert_allclose(got, scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.load(os.path.join(out, "label.npy")), label)

    def test_run_json_has_outputs_and_latency(self):
        r = kiln("run", self.kiln_path, "--json", "--loops", "3", "--warmup", "1")
        j = json.loads(r.stdout)
        self.assertEqual([o["name"] for o in j["outputs"]], ["scores/relu:0", "label"])
        self.assertEqual(j["outputs"][0]["shape"], [3, 6])
        for k in ("median", "min", "max", "p90"):
            self.assertIn(k, j["latency_ms"])
        self.assertLessEqual(j["latency_ms"]["min"], j["latency_ms"]["max"])

    def test_run_reference_kernels_and_arena_counters(self):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        x_path = os.path.join(WORK, "xk.npy")
        np.save(x_path, x)
        scores, _ = numpy_linear(x)
        for flags, kernels in (([], None), (["--reference-kernels"], "reference")):
            r = kiln("run", self.kiln_path, "--json", "--loops", "3", "--warmup", "1", "--input", "x=" + x_path, *flags)
            j = json.loads(r.stdout)
            # Fast kernels unless the flag (or KILN_KERNELS=reference in the environment) says otherwise.
            if kernels:
                self.assertEqual(j["kernels"], kernels)
            else:
                self.assertEqual(j["kernels"], "reference" if os.environ.get("KILN_KERNELS") == "reference" else "fast")
            np.testing.assert_allclose(j["outputs"][0]["first"], scores.flatten()[:5], rtol=1e-5, atol=1e-6)
            # Fixed shapes: the .kiln's arena plan holds every activation the fast kernels ask for
            # from the first execution on (its block is the plan's, apart from the arena), so no
            # execution takes a block from the context's arena. The reference FusedMatMul makes its
            # output itself: one block from the arena in the first execution, reused after.
            a = j["arena"]
            reference = j["kernels"] == "reference"
            self.assertEqual(a["fresh_blocks_first_run"], 1 if reference else 0)
            self.assertEqual(a["fresh_blocks_after_second_run"], 0)
            self.assertEqual(a["fresh_blocks_later_runs"], 0)
            self.assertGreaterEqual(a["planned_bytes"], 3 * 6 * 4)
            self.assertGreater(a["planned_outputs"], 0)
            # Every execution's outputs are the plan's tensors (graph_executor.h).
            self.assertGreaterEqual(a["recycled_outputs"], 3)
            if not reference:
                self.assertEqual(a["peak_bytes"], 0)
        self.assertIn("--reference-kernels", kiln("run", "--help").stdout)
        j = json.loads(kiln("bench", self.kiln_path, "--json", "--loops", "4", "--reference-kernels").stdout)
        self.assertEqual(j["kernels"], "reference")
        self.assertEqual(j["inferences"], 4)
        self.assertIn("reference kernels", kiln("bench", self.kiln_path, "--loops", "2", "--reference-kernels").stdout)

    def test_run_text_prints_shapes_and_latency(self):
        r = kiln("run", self.kiln_path, "--loops", "2")
        self.assertIn("float32[3,6]", r.stdout)
        self.assertIn("median", r.stdout)

    def test_run_rejects_wrong_input_shape(self):
        np.save(os.path.join(WORK, "bad.npy"), np.zeros((2, 5), np.float32))
        r = kiln("run", self.kiln_path, "--input", "x=" + os.path.join(WORK, "bad.npy"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("[2,5]", r.stderr)
        self.assertIn("[3,4]", r.stderr)
        r = kiln("run", self.kiln_path, "--input", "nope=" + os.path.join(WORK, "bad.npy"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nope", r.stderr)

    def test_inspect_onnx_and_kiln(self):
        j = json.loads(kiln("inspect", self.onnx_path, "--json").stdout)
        self.assertEqual(j["format"], "onnx")
        self.assertEqual(j["inputs"][0]["shape"], ["N", 4])
        self.assertEqual(j["op_histogram"], {"MatMul": 1, "Add": 1, "Relu": 1, "ArgMax": 1})
        self.assertEqual(j["weight_bytes"], W.nbytes + B.nbytes)
        self.assertIn("cli_test", j["producer"])
        k = json.loads(kiln("inspect", self.kiln_path, "--json").stdout)
        self.assertEqual(k["format"], "kiln")
        self.assertEqual(k["inputs"][0]["shape"], [3, 4])
        self.assertEqual(k["source_hash"], j["source_hash"])
        self.assertTrue(k["target"]["features"])
        self.assertIn("MatMul", kiln("inspect", self.kiln_path).stdout)

    def test_unsupported_ops_are_all_listed(self):
        nodes = [
            helper.make_node("Relu", ["x"], ["a"], name="ok_relu"),
            helper.make_node("NoSuchOp", ["a"], ["b"], name="first_bad"),
            helper.make_node("Frobnicate", ["b"], ["y"], name="second_bad", domain="com.example"),
        ]
        g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
        path = save(m, "unsupported.onnx")
        r = kiln("compile", "--check", path, check=False)
        self.assertEqual(r.returncode, 1)
        for text in ("first_bad", "NoSuchOp", "second_bad", "Frobnicate", "com.example"):
            self.assertIn(text, r.stdout)
        r = kiln("compile", path, "-o", os.path.join(WORK, "never.kiln"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("first_bad", r.stderr)
        self.assertIn("second_bad", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(WORK, "never.kiln")))

    def test_check_passes_on_a_good_model(self):
        r = kiln("compile", "--check", self.onnx_path)
        self.assertIn("check passed", r.stdout)

    def test_input_shape_errors_are_clear(self):
        r = kiln("compile", self.onnx_path, "-o", os.path.join(WORK, "x.kiln"), "--input-shape", "y:1,4", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("'y'", r.stderr)
        self.assertIn("x[N,4]", r.stderr)
        r = kiln("compile", self.onnx_path, "-o", os.path.join(WORK, "x.kiln"), "--input-shape", "x:1,5", check=False)
        self.assertEqual(r.returncode, 1)

    def test_precision_modes_and_keep_dtype(self):
        # bf16 products: the run stays within bfloat16's rounding of NumPy (8 significant bits
        # per operand, K = 4 products), the report says which nodes took bf16, and --keep-dtype
        # by op type keeps them float32 (then NumPy's result to float32 rounding).
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        np.save(os.path.join(WORK, "x_prec.npy"), x)
        want, label = numpy_linear(x)
        for mode, keep, bf16_nodes in (("bf16", None, 1), ("mixed", None, 0), ("bf16", "MatMul", 0)):
            out = os.path.join(WORK, f"linear_{mode}_{keep}.kiln")
            report = out + ".json"
            args = ["compile", self.onnx_path, "-o", out, "--input-shape", "x:3,4", "--precision", mode,
                    "--report", report]
            if keep:
                args += ["--keep-dtype", keep]
            r = kiln(*args)
            self.assertIn(f"precision {mode}", r.stdout)
            with open(report) as f:
                prec = json.load(f)["precision"]
            self.assertEqual(prec["mode"], mode)
            self.assertEqual(sum(prec["nodes"].get("bf16", {}).values()), bf16_nodes, prec)
            self.assertEqual("[bf16]" in kiln("inspect", out).stdout, bf16_nodes > 0)
            run_dir = os.path.join(WORK, f"out_{mode}_{keep}")
            kiln("run", out, "--input", f"x={os.path.join(WORK, 'x_prec.npy')}", "--output-dir", run_dir)
            got = np.load(os.path.join(run_dir, "scores_relu_0.npy"))
            tol = (4 * 2 ** -8 * np.abs(x).max() * np.abs(W).max()) if bf16_nodes else 1e-5 * np.abs(want).max()
            np.testing.assert_allclose(got, want, atol=tol, rtol=0)
        # mixed keeps the only (final) layer fp32: exact to float32 rounding, as checked above.
        r = kiln("compile", self.onnx_path, "-o", os.path.join(WORK, "x.kiln"), "--precision", "fp16", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("expected fp32, bf16, mixed or int8", r.stderr)
        r = kiln("compile", self.onnx_path, "-o", os.path.join(WORK, "x.kiln"), "--precision", "bf16",
                 "--keep-dtype", "matmul,,add", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("empty entry", r.stderr)
        r = kiln("compile", self.onnx_path, "-o", os.path.join(WORK, "x.kiln"), "--precision", "bf16",
                 "--keep-dtype", "no_such_node")
        self.assertIn("no_such_node matches no convolution or matrix product", r.stdout)

    def test_missing_file_and_bad_usage(self):
        r = kiln("run", os.path.join(WORK, "missing.kiln"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.kiln", r.stderr)
        r = kiln("frobnicate", check=False)
        self.assertEqual(r.returncode, 2)

    def test_run_onnx_directly_compiles_in_memory(self):
        # N is open: random inputs need its size (never a silent 1), given by --input-shape.
        r = kiln("run", self.onnx_path, "--json", "--input-shape", "x:2,4")
        j = json.loads(r.stdout)
        self.assertEqual(j["outputs"][0]["shape"], [2, 6])

    def test_run_onnx_with_open_dims_takes_the_given_shape(self):
        # N is not fixed: the input's shape decides the outputs' (set through the C API's
        # dataset tensor desc), and the output buffers are sized to fit.
        x = RNG.standard_normal((5, 4)).astype(np.float32)
        np.save(os.path.join(WORK, "x5.npy"), x)
        out = os.path.join(WORK, "out5")
        kiln("run", self.onnx_path, "--input", "x=" + os.path.join(WORK, "x5.npy"), "--output-dir", out)
        scores, label = numpy_linear(x)
        np.testing.assert_allclose(np.load(os.path.join(out, "scores_relu_0.npy")), scores, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(np.load(os.path.join(out, "label.npy")), label)

    def test_run_threads_and_bad_input_spec(self):
        j = json.loads(kiln("run", self.kiln_path, "--json", "--threads", "1").stdout)
        self.assertEqual(j["threads"], 1)
        r = kiln("run", self.kiln_path, "--input", "x", check=False)
        self.assertEqual(r.returncode, 2)
        self.assertIn("NAME=FILE.npy", r.stderr)
        np.save(os.path.join(WORK, "x64.npy"), np.zeros((3, 4), np.float64))
        r = kiln("run", self.kiln_path, "--input", "x=" + os.path.join(WORK, "x64.npy"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("float64", r.stderr)
        self.assertIn("float32", r.stderr)

    # ---- kiln bench ----------------------------------------------------------------------

    def bench_json(self, *args):
        r = kiln("bench", self.kiln_path, "--json", *args)
        j = json.loads(r.stdout)  # exactly one JSON object on stdout
        self.assertGreater(j["throughput_per_s"], 0)
        lat = j["latency_ms"]
        for k in ("p50", "p90", "p99"):
            self.assertGreater(lat[k], 0)
            self.assertLess(lat[k], 10_000)
        self.assertLessEqual(lat["p50"], lat["p90"])
        self.assertLessEqual(lat["p90"], lat["p99"])
        self.assertGreaterEqual(j["host_us_per_call"]["mean"], 0)
        # The rate is the inferences over the wall time of the timed part.
        self.assertAlmostEqual(j["throughput_per_s"], j["inferences"] / j["seconds"], delta=1e-6 * j["throughput_per_s"])
        return j

    def test_bench_json_loops(self):
        j = self.bench_json("--loops", "20", "--warmup", "1")
        self.assertEqual(j["inferences"], 20)
        self.assertEqual(j["devices"], 1)
        self.assertEqual(j["streams_per_device"], 1)

    def test_bench_streams_and_devices(self):
        j = self.bench_json("--streams", "2", "--devices", "2", "--loops", "40", "--threads", "1")
        self.assertEqual(j["inferences"], 40)
        self.assertEqual(j["devices"], 2)
        self.assertEqual(j["streams_per_device"], 2)
        self.assertEqual(j["threads_per_device"], 1)

    def test_bench_duration_and_inputs(self):
        x = RNG.standard_normal((3, 4)).astype(np.float32)
        np.save(os.path.join(WORK, "xb.npy"), x)
        j = self.bench_json("--duration", "0.3", "--input", "x=" + os.path.join(WORK, "xb.npy"), "--depth", "3")
        self.assertGreater(j["inferences"], 0)
        self.assertGreaterEqual(j["seconds"], 0.3)
        self.assertLess(j["seconds"], 30)

    def test_bench_onnx_with_open_dims(self):
        j = json.loads(kiln("bench", self.onnx_path, "--json", "--loops", "4", "--streams", "2",
                            "--input-shape", "x:7,4").stdout)
        self.assertEqual(j["inferences"], 4)
        r = kiln("bench", self.onnx_path, "--json", "--loops", "4", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("'x'", r.stderr)
        self.assertIn("--input-shape", r.stderr)

    def test_bench_text(self):
        r = kiln("bench", self.kiln_path, "--loops", "10")
        self.assertIn("inferences/s", r.stdout)
        self.assertIn("p99", r.stdout)
        self.assertIn("kilnmdlExecuteAsync", r.stdout)
        self.assertIn("--streams", kiln("bench", "--help").stdout)
        self.assertIn("bench", kiln("--help").stdout)

    def test_bench_bad_options(self):
        for args, text in ((["--streams", "0"], "--streams"),
                           (["--devices", "0"], "--devices"),
                           (["--threads", "0"], "--threads"),
                           (["--loops", "0"], "--loops"),
                           (["--duration", "0"], "--duration"),
                           (["--warmup", "-1"], "--warmup"),
                           (["--depth", "0"], "--depth"),
                           (["--loops", "5", "--duration", "1"], "--duration"),
                           (["--streams", "two"], "--streams")):
            r = kiln("bench", self.kiln_path, *args, check=False)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stderr}")
            self.assertIn(text, r.stderr, args)
            self.assertEqual(r.stdout, "", args)
        r = kiln("bench", os.path.join(WORK, "missing.kiln"), check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("missing.kiln", r.stderr)
        r = kiln("bench", self.kiln_path, "--input", "nope=" + os.path.join(WORK, "xb.npy"), "--loops", "1", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("nope", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
