#!/usr/bin/env python3
"""Shape buckets as a user meets them: kiln compile --dynamic-batch-size / --dynamic-dims /
--pad-value, kiln inspect listing the buckets, and kiln run on shapes inside a bucket
(padded, outputs sliced back), equal to one and beyond all of them (the dynamic path).
References come from PyTorch (the models are exported at test time) and NumPy.

usage: buckets_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys
import unittest

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

KILN = None
WORK = None
REL_TOL = 1e-5


def kiln(*args, check=True, env=None):
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    r = subprocess.run([KILN] + list(args), capture_output=True, text=True, timeout=300, env=full_env)
    if check and r.returncode != 0:
        raise AssertionError(f"kiln {' '.join(args)} failed ({r.returncode}): {r.stderr}")
    return r


def path(name):
    return os.path.join(WORK, name)


def run_model(model, inputs, tag):
    """Runs `model` with {name: array} through kiln run; returns ({output: array}, stderr)."""
    args = ["run", model, "--output-dir", path("out_" + tag)]
    for name, value in inputs.items():
        np.save(path(f"in_{tag}_{name}.npy"), value)
        args += ["--input", f"{name}={path(f'in_{tag}_{name}.npy')}"]
    r = kiln(*args, env={"KILN_LOG_LEVEL": "debug"})
    with open(path(f"out_{tag}/outputs.json")) as f:
        index = json.load(f)
    return {name: np.load(path(f"out_{tag}/{e['file']}")) for name, e in index.items()}, r.stderr


def assert_close(test, actual, expected, what):
    test.assertEqual(actual.shape, expected.shape, what)
    scale = max(float(np.abs(expected).max()), 1e-30)
    err = float(np.abs(actual.astype(np.float64) - expected).max()) / scale
    test.assertLessEqual(err, REL_TOL, f"{what}: max error {err:g} relative to max |ref|")


class BatchNet(torch.nn.Module):
    """Conv + BatchNorm + ReLU + pool + flatten (a Shape/Gather/Concat/Reshape chain in ONNX)
    + two Linear layers, the first large enough that the weights dominate the file."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc1 = torch.nn.Linear(8 * 4 * 4, 2048)
        self.fc2 = torch.nn.Linear(2048, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        y = torch.nn.functional.max_pool2d(y, 2)
        return self.fc2(torch.relu(self.fc1(y.view(y.size(0), -1))))


class WidthNet(torch.nn.Module):
    """Convs that never pad along the width, so the columns a true-width run produces do not
    depend on what lies to their right: padding the width changes no valid output. The
    output is [N, T, C*H] with T the width after a stride-2 conv (as a text recogniser's)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=(1, 0))
        self.c2 = torch.nn.Conv2d(8, 4, 3, stride=(1, 2), padding=(1, 0))

    def forward(self, x):
        y = self.c2(torch.relu(self.c1(x)))
        return y.permute(0, 3, 1, 2).flatten(2)


class BucketTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.manual_seed(0)
        cls.batch_net = BatchNet().eval()
        with torch.no_grad():
            cls.batch_net.bn.running_mean.uniform_(-1, 1)
            cls.batch_net.bn.running_var.uniform_(0.5, 2)
        cls.batch_onnx = path("batch.onnx")
        torch.onnx.export(cls.batch_net, torch.randn(2, 3, 8, 8), cls.batch_onnx, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}}, opset_version=13)
        cls.width_net = WidthNet().eval()
        cls.width_onnx = path("width.onnx")
        torch.onnx.export(cls.width_net, torch.randn(1, 3, 4, 32), cls.width_onnx, input_names=["x"],
                          output_names=["y"], dynamic_axes={"x": {3: "W"}, "y": {1: "T"}}, opset_version=13)

    def torch_run(self, net, x):
        with torch.no_grad():
            return net(torch.from_numpy(x)).numpy().astype(np.float64)

    def test_batch_buckets(self):
        model = path("batch.kiln")
        r = kiln("compile", self.batch_onnx, "-o", model, "--dynamic-batch-size", "8,1,4")
        for line in ["bucket 1/3 (x:1,3,8,8)", "bucket 2/3 (x:4,3,8,8)", "bucket 3/3 (x:8,3,8,8)", "dynamic variant"]:
            self.assertIn(line, r.stdout)
        info = json.loads(kiln("inspect", model, "--json").stdout)
        self.assertEqual(info["buckets"]["kind"], "batch")
        self.assertEqual([v["shapes"]["x"] for v in info["buckets"]["variants"]],
                         [[1, 3, 8, 8], [4, 3, 8, 8], [8, 3, 8, 8]])
        self.assertTrue(info["buckets"]["dynamic_graph"])
        self.assertIn("shape buckets (batch, 3", kiln("inspect", model).stdout)
        # Random inputs take the first bucket's shape.
        r = kiln("run", model, "--json")
        self.assertEqual(json.loads(r.stdout)["outputs"][0]["shape"], [1, 5])
        self.assertIn("of the first shape bucket's shape [1,3,8,8]", r.stdout)
        rng = np.random.default_rng(1)
        # batch -> the bucket that must serve it (None: the dynamic path)
        expect = {1: (1, False), 3: (2, True), 4: (2, False), 6: (3, True), 8: (3, False), 9: (None, False)}
        for batch, (bucket, padded) in expect.items():
            x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
            out, log = run_model(model, {"x": x}, f"batch{batch}")
            assert_close(self, out["y"], self.torch_run(self.batch_net, x), f"batch {batch}")
            if bucket is None:
                self.assertIn(f"inputs x[{batch},3,8,8] fit no shape bucket", log)
                self.assertIn("x[1,3,8,8], x[4,3,8,8], x[8,3,8,8]", log)
                self.assertEqual(log.count("fit no shape bucket"), 1, log)  # said once
            else:
                self.assertIn(f"inputs x[{batch},3,8,8]: shape bucket {bucket} of 3"
                              + (" (padded, outputs sliced)" if padded else "\n"), log)
                self.assertNotIn("fit no shape bucket", log)

    def test_weights_are_stored_once(self):
        single, bucketed = path("single.kiln"), path("three.kiln")
        kiln("compile", self.batch_onnx, "-o", single, "--input-shape", "x:1,3,8,8", "-q")
        r = kiln("compile", self.batch_onnx, "-o", bucketed, "--dynamic-batch-size", "1,4,8", "-q")
        self.assertEqual(r.stdout, "")  # -q: no progress lines
        one, three = os.path.getsize(single), os.path.getsize(bucketed)
        weights = sum(p.numel() * 4 for p in self.batch_net.parameters())
        self.assertGreater(one, weights)  # the weights dominate the file...
        # ...and four graphs (three buckets and the dynamic one) add only their metadata.
        self.assertLess(three, one + 64 * 1024, f"1 bucket: {one} bytes, 3 buckets: {three} bytes")

    def test_dims_buckets_pad_the_width_and_slice_the_sequence(self):
        model = path("width.kiln")
        kiln("compile", self.width_onnx, "-o", model, "--dynamic-dims",
             "x:1,3,4,32;x:1,3,4,64;x:1,3,4,128", "--pad-value", "x:0")
        info = json.loads(kiln("inspect", model, "--json").stdout)
        self.assertEqual(info["buckets"]["kind"], "dims")
        self.assertEqual(info["buckets"]["pad_values"], {"x": 0.0})
        rng = np.random.default_rng(2)
        expect = {20: 1, 32: 1, 50: 2, 100: 3, 128: 3, 200: None}
        for width, bucket in expect.items():
            x = rng.standard_normal((1, 3, 4, width)).astype(np.float32)
            out, log = run_model(model, {"x": x}, f"width{width}")
            ref = self.torch_run(self.width_net, x)
            self.assertEqual(out["y"].shape, ref.shape)  # the true sequence length
            assert_close(self, out["y"], ref, f"width {width}")
            if bucket is None:
                self.assertIn("fit no shape bucket", log)
            else:
                self.assertIn(f"shape bucket {bucket} of 3", log)

    def test_pad_value_and_slicing_follow_the_exact_semantics(self):
        """Padding that does change the result: the output equals padding the input yourself
        with the declared value, running the bucket, and slicing each output to the size the
        true shape gives. s = ReduceSum over the padded axis sees the pad values; r = Relu(x)
        is sliced back."""
        nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=1),
                 helper.make_node("Relu", ["x"], ["r"])]
        g = helper.make_graph(nodes, "padsum", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "W"])],
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 1]),
                               helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, "W"])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(m)
        onnx.save(m, path("padsum.onnx"))
        model = path("padsum.kiln")
        kiln("compile", path("padsum.onnx"), "-o", model, "--dynamic-dims", "x:2,4;x:2,8", "--pad-value", "x:2.5", "-q")
        x = np.arange(10, dtype=np.float32).reshape(2, 5) - 4
        out, log = run_model(model, {"x": x}, "padsum5")
        self.assertIn("shape bucket 2 of 2 (padded, outputs sliced)", log)
        padded = np.full((2, 8), 2.5, dtype=np.float32)
        padded[:, :5] = x
        np.testing.assert_allclose(out["s"], padded.sum(keepdims=True), rtol=1e-6)
        np.testing.assert_array_equal(out["r"], np.maximum(x, 0))

    def test_bad_bucket_options_are_errors(self):
        # Malformed or contradictory options are usage errors (exit code 2), found before the
        # model is read; options the model contradicts are model errors (1). docs/cli.md.
        out = path("bad.kiln")
        cases = [
            (["--dynamic-batch-size", "1,4"], self.width_onnx, "needs an input whose axis 0 is symbolic", 1),
            (["--dynamic-batch-size", "1,0"], self.batch_onnx, "is not a batch size >= 1", 2),
            (["--dynamic-batch-size", "2,2"], self.batch_onnx, "gives 2 twice", 2),
            (["--dynamic-dims", "x:1,3,4,32;y:1,3,4,64"], self.width_onnx, "names 'y'", 1),
            (["--dynamic-dims", "x:1,3,4,32", "--dynamic-batch-size", "1"], self.width_onnx, "not both", 2),
            (["--dynamic-dims", "x:1,3,4,32", "--pad-value", "z:0"], self.width_onnx, "not a bucketed input", 1),
            (["--pad-value", "x:0"], self.width_onnx, "--pad-value needs", 2),
            (["--dynamic-dims", "x:1,3,5,32"], self.width_onnx, "dim 2 = 5", 1),
        ]
        for args, onnx_path, message, code in cases:
            r = kiln("compile", onnx_path, "-o", out, *args, check=False)
            self.assertEqual(r.returncode, code, f"{args}: {r.stdout}")
            self.assertIn(message, r.stderr, args)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_damaged_bucketed_files_are_errors(self):
        model = path("damaged_src.kiln")
        kiln("compile", self.batch_onnx, "-o", model, "--dynamic-batch-size", "1,4", "-q")
        with open(model, "rb") as f:
            data = f.read()
        for name, damaged in [("truncated", data[: len(data) // 2]), ("flipped", data[:200] + bytes([data[200] ^ 1]) + data[201:])]:
            p = path(f"damaged_{name}.kiln")
            with open(p, "wb") as f:
                f.write(damaged)
            for cmd in (["inspect", p], ["run", p]):
                r = kiln(*cmd, check=False)
                self.assertEqual(r.returncode, 1, f"{name} {cmd}")
                self.assertIn(f"damaged_{name}.kiln", r.stderr)


if __name__ == "__main__":
    KILN, WORK = sys.argv[1], sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v"])
