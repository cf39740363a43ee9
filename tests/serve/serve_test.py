#!/usr/bin/env python3
"""`kiln serve` as a KServe v2 client meets it: a repository of small ONNX models written
here, inference over JSON and binary tensors checked against NumPy, dynamic batching under
concurrent clients (each client still gets its own rows), static scheduling, load and unload,
Prometheus metrics that count, every error case answered with the right status and a
{"error": ...} body while the server keeps serving, exit codes, and SIGTERM; and the
protocol's published example requests (JSON, and Triton's binary tensor data) sent as written.

usage: serve_test.py KILN_BINARY WORK_DIR
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

KILN = None
WORK = None
RNG = np.random.default_rng(30)
W = RNG.standard_normal((8, 4)).astype(np.float32)
B = RNG.standard_normal((4,)).astype(np.float32)
ENV = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}


def save(model, *parts):
    path = os.path.join(*parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    onnx.checker.check_model(model)
    onnx.save(model, path)


def linear_model():
    """y[B,4] = x[B,8] @ W + b, batch dim open."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def pair_model():
    """sum = a + b, prod = a * b on fixed [2,3] float inputs; k = n * 3 on an int32 input [N]."""
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Mul", ["a", "b"], ["prod"]),
         helper.make_node("Mul", ["n", "three"], ["k"])], "pair",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("n", TensorProto.INT32, ["N"])],
        [helper.make_tensor_value_info("sum", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("prod", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("k", TensorProto.INT32, ["N"])],
        [numpy_helper.from_array(np.array([3], dtype=np.int32), "three")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def example_model():
    """The model of the KServe v2 / Triton HTTP protocol's examples: input0 UINT32 [2,2] and
    input1 BOOL [3]; output0 = input0 as FP32, output1 = not input1."""
    g = helper.make_graph(
        [helper.make_node("Cast", ["input0"], ["output0"], to=TensorProto.FLOAT),
         helper.make_node("Not", ["input1"], ["output1"])], "mymodel",
        [helper.make_tensor_value_info("input0", TensorProto.UINT32, [2, 2]),
         helper.make_tensor_value_info("input1", TensorProto.BOOL, [3])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, [2, 2]),
         helper.make_tensor_value_info("output1", TensorProto.BOOL, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


SLOW_W = RNG.standard_normal((1536, 1536)).astype(np.float32) / 40


def slow_model():
    """y = sum(Expand(x, [1536, 1536]) @ W @ W): 14 GFLOP from a one-element input, long enough
    to be still executing when a 50 ms timeout passes."""
    g = helper.make_graph(
        [helper.make_node("Expand", ["x", "shape"], ["big"]), helper.make_node("MatMul", ["big", "W"], ["h"]),
         helper.make_node("MatMul", ["h", "W"], ["h2"]), helper.make_node("ReduceSum", ["h2"], ["y"], keepdims=0)],
        "slow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(SLOW_W, "W"), numpy_helper.from_array(np.array([1536, 1536], np.int64), "shape")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def make_repository(root):
    shutil.rmtree(root, ignore_errors=True)
    save(linear_model(), root, "linear", "1", "model.onnx")
    with open(os.path.join(root, "linear", "config.json"), "w") as f:
        json.dump({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 20000}}, f)
    save(pair_model(), root, "pair", "3", "model.onnx")
    with open(os.path.join(root, "pair", "config.json"), "w") as f:
        json.dump({"instance_count": 2}, f)
    # Batch shape buckets and bf16 compute (config fields passed to the compiler).
    save(linear_model(), root, "linear_buckets", "1", "model.onnx")
    with open(os.path.join(root, "linear_buckets", "config.json"), "w") as f:
        json.dump({"max_batch_size": 4, "batch_buckets": [1, 2, 4]}, f)
    save(linear_model(), root, "linear_bf16", "1", "model.onnx")
    with open(os.path.join(root, "linear_bf16", "config.json"), "w") as f:
        json.dump({"max_batch_size": 4, "precision": "bf16"}, f)
    # A queue of 2 requests held for 300 ms: the ones beyond it are refused at once.
    save(linear_model(), root, "narrow", "1", "model.onnx")
    with open(os.path.join(root, "narrow", "config.json"), "w") as f:
        json.dump({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 300000},
                   "max_queue_size": 2}, f)
    save(example_model(), root, "mymodel", "1", "model.onnx")
    save(slow_model(), root, "slow", "1", "model.onnx")
    # An older version, which must not be the one served, and a version without a model.
    save(linear_model(), root, "pair", "1", "model.onnx")
    os.makedirs(os.path.join(root, "pair", "10"))


class Server:
    """A `kiln serve` process on a free port."""

    def __init__(self, repo, *args):
        self.proc = subprocess.Popen([KILN, "serve", "--model-repository", repo, "--http-port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        self.lines = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"kiln serve exited early: {self.lines} {self.proc.stderr.read()}")
            self.lines.append(line)
            m = re.search(r"listening on http://([\d.]+):(\d+)", line)
            if m:
                self.port = int(m.group(2))
                return
        raise AssertionError("kiln serve did not start listening")

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def json(self, method, path, body=None):
        status, headers, data = self.request(method, path, json.dumps(body) if body is not None else None,
                                             {"Content-Type": "application/json"})
        return status, json.loads(data) if data else None

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err


def infer_json(x, binary_output=False):
    body = {"id": "r1", "inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape), "data": x.ravel().tolist()}]}
    if binary_output:
        body["outputs"] = [{"name": "y", "parameters": {"binary_data": True}}]
    return json.dumps(body)


def infer_binary(inputs, outputs=None):
    """A binary-tensor request: (body, headers)."""
    header = {"inputs": [{"name": n, "datatype": d, "shape": list(a.shape), "parameters": {"binary_data_size": a.nbytes}}
                         for n, d, a in inputs]}
    if outputs is not None:
        header["outputs"] = [{"name": o, "parameters": {"binary_data": True}} for o in outputs]
    h = json.dumps(header).encode()
    body = h + b"".join(a.tobytes() for _, _, a in inputs)
    return body, {"Inference-Header-Content-Length": str(len(h)), "Content-Type": "application/octet-stream"}


def binary_outputs(headers, data):
    n = int(headers["Inference-Header-Content-Length"])
    header = json.loads(data[:n])
    out, offset = {}, n
    for o in header["outputs"]:
        size = o["parameters"]["binary_data_size"]
        dtype = {"FP32": np.float32, "INT32": np.int32}[o["datatype"]]
        out[o["name"]] = np.frombuffer(data[offset:offset + size], dtype=dtype).reshape(o["shape"])
        offset += size
    assert offset == len(data), (offset, len(data))
    return header, out


def reference(x):
    return x.astype(np.float64) @ W.astype(np.float64) + B


def metric(text, name, **labels):
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{re.escape(name)}{{{re.escape(want)}}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


class KServeExamples:
    """The inference requests of the protocol's published examples, written out byte for byte as
    a client following them sends them (KServe v2 "Inference Request Examples"; Triton's binary
    tensor extension example), against the example's model. Mixed into ServeTest, whose server
    runs them."""

    def test_the_json_example_request(self):
        # The KServe v2 example but for input1's data: the published one gives [ true ] for shape
        # [ 3 ], one element where three are due, which the server must refuse (checked below).
        body = b"""{
  "id" : "42",
  "inputs" : [
    {
      "name" : "input0",
      "shape" : [ 2, 2 ],
      "datatype" : "UINT32",
      "data" : [ 1, 2, 3, 4 ]
    },
    {
      "name" : "input1",
      "shape" : [ 3 ],
      "datatype" : "BOOL",
      "data" : [ true, false, true ]
    }
  ],
  "outputs" : [
    {
      "name" : "output0"
    }
  ]
}"""
        status, headers, data = self.server.request("POST", "/v2/models/mymodel/infer", body,
                                                    {"Content-Type": "application/json",
                                                     "Host": "localhost:8000"})
        self.assertEqual(status, 200, data)
        out = json.loads(data)
        self.assertEqual(out["id"], "42")
        self.assertEqual(out["model_name"], "mymodel")
        self.assertEqual(out["outputs"], [{"name": "output0", "shape": [2, 2], "datatype": "FP32",
                                           "data": [1.0, 2.0, 3.0, 4.0]}])
        verbatim = body.replace(b"[ true, false, true ]", b"[ true ]")
        status, _, data = self.server.request("POST", "/v2/models/mymodel/infer", verbatim,
                                              {"Content-Type": "application/json"})
        self.assertEqual(status, 400, data)
        self.assertIn("input1", json.loads(data)["error"])

    def test_the_binary_data_example_request(self):
        # Triton's binary tensor data example: a JSON header naming binary_data_size per input,
        # then the raw bytes; output0 asked for as binary data, output1 as JSON.
        header = b"""{
  "model_name" : "mymodel",
  "inputs" : [
    {
      "name" : "input0",
      "shape" : [ 2, 2 ],
      "datatype" : "UINT32",
      "parameters" : {
        "binary_data_size" : 16
      }
    },
    {
      "name" : "input1",
      "shape" : [ 3 ],
      "datatype" : "BOOL",
      "parameters" : {
        "binary_data_size" : 3
      }
    }
  ],
  "outputs" : [
    {
      "name" : "output0",
      "parameters" : {
        "binary_data" : true
      }
    },
    {
      "name" : "output1"
    }
  ]
}"""
        input0 = np.array([[1, 2], [3, 4000000000]], dtype="<u4")
        input1 = np.array([True, False, True])
        body = header + input0.tobytes() + input1.tobytes()
        status, headers, data = self.server.request(
            "POST", "/v2/models/mymodel/infer", body,
            {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 200, data)
        n = int(headers["Inference-Header-Content-Length"])
        out = json.loads(data[:n])
        self.assertEqual(out["model_name"], "mymodel")
        o0, o1 = out["outputs"]
        self.assertEqual((o0["name"], o0["datatype"], o0["shape"], o0["parameters"]["binary_data_size"]),
                         ("output0", "FP32", [2, 2], 16))
        np.testing.assert_array_equal(np.frombuffer(data[n:], dtype="<f4").reshape(2, 2), input0.astype(np.float32))
        self.assertEqual(len(data), n + 16)
        self.assertEqual((o1["name"], o1["datatype"], o1["shape"], o1["data"]),
                         ("output1", "BOOL", [3], [False, True, False]))


class ServeTest(KServeExamples, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = os.path.join(WORK, "repo")
        make_repository(cls.repo)
        cls.server = Server(cls.repo, "--devices", "cpu:2", "--threads", "1", "--max-body-mb", "1")

    @classmethod
    def tearDownClass(cls):
        code, out, err = cls.server.stop()
        assert code == 0, (code, out, err)
        assert "stopped" in out, out

    def test_startup_lines_name_the_models_and_port(self):
        text = "".join(self.server.lines)
        self.assertIn("loaded model 'linear' version 1", text)
        self.assertIn("loaded model 'pair' version 3", text)
        self.assertIn("2 devices", text)

    def test_health_and_metadata(self):
        self.assertEqual(self.server.json("GET", "/v2/health/live"), (200, {"live": True}))
        self.assertEqual(self.server.json("GET", "/v2/health/ready"), (200, {"ready": True}))
        status, meta = self.server.json("GET", "/v2/models/linear")
        self.assertEqual(status, 200)
        self.assertEqual(meta["versions"], ["1"])
        self.assertEqual(meta["inputs"], [{"name": "x", "datatype": "FP32", "shape": [-1, 8]}])
        self.assertEqual(meta["outputs"], [{"name": "y", "datatype": "FP32", "shape": [-1, 4]}])
        status, meta = self.server.json("GET", "/v2/models/pair/versions/3")
        self.assertEqual(status, 200)
        self.assertEqual([i["name"] for i in meta["inputs"]], ["a", "b", "n"])
        self.assertEqual(self.server.json("GET", "/v2/models/pair/ready"), (200, {"name": "pair", "ready": True}))

    def test_json_inference_matches_numpy(self):
        x = RNG.standard_normal((3, 8)).astype(np.float32)
        status, out = self.server.json("POST", "/v2/models/linear/infer", json.loads(infer_json(x)))
        self.assertEqual(status, 200, out)
        self.assertEqual(out["id"], "r1")
        self.assertEqual(out["model_name"], "linear")
        (y,) = out["outputs"]
        self.assertEqual((y["name"], y["datatype"], y["shape"]), ("y", "FP32", [3, 4]))
        np.testing.assert_allclose(np.array(y["data"]).reshape(3, 4), reference(x), rtol=1e-5, atol=1e-5)

    def test_batch_buckets_and_bf16_configs(self):
        for rows in (1, 2, 3, 4):
            x = RNG.standard_normal((rows, 8)).astype(np.float32)
            status, out = self.server.json("POST", "/v2/models/linear_buckets/infer", json.loads(infer_json(x)))
            self.assertEqual(status, 200, out)
            self.assertEqual(out["outputs"][0]["shape"], [rows, 4])
            np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(rows, 4), reference(x),
                                       rtol=1e-5, atol=1e-5)
            status, out = self.server.json("POST", "/v2/models/linear_bf16/infer", json.loads(infer_json(x)))
            self.assertEqual(status, 200, out)
            # bf16 products (8 significant bits) summed in fp32: a few 1e-2 at most here.
            np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(rows, 4), reference(x),
                                       rtol=5e-2, atol=5e-2)

    def test_nested_json_data_is_taken_row_major(self):
        x = RNG.standard_normal((2, 8)).astype(np.float32)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 8], "data": x.tolist()}]}
        status, out = self.server.json("POST", "/v2/models/linear/infer", body)
        self.assertEqual(status, 200, out)
        np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(2, 4), reference(x), rtol=1e-5, atol=1e-5)

    def test_binary_inference_matches_numpy(self):
        x = RNG.standard_normal((5, 8)).astype(np.float32)
        body, headers = infer_binary([("x", "FP32", x)], outputs=["y"])
        status, rh, data = self.server.request("POST", "/v2/models/linear/infer", body, headers)
        self.assertEqual(status, 200, data)
        header, out = binary_outputs(rh, data)
        self.assertEqual(header["outputs"][0]["shape"], [5, 4])
        np.testing.assert_allclose(out["y"], reference(x), rtol=1e-5, atol=1e-5)

    def test_binary_output_of_a_json_request(self):
        x = RNG.standard_normal((1, 8)).astype(np.float32)
        status, rh, data = self.server.request("POST", "/v2/models/linear/infer", infer_json(x, binary_output=True))
        self.assertEqual(status, 200, data)
        _, out = binary_outputs(rh, data)
        np.testing.assert_allclose(out["y"], reference(x), rtol=1e-5, atol=1e-5)

    def test_several_inputs_outputs_and_integers(self):
        a = RNG.standard_normal((2, 3)).astype(np.float32)
        b = RNG.standard_normal((2, 3)).astype(np.float32)
        n = np.array([1, -7, 40000, 5, 0], dtype=np.int32)
        body = {"inputs": [{"name": "n", "datatype": "INT32", "shape": [5], "data": n.tolist()},
                           {"name": "b", "datatype": "FP32", "shape": [2, 3], "data": b.ravel().tolist()},
                           {"name": "a", "datatype": "FP32", "shape": [2, 3], "data": a.ravel().tolist()}],
                "outputs": [{"name": "k"}, {"name": "prod"}]}
        status, out = self.server.json("POST", "/v2/models/pair/infer", body)
        self.assertEqual(status, 200, out)
        self.assertEqual([o["name"] for o in out["outputs"]], ["k", "prod"])
        self.assertEqual(out["outputs"][0]["data"], (n * 3).tolist())
        np.testing.assert_allclose(np.array(out["outputs"][1]["data"]).reshape(2, 3), a * b, rtol=1e-6)
        # The same through binary tensors, every output.
        body, headers = infer_binary([("a", "FP32", a), ("b", "FP32", b), ("n", "INT32", n[:2])],
                                     outputs=["sum", "prod", "k"])
        status, rh, data = self.server.request("POST", "/v2/models/pair/infer", body, headers)
        self.assertEqual(status, 200, data)
        _, out = binary_outputs(rh, data)
        np.testing.assert_allclose(out["sum"], a + b, rtol=1e-6)
        np.testing.assert_array_equal(out["k"], n[:2] * 3)

    def test_concurrent_clients_are_batched_and_each_gets_its_rows(self):
        before = self.server.request("GET", "/metrics")[2].decode()
        errors, count = [], [0]
        lock = threading.Lock()

        def client(seed):
            rng = np.random.default_rng(seed)
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
            for i in range(8):
                x = rng.standard_normal((int(rng.integers(1, 4)), 8)).astype(np.float32)
                if i % 2:
                    body, headers = infer_binary([("x", "FP32", x)], outputs=["y"])
                else:
                    body, headers = infer_json(x), {}
                conn.request("POST", "/v2/models/linear/infer", body=body, headers=headers)
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    errors.append((r.status, data))
                    continue
                y = binary_outputs(dict(r.getheaders()), data)[1]["y"] if i % 2 else \
                    np.array(json.loads(data)["outputs"][0]["data"]).reshape(x.shape[0], 4)
                if not np.allclose(y, reference(x), rtol=1e-5, atol=1e-5):
                    errors.append(("wrong rows", seed, i))
                with lock:
                    count[0] += 1
            conn.close()

        threads = [threading.Thread(target=client, args=(s,)) for s in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(count[0], 96)
        after = self.server.request("GET", "/metrics")[2].decode()
        executions = metric(after, "kiln_inference_batch_size_count", model="linear") - \
            (metric(before, "kiln_inference_batch_size_count", model="linear") or 0)
        rows = metric(after, "kiln_inference_batch_size_sum", model="linear") - \
            (metric(before, "kiln_inference_batch_size_sum", model="linear") or 0)
        # 96 requests of 1..3 rows each, 12 clients at once, 20 ms batching window: far fewer
        # executions than requests, each within max_batch_size.
        self.assertLess(executions, 80)
        self.assertGreater(rows, executions)
        self.assertEqual(metric(after, "kiln_inference_batch_size_bucket", model="linear", le="8"),
                         metric(after, "kiln_inference_batch_size_count", model="linear"))
        # Both devices took batches (work stealing from the shared queue).
        self.assertGreater(metric(after, "kiln_device_busy_seconds_total", device="0"), 0)
        self.assertGreater(metric(after, "kiln_device_busy_seconds_total", device="1"), 0)

    def check_error(self, status, body, code, *words, path="/v2/models/linear/infer", headers=None):
        if isinstance(body, dict):
            body = json.dumps(body)
        s, h, data = self.server.request("POST", path, body, headers or {"Content-Type": "application/json"})
        self.assertEqual(s, code, data)
        message = json.loads(data)["error"]
        for w in words:
            self.assertIn(w, message)
        return message

    def test_errors_name_the_problem_and_the_server_keeps_serving(self):
        x = {"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.5] * 8}
        before = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_failures_total",
                        model="linear") or 0
        cases = [
            ({"inputs": [x]}, 404, ["unknown model 'nope'"], "/v2/models/nope/infer"),
            ({"inputs": [x]}, 404, ["no version '7'"], "/v2/models/linear/versions/7/infer"),
            ("{\"inputs\": [", 400, ["not valid JSON"], None),
            ("[1, 2]", 400, ["not a JSON object"], None),
            ({"inputs": []}, 400, ["no 'inputs'"], None),
            ({"inputs": [{**x, "name": "z"}]}, 400, ["no input 'z'", "inputs: x"], None),
            ({"inputs": [{**x, "datatype": "INT32", "data": [1] * 8}]}, 400, ["datatype INT32", "expects FP32"], None),
            ({"inputs": [{**x, "datatype": "STRANGE"}]}, 400, ["STRANGE"], None),
            ({"inputs": [{**x, "shape": [1, 7], "data": [0.5] * 7}]}, 400, ["shape [1,7]", "[-1,8]"], None),
            ({"inputs": [{**x, "shape": [8]}]}, 400, ["shape [8]"], None),
            ({"inputs": [{**x, "shape": [9, 8], "data": [0.5] * 72}]}, 400, ["batch 9", "1..8"], None),
            ({"inputs": [{**x, "data": [0.5] * 7}]}, 400, ["7 elements", "needs 8"], None),
            ({"inputs": [{**x, "data": ["a"] * 8}]}, 400, ["input 'x'"], None),
            ({"inputs": [x, x]}, 400, ["given twice"], None),
            ({"inputs": [x], "outputs": [{"name": "w"}]}, 400, ["no output 'w'"], None),
            ({"inputs": [{"name": "a", "datatype": "FP32", "shape": [2, 3], "data": [1.0] * 6}]}, 400,
             ["lacks input 'b'"], "/v2/models/pair/infer"),
        ]
        for body, code, words, path in cases:
            with self.subTest(words=words):
                self.check_error(None, body, code, *words, path=path or "/v2/models/linear/infer")
        # Binary bodies: truncated data, a header length past the body, a malformed header length.
        xb = np.ones((2, 8), dtype=np.float32)
        body, headers = infer_binary([("x", "FP32", xb)])
        self.check_error(None, body[:-5], 400, "binary_data_size 64", "59 bytes", headers=headers)
        self.check_error(None, body + b"xyz", 400, "3 bytes of binary data", headers=headers)
        self.check_error(None, body, 400, "Inference-Header-Content-Length",
                         headers={**headers, "Inference-Header-Content-Length": str(len(body) + 1)})
        self.check_error(None, body, 400, "not a byte count", headers={**headers, "Inference-Header-Content-Length": "x"})
        # A body over --max-body-mb 1, and an unknown endpoint.
        self.check_error(None, b"{" * (1 << 20 + 1), 413, "larger than")
        self.check_error(None, "{}", 404, "no such endpoint", path="/v2/modelz")
        after = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_failures_total",
                       model="linear")
        self.assertGreaterEqual(after - before, 15)
        # Still serving, correctly.
        self.test_json_inference_matches_numpy()

    def test_a_request_whose_timeout_passes_in_the_queue_gets_503(self):
        # One row waits out linear's 20 ms batching window, far beyond a 1 us timeout.
        x = RNG.standard_normal((1, 8)).astype(np.float32)
        body = json.loads(infer_json(x))
        body["parameters"] = {"timeout": 1}
        s, h, data = self.server.request("POST", "/v2/models/linear/infer", json.dumps(body))
        self.assertEqual(s, 503, data)
        self.assertEqual(h.get("Retry-After"), "1")
        self.assertIn("timed out after 1 us", json.loads(data)["error"])
        body["parameters"] = {"timeout": 10000000}
        status, out = self.server.json("POST", "/v2/models/linear/infer", body)
        self.assertEqual(status, 200, out)
        text = self.server.request("GET", "/metrics")[2].decode()
        self.assertGreaterEqual(metric(text, "kiln_inference_timeouts_total", model="linear"), 1)

    def test_a_request_whose_timeout_passes_while_executing_gets_503_at_once(self):
        def count(name):
            return metric(self.server.request("GET", "/metrics")[2].decode(), name, model="slow") or 0

        before = {n: count(n) for n in ("kiln_inference_executions_total", "kiln_inference_timeouts_total",
                                        "kiln_inference_requests_total")}
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [1.0]}],
                "parameters": {"timeout": 50000}}
        s, h, data = self.server.request("POST", "/v2/models/slow/infer", json.dumps(body))
        self.assertEqual(s, 503, data)
        self.assertEqual(h.get("Retry-After"), "1")
        self.assertIn("timed out after 50000 us", json.loads(data)["error"])
        # The answer came before the execution ended: it did run (the model's queue was empty
        # and a worker idle), and when it ends its late result counts as a timeout, not a request.
        deadline = time.time() + 30
        while count("kiln_inference_executions_total") == before["kiln_inference_executions_total"]:
            self.assertLess(time.time(), deadline, "the execution never ended")
            time.sleep(0.05)
        self.assertEqual(count("kiln_inference_timeouts_total"), before["kiln_inference_timeouts_total"] + 1)
        self.assertEqual(count("kiln_inference_requests_total"), before["kiln_inference_requests_total"])
        # Without a timeout the same request is answered with the sum.
        del body["parameters"]
        status, out = self.server.json("POST", "/v2/models/slow/infer", body)
        self.assertEqual(status, 200, out)
        w = SLOW_W.astype(np.float64)
        row = np.ones((1, 1536)) @ w
        np.testing.assert_allclose(out["outputs"][0]["data"][0] if isinstance(out["outputs"][0]["data"], list)
                                   else out["outputs"][0]["data"], 1536 * (row @ w).sum(),
                                   rtol=1e-4, atol=1e-4 * 1536 * (np.abs(row) @ np.abs(w)).sum())

    def test_a_full_queue_refuses_with_503_and_loses_nothing(self):
        xs = [RNG.standard_normal((1, 8)).astype(np.float32) for _ in range(8)]
        results = [None] * len(xs)

        def client(i):
            results[i] = self.server.request("POST", "/v2/models/narrow/infer", infer_json(xs[i]))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        statuses = [r[0] for r in results]
        self.assertEqual(sorted(set(statuses)), [200, 503], statuses)
        for x, (status, headers, data) in zip(xs, results):
            if status == 200:
                y = np.array(json.loads(data)["outputs"][0]["data"]).reshape(1, 4)
                np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-5)
            else:
                self.assertEqual(headers.get("Retry-After"), "1")
                self.assertIn("max_queue_size", json.loads(data)["error"])
        text = self.server.request("GET", "/metrics")[2].decode()
        self.assertEqual(metric(text, "kiln_inference_rejected_total", model="narrow"), statuses.count(503))
        self.assertEqual(metric(text, "kiln_inference_requests_total", model="narrow"), statuses.count(200))

    def test_load_and_unload(self):
        shutil.copytree(os.path.join(self.repo, "linear"), os.path.join(self.repo, "linear_b"))
        x = RNG.standard_normal((2, 8)).astype(np.float32)
        self.check_error(None, infer_json(x), 400, "not loaded", path="/v2/models/linear_b/infer")
        self.assertEqual(self.server.json("POST", "/v2/repository/models/linear_b/load")[0], 200)
        status, index = self.server.json("POST", "/v2/repository/index")
        self.assertIn({"name": "linear_b", "state": "READY", "version": "1"}, index)
        status, out = self.server.json("POST", "/v2/models/linear_b/infer", json.loads(infer_json(x)))
        self.assertEqual(status, 200, out)
        np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(2, 4), reference(x), rtol=1e-5, atol=1e-5)
        self.assertEqual(self.server.json("POST", "/v2/repository/models/linear_b/unload")[0], 200)
        self.assertEqual(self.server.json("GET", "/v2/models/linear_b/ready")[0], 400)
        self.check_error(None, infer_json(x), 400, "not loaded", path="/v2/models/linear_b/infer")
        self.assertEqual(self.server.json("POST", "/v2/repository/models/linear_b/unload")[0], 404)
        self.assertEqual(self.server.json("POST", "/v2/repository/models/absent/load")[0], 404)
        self.assertEqual(self.server.json("GET", "/v2/models/absent/ready")[0], 404)
        # A model whose config is wrong does not load, and says why.
        with open(os.path.join(self.repo, "linear_b", "config.json"), "w") as f:
            json.dump({"max_batch_size": 8, "max_delay": 5}, f)
        status, body = self.server.json("POST", "/v2/repository/models/linear_b/load")
        self.assertEqual(status, 400)
        self.assertIn("unknown field 'max_delay'", body["error"])
        shutil.rmtree(os.path.join(self.repo, "linear_b"))

    def test_metrics_count_requests(self):
        text = self.server.request("GET", "/metrics")[2].decode()
        for family in ["kiln_inference_requests_total", "kiln_inference_failures_total", "kiln_inference_queue_seconds_total",
                       "kiln_inference_compute_seconds_total", "kiln_inference_batch_size", "kiln_device_busy_seconds_total"]:
            self.assertIn(f"# TYPE {family} ", text)
        n = metric(text, "kiln_inference_requests_total", model="pair") or 0
        a = np.zeros((2, 3), dtype=np.float32)
        body, headers = infer_binary([("a", "FP32", a), ("b", "FP32", a), ("n", "INT32", np.zeros(1, np.int32))])
        self.assertEqual(self.server.request("POST", "/v2/models/pair/infer", body, headers)[0], 200)
        text = self.server.request("GET", "/metrics")[2].decode()
        self.assertEqual(metric(text, "kiln_inference_requests_total", model="pair"), n + 1)
        self.assertGreater(metric(text, "kiln_inference_compute_seconds_total", model="pair"), 0)

    def test_memory_statistics_appear_and_move(self):
        def memory(text, name):
            return sum(float(v) for v in re.findall(rf'^{name}{{device="\d+"}} (\S+)$', text, re.M))

        shutil.copytree(os.path.join(self.repo, "linear"), os.path.join(self.repo, "linear_mem"))
        try:
            self.assertEqual(self.server.json("POST", "/v2/repository/models/linear_mem/load")[0], 200)
            before = self.server.request("GET", "/metrics")[2].decode()
            for family in ("kiln_device_memory_in_use_bytes", "kiln_device_memory_cached_bytes",
                           "kiln_device_memory_peak_bytes", "kiln_device_memory_reserved_bytes"):
                self.assertIn(f"# TYPE {family} gauge", before)
                self.assertIsNotNone(metric(before, family, device="1"), family)
            self.assertEqual(metric(before, "kiln_model_arena_peak_bytes", model="linear_mem"), 0)
            self.assertEqual(metric(before, "kiln_model_planned_bytes", model="linear_mem"), 0)
            # The new model's workers have no device buffers yet: its first batches allocate
            # them (8 rows of x, 8 of y), and its executions take activation memory.
            for _ in range(3):
                x = RNG.standard_normal((8, 8)).astype(np.float32)
                status, out = self.server.json("POST", "/v2/models/linear_mem/infer", json.loads(infer_json(x)))
                self.assertEqual(status, 200, out)
            after = self.server.request("GET", "/metrics")[2].decode()
            self.assertGreater(metric(after, "kiln_model_arena_peak_bytes", model="linear_mem"), 0)
            self.assertGreaterEqual(metric(after, "kiln_model_arena_held_bytes", model="linear_mem"), 0)
            self.assertGreater(memory(after, "kiln_device_memory_in_use_bytes"),
                               memory(before, "kiln_device_memory_in_use_bytes"))
            self.assertGreaterEqual(memory(after, "kiln_device_memory_peak_bytes"),
                                    memory(after, "kiln_device_memory_in_use_bytes"))
            # Unloading frees the workers' buffers (back to the devices' caches) and drops the series.
            self.assertEqual(self.server.json("POST", "/v2/repository/models/linear_mem/unload")[0], 200)
            gone = self.server.request("GET", "/metrics")[2].decode()
            self.assertLess(memory(gone, "kiln_device_memory_in_use_bytes"), memory(after, "kiln_device_memory_in_use_bytes"))
            self.assertIsNone(metric(gone, "kiln_model_arena_peak_bytes", model="linear_mem"))
        finally:
            shutil.rmtree(os.path.join(self.repo, "linear_mem"))

    def test_loadgen_counts_what_the_server_counts(self):
        url = f"http://127.0.0.1:{self.server.port}"
        before = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_requests_total",
                        model="pair") or 0
        r = subprocess.run([KILN, "loadgen", url, "--model", "pair", "--concurrency", "2", "--duration", "0.5",
                            "--json"], capture_output=True, text=True, timeout=60, env=ENV)
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        after = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_requests_total", model="pair")
        self.assertGreater(out["ok"], 0)
        self.assertEqual(out["failed"], {})
        self.assertEqual(after - before, out["ok"])
        self.assertLessEqual(out["latency_ms"]["p50"], out["latency_ms"]["p99"])
        r = subprocess.run([KILN, "loadgen", url, "--model", "nope", "--duration", "0.5"], capture_output=True,
                           text=True, timeout=60, env=ENV)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unknown model 'nope'", r.stderr)
        r = subprocess.run([KILN, "loadgen", url, "--model", "pair", "--concurrency", "0"], capture_output=True,
                           text=True, timeout=60, env=ENV)
        self.assertEqual(r.returncode, 2, r.stderr)

    def test_loadgen_sends_the_inputs_given_as_npy_files(self):
        url = f"http://127.0.0.1:{self.server.port}"
        paths = {}
        for name, array in (("rows3", np.ones((3, 8), np.float32)), ("rows9", np.ones((9, 8), np.float32)),
                            ("ints", np.ones((3, 8), np.int32))):
            paths[name] = os.path.join(WORK, f"loadgen_{name}.npy")
            np.save(paths[name], array)

        def loadgen(*args):
            return subprocess.run([KILN, "loadgen", url, "--model", "linear", "--duration", "0.3", "--json", *args],
                                  capture_output=True, text=True, timeout=60, env=ENV)

        before = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_batch_size_sum",
                        model="linear") or 0
        r = loadgen("--input", f"x={paths['rows3']}")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertGreater(out["ok"], 0)
        self.assertEqual(out["failed"], {})
        # Every request carried the file's 3 rows (random data would be one row).
        after = metric(self.server.request("GET", "/metrics")[2].decode(), "kiln_inference_batch_size_sum",
                       model="linear")
        self.assertEqual(after - before, 3 * out["ok"])
        # 9 rows are beyond linear's max_batch_size 8: the server refuses each request.
        r = loadgen("--input", f"x={paths['rows9']}")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(list(json.loads(r.stdout)["failed"]), ["HTTP 400"])
        for args, code, words in ((["--input", f"x={paths['ints']}"], 1, "holds INT32, the model's input is FP32"),
                                  (["--input", f"z={paths['rows3']}"], 1, "no input 'z' (inputs: x)"),
                                  (["--input", "x"], 2, "not NAME=FILE.npy"),
                                  (["--input", f"x={WORK}/absent.npy"], 1, "--input x")):
            with self.subTest(args=args):
                r = loadgen(*args)
                self.assertEqual(r.returncode, code, r.stderr)
                self.assertIn(words, r.stderr)


class StaticSchedulingTest(unittest.TestCase):
    def test_static_scheduling_uses_every_device_and_answers_correctly(self):
        repo = os.path.join(WORK, "repo_static")
        make_repository(repo)
        server = Server(repo, "--devices", "2", "--threads", "1", "--scheduling", "static")
        try:
            for i in range(4):
                x = RNG.standard_normal((i + 1, 8)).astype(np.float32)
                status, out = server.json("POST", "/v2/models/linear/infer", json.loads(infer_json(x)))
                self.assertEqual(status, 200, out)
                np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(i + 1, 4), reference(x),
                                           rtol=1e-5, atol=1e-5)
            text = server.request("GET", "/metrics")[2].decode()
            # Round-robin: two requests went to each device, one after another.
            self.assertGreater(metric(text, "kiln_device_busy_seconds_total", device="0"), 0)
            self.assertGreater(metric(text, "kiln_device_busy_seconds_total", device="1"), 0)
            self.assertIn("static scheduling", "".join(server.lines))
        finally:
            self.assertEqual(server.stop()[0], 0)


class PrefetchTest(unittest.TestCase):
    """One device, one worker, the slow model (hundreds of ms an execution) and 4 clients at
    once: the requests that arrive while one executes are staged then (prefetched) with
    prefetch on, never with it off; the answers are the same either way."""

    def run_clients(self, *args):
        repo = os.path.join(WORK, "repo_prefetch")
        if not os.path.isdir(repo):
            make_repository(repo)
        server = Server(repo, "--devices", "1", "--threads", "1", *args)
        try:
            results, errors = [], []

            def client(value):
                body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 1], "data": [value]}]}
                status, out = server.json("POST", "/v2/models/slow/infer", body)
                if status != 200:
                    errors.append((status, out))
                else:
                    results.append((value, float(np.ravel(out["outputs"][0]["data"])[0])))

            threads = [threading.Thread(target=client, args=(float(v),)) for v in (1, 2, 3, 4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            text = server.request("GET", "/metrics")[2].decode()
            return sorted(results), metric(text, "kiln_inference_prefetched_total", model="slow"), server.lines
        finally:
            self.assertEqual(server.stop()[0], 0)

    def test_prefetch_stages_queued_requests_during_an_execution_and_changes_no_answer(self):
        on, prefetched_on, lines = self.run_clients()
        self.assertIn("prefetch on", "".join(lines))
        off, prefetched_off, lines = self.run_clients("--prefetch", "off")
        self.assertIn("prefetch off", "".join(lines))
        # y is linear in x: each answer is x times the answer for 1, with or without prefetch.
        self.assertEqual([v for v, _ in on], [1, 2, 3, 4])
        for (v, y_on), (_, y_off) in zip(on, off):
            self.assertEqual(y_on, y_off)
            self.assertAlmostEqual(y_on, v * on[0][1], delta=1e-4 * abs(v * on[0][1]))
        # 4 requests, one executing at a time: the last three arrived while one executed.
        self.assertGreaterEqual(prefetched_on, 1)
        self.assertEqual(prefetched_off, 0)


def thread_affinity(pid):
    """{thread id: (name, Cpus_allowed_list)} of every thread of `pid`, from /proc."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                cpus = re.search(r"^Cpus_allowed_list:\s*(\S+)$", f.read(), re.M).group(1)
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        out[tid] = (name, cpus)
    return out


@unittest.skipIf(len(os.sched_getaffinity(0)) < 2, "core pinning needs two cores")
class PinningTest(unittest.TestCase):
    def test_http_and_inference_threads_run_on_the_cores_asked(self):
        cores = sorted(os.sched_getaffinity(0))
        http, inference = str(cores[-1]), str(cores[0])
        repo = os.path.join(WORK, "repo_pin")
        make_repository(repo)
        server = Server(repo, "--devices", "1", "--threads", "1", "--http-threads", "3",
                        "--http-cores", http, "--inference-cores", inference)
        try:
            self.assertIn(f"HTTP threads on cores {http}, inference on cores {inference}", "".join(server.lines))
            x = RNG.standard_normal((2, 8)).astype(np.float32)
            status, out = server.json("POST", "/v2/models/linear/infer", json.loads(infer_json(x)))
            self.assertEqual(status, 200, out)
            # A model loaded over HTTP gets its workers from an HTTP thread: still inference cores.
            self.assertEqual(server.json("POST", "/v2/repository/models/pair/load", {})[0], 200)
            models = len([d for d in os.listdir(repo) if os.path.isdir(os.path.join(repo, d))])
            # Threads name themselves once running (a new thread carries its creator's name
            # until then), and the reloaded version's old workers end asynchronously: sample
            # until the counts below are reached or 10 s pass, then check what was seen.
            deadline = time.monotonic() + 10
            while True:
                threads = thread_affinity(server.proc.pid)
                names = [n for n, _ in threads.values()]
                if (names.count("kiln-http") == 3 + 1 and names.count("kiln-worker") == 2 * (models + 1)) \
                        or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            http_threads = [c for n, c in threads.values() if n == "kiln-http"]
            workers = [c for n, c in threads.values() if n == "kiln-worker"]
            # The 3 connection threads and the overflow thread that answers 503 beyond them.
            self.assertEqual(len(http_threads), 3 + 1, threads)
            self.assertEqual(set(http_threads), {http}, threads)
            # One worker per model instance on the device (pair has 2, and was loaded twice: the
            # old version's workers are gone), each with its prefetch stream's thread, which
            # inherits its name and cores.
            self.assertEqual(len(workers), 2 * (models + 1), threads)
            self.assertEqual(set(workers), {inference}, threads)
            # The main thread (the accept loop) on the HTTP cores; nothing runs on both sides.
            self.assertEqual(threads[str(server.proc.pid)][1], http, threads)
            for tid, (name, cpus) in threads.items():
                self.assertIn(cpus, (http, inference), (tid, name, cpus, names))
        finally:
            self.assertEqual(server.stop()[0], 0)

    def test_without_pinning_every_thread_may_run_anywhere(self):
        repo = os.path.join(WORK, "repo_pin")
        make_repository(repo)
        server = Server(repo, "--devices", "1", "--threads", "1", "--http-threads", "2")
        try:
            threads = thread_affinity(server.proc.pid)
            allowed = threads[str(server.proc.pid)][1]  # the main thread: the process's cores
            self.assertEqual(allowed, thread_affinity(os.getpid())[str(os.getpid())][1])
            for name, cpus in threads.values():
                if name in ("kiln-http", "kiln-worker"):
                    self.assertEqual(cpus, allowed, threads)
        finally:
            self.assertEqual(server.stop()[0], 0)


class LogFileTest(unittest.TestCase):
    def test_the_log_file_rotates_by_size_and_keeps_k_files(self):
        repo = os.path.join(WORK, "repo_log")
        make_repository(repo)
        logs = os.path.join(WORK, "logs")
        shutil.rmtree(logs, ignore_errors=True)
        os.makedirs(logs)
        path = os.path.join(logs, "serve.log")
        server = Server(repo, "--devices", "1", "--log-file", path, "--log-max-bytes", "2048", "--log-keep", "2")
        try:
            # About 75 bytes a request line: 300 requests are 22 KB, 11 rotations of 2 KB.
            for i in range(150):
                self.assertEqual(server.request("GET", "/v2/health/live")[0], 200)
                self.assertEqual(server.request("GET", f"/n/{i}")[0], 404)
            status, _, _ = server.request("GET", "/no/such/%01path")  # decoded by httplib
            self.assertEqual(status, 404)
        finally:
            self.assertEqual(server.stop()[0], 0)
        self.assertEqual(sorted(os.listdir(logs)), ["serve.log", "serve.log.1", "serve.log.2"])
        lines = []
        for name in ("serve.log.2", "serve.log.1", "serve.log"):
            with open(os.path.join(logs, name), "rb") as f:
                data = f.read()
            self.assertLessEqual(len(data), 2048, name)
            self.assertTrue(data.endswith(b"\n"), name)
            lines += data.decode("ascii").splitlines()
        # Whole lines, oldest first, each stamped; the latest requests kept, the start rotated away.
        for line in lines:
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
        self.assertTrue(any("GET /v2/health/live 200" in l for l in lines))
        # The last request, then SIGTERM's line and "stopped"; the request's line is written after its
        # response (below), so SIGTERM's may come before it.
        self.assertTrue(any("GET /no/such/\\x01path 404" in l for l in lines[-3:-1]), lines[-3:])
        self.assertIn("kiln serve: stopped", lines[-1])
        self.assertFalse(any("listening on" in l for l in lines))
        numbers = [int(re.search(r"GET /n/(\d+) 404", l).group(1)) for l in lines if "GET /n/" in l]
        # None lost between the files kept. Sorted: cpp-httplib logs a request once its response is
        # sent, on the thread that served it, so the next request's line may come first (seen once
        # in CI: ..., 144, 146, 145, 147).
        self.assertEqual(sorted(numbers), list(range(min(numbers), 150)))
        self.assertGreater(min(numbers), 0)

    def test_bad_log_options_are_errors(self):
        repo = os.path.join(WORK, "repo_log")
        for args, words in ((["--log-max-bytes", "10"], "at least 1024"), (["--log-keep", "0"], "1..100")):
            r = subprocess.run([KILN, "serve", "--model-repository", repo, "--http-port", "0", "--log-file",
                                os.path.join(WORK, "bad.log"), *args], capture_output=True, text=True, env=ENV,
                               timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(words, r.stderr)


class SlowClientTest(unittest.TestCase):
    def test_silent_and_stalled_connections_are_cut_and_a_valid_client_is_answered(self):
        repo = os.path.join(WORK, "repo_slow_clients")
        make_repository(repo)
        # 2 connection threads, a 1 s read timeout: 6 connections that send nothing, or stop
        # after half a request line, take every thread; each is closed after 1 s of silence.
        server = Server(repo, "--devices", "1", "--http-threads", "2", "--http-read-timeout", "1")
        idle = []
        try:
            for i in range(6):
                s = socket.create_connection(("127.0.0.1", server.port))
                if i % 2:
                    s.sendall(b"POST /v2/models/linear/in")
                idle.append(s)
            time.sleep(0.2)
            start = time.monotonic()
            x = RNG.standard_normal((1, 8)).astype(np.float32)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/v2/models/linear/infer", body=infer_json(x))
            r = conn.getresponse()
            out = json.loads(r.read())
            waited = time.monotonic() - start
            conn.close()
            self.assertEqual(r.status, 200, out)
            np.testing.assert_allclose(np.array(out["outputs"][0]["data"]).reshape(1, 4), reference(x), rtol=1e-5,
                                       atol=1e-5)
            # The 6 take the 2 threads 1 s at a time: 3 s at most, then the valid one is served.
            self.assertLess(waited, 6.0)
            # The stalled and silent ones were closed by the server (recv sees the end).
            for s in idle:
                s.settimeout(5)
                try:
                    while s.recv(4096):  # an error response first, perhaps; then the end
                        pass
                except ConnectionResetError:
                    pass
                except socket.timeout:
                    self.fail("a silent or stalled connection was still open 5 s later")
        finally:
            for s in idle:
                s.close()
            self.assertEqual(server.stop()[0], 0)

    def assert_linear_answer(self, status, data, x):
        """A 200 whose output is the linear model's on x (NumPy)."""
        self.assertEqual(status, 200, data)
        np.testing.assert_allclose(np.array(json.loads(data)["outputs"][0]["data"]).reshape(1, 4), reference(x),
                                   rtol=1e-5, atol=1e-5)

    def test_a_client_trickling_bytes_is_cut_at_the_request_deadline(self):
        repo = os.path.join(WORK, "repo_trickle")
        make_repository(repo)
        # One connection thread; silence is allowed for 5 s, but a request must be whole 2 s
        # after its first byte. A byte every 0.3 s never meets the read timeout.
        server = Server(repo, "--devices", "1", "--http-threads", "1", "--http-read-timeout", "5",
                        "--http-request-timeout", "2")
        trickler = socket.create_connection(("127.0.0.1", server.port))
        try:
            request = b"POST /v2/models/linear/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + b"{" * 1000
            start = time.monotonic()
            cut_after = None
            for i in range(len(request)):
                try:
                    trickler.sendall(request[i:i + 1])
                except (BrokenPipeError, ConnectionResetError):
                    cut_after = time.monotonic() - start
                    break
                trickler.settimeout(0.3)
                try:
                    if trickler.recv(4096) == b"":
                        cut_after = time.monotonic() - start
                        break
                except socket.timeout:
                    pass
                if time.monotonic() - start > 10:
                    break
            self.assertIsNotNone(cut_after, "a client trickling a byte every 0.3 s kept its connection 10 s")
            self.assertGreater(cut_after, 1.5)
            self.assertLess(cut_after, 4.0)
            # The one thread is free again: a valid request is answered, right.
            x = RNG.standard_normal((1, 8)).astype(np.float32)
            self.assert_linear_answer(*server.request("POST", "/v2/models/linear/infer", infer_json(x))[::2], x)
        finally:
            trickler.close()
            self.assertEqual(server.stop()[0], 0)

    def test_connections_beyond_the_waiting_bound_get_503_at_once(self):
        repo = os.path.join(WORK, "repo_busy")
        make_repository(repo)
        # One thread, one waiting place: A holds the thread (silent, 10 s read timeout), B
        # waits, C finds no place and is answered 503 at once; once A leaves, B is served.
        server = Server(repo, "--devices", "1", "--http-threads", "1", "--http-max-waiting", "1",
                        "--http-read-timeout", "10")
        a = socket.create_connection(("127.0.0.1", server.port))
        try:
            time.sleep(0.3)
            x = RNG.standard_normal((1, 8)).astype(np.float32)
            b_result = {}

            def client_b():
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
                conn.request("POST", "/v2/models/linear/infer", body=infer_json(x))
                r = conn.getresponse()
                b_result["status"], b_result["data"] = r.status, r.read()
                conn.close()

            b = threading.Thread(target=client_b)
            b.start()
            time.sleep(0.3)
            start = time.monotonic()
            status, headers, data = server.request("POST", "/v2/models/linear/infer", infer_json(x))
            self.assertLess(time.monotonic() - start, 2.0)
            self.assertEqual(status, 503, data)
            self.assertEqual(headers.get("Retry-After"), "1")
            self.assertIn("--http-max-waiting", json.loads(data)["error"])
            self.assertTrue(b.is_alive(), "B should still be waiting for the thread A holds")
            a.close()
            b.join(30)
            self.assertIn("status", b_result, "B was not answered")
            self.assert_linear_answer(b_result["status"], b_result["data"], x)
            status, _, metrics = server.request("GET", "/metrics")
            self.assertRegex(metrics.decode(), r'kiln_http_responses_total\{code="5xx"\} 1\b')
        finally:
            a.close()
            self.assertEqual(server.stop()[0], 0)

    def test_bad_limits_are_usage_errors(self):
        for args in (["--http-request-timeout", "0"], ["--http-max-waiting", "-1"]):
            r = subprocess.run([KILN, "serve", "--model-repository", WORK, *args], capture_output=True, text=True,
                               timeout=60, env=ENV)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(args[0], r.stderr)


class ShutdownTest(unittest.TestCase):
    def test_sigterm_answers_the_queued_requests_then_exits(self):
        # A batching window of 10 s: the requests are still queued when SIGTERM comes, and
        # shutting down runs them at once instead of dropping them.
        repo = os.path.join(WORK, "repo_drain")
        shutil.rmtree(repo, ignore_errors=True)
        save(linear_model(), repo, "slow", "1", "model.onnx")
        with open(os.path.join(repo, "slow", "config.json"), "w") as f:
            json.dump({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 10000000}}, f)
        server = Server(repo)
        xs = [RNG.standard_normal((1, 8)).astype(np.float32) for _ in range(3)]
        results = [None] * 3

        def client(i):
            results[i] = server.request("POST", "/v2/models/slow/infer", infer_json(xs[i]))

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.5)  # the three are queued by now
        start = time.time()
        code, out, err = server.stop()
        for t in threads:
            t.join()
        self.assertEqual(code, 0, err)
        self.assertIn("SIGTERM", err)
        self.assertLess(time.time() - start, 9)  # not the 10 s window
        for x, (status, _, data) in zip(xs, results):
            self.assertEqual(status, 200, data)
            y = np.array(json.loads(data)["outputs"][0]["data"]).reshape(1, 4)
            np.testing.assert_allclose(y, reference(x), rtol=1e-5, atol=1e-5)


class CommandTest(unittest.TestCase):
    def run_kiln(self, *args):
        return subprocess.run([KILN, "serve", *args], capture_output=True, text=True, timeout=60, env=ENV)

    def test_missing_repository_is_an_error(self):
        r = self.run_kiln("--model-repository", os.path.join(WORK, "no_such_dir"), "--http-port", "0")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("is not a directory", r.stderr)

    def test_bad_options_are_usage_errors(self):
        for args in (["--http-port", "70000"], ["--scheduling", "random"], ["--devices", "gpu:x"], ["--threads", "0"]):
            with self.subTest(args=args):
                r = self.run_kiln("--model-repository", WORK, *args)
                self.assertEqual(r.returncode, 2, r.stderr)

    def test_a_bad_model_stops_the_start(self):
        repo = os.path.join(WORK, "repo_bad")
        shutil.rmtree(repo, ignore_errors=True)
        os.makedirs(os.path.join(repo, "empty", "1"))
        r = self.run_kiln("--model-repository", repo, "--http-port", "0")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("model 'empty' has no version directory", r.stderr)

    def test_a_port_in_use_is_an_error(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        try:
            repo = os.path.join(WORK, "repo_empty")
            os.makedirs(repo, exist_ok=True)
            r = self.run_kiln("--model-repository", repo, "--http-port", str(s.getsockname()[1]))
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("cannot listen on 127.0.0.1:", r.stderr)
        finally:
            s.close()


CHAIN_LENGTH = 100
# An orthogonal matrix: a hundred products by it keep the rows' norms, so fp32 stays accurate.
CHAIN_W = np.linalg.qr(RNG.standard_normal((1024, 1024)))[0].astype(np.float32)


def chain_model():
    """y = x @ W @ W ... (100 MatMuls), x float[N, 1024]: its cost is proportional to N, so one
    model (one worker) runs a long execution (N = 256, about 0.5 GFLOP a node) and a short one."""
    nodes = [helper.make_node("MatMul", [f"h{i}" if i else "x", "W"], [f"h{i + 1}" if i + 1 < CHAIN_LENGTH else "y"])
             for i in range(CHAIN_LENGTH)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1024])],
                          [numpy_helper.from_array(CHAIN_W, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class InterruptTest(unittest.TestCase):
    """An execution whose every request has passed its timeout is stopped between two nodes,
    so that the worker takes the next request instead of finishing work nobody waits for."""

    # Rows of the long request's output checked against NumPy (each row of a MatMul chain
    # depends on its input row only; NumPy's 100 products of 256 rows would take longer than
    # the test).
    CHECKED_ROWS = [0, 1, 128, 255]

    def chain_reference(self, x):
        y = x.astype(np.float64)
        w = CHAIN_W.astype(np.float64)
        for _ in range(CHAIN_LENGTH):
            y = y @ w
        return y

    def infer(self, server, x, timeout_us=None):
        body, headers = infer_binary([("x", "FP32", x)], outputs=["y"])
        if timeout_us is not None:
            n = int(headers["Inference-Header-Content-Length"])
            header = json.loads(body[:n])
            header["parameters"] = {"timeout": timeout_us}
            h = json.dumps(header).encode()
            body, headers = h + body[n:], {**headers, "Inference-Header-Content-Length": str(len(h))}
        start = time.monotonic()
        status, h, data = server.request("POST", "/v2/models/chain/infer", body, headers)
        return status, h, data, time.monotonic() - start

    def test_an_execution_whose_requests_all_timed_out_stops_and_frees_the_worker(self):
        repo = os.path.join(WORK, "repo_interrupt")
        shutil.rmtree(repo, ignore_errors=True)
        save(chain_model(), repo, "chain", "1", "model.onnx")
        server = Server(repo, "--devices", "1", "--threads", "1")
        try:
            def count(name):
                return metric(server.request("GET", "/metrics")[2].decode(), name, model="chain") or 0

            big = RNG.standard_normal((256, 1024)).astype(np.float32)
            small = RNG.standard_normal((1, 1024)).astype(np.float32)
            # The whole long execution, once for its first-run costs and once timed.
            for _ in range(2):
                status, h, data, full_s = self.infer(server, big)
                self.assertEqual(status, 200, data)
            rows = self.CHECKED_ROWS
            big_reference = self.chain_reference(big[rows])
            np.testing.assert_allclose(binary_outputs(h, data)[1]["y"][rows], big_reference, rtol=1e-4, atol=1e-4)
            before = {n: count(n) for n in ("kiln_inference_interrupted_total", "kiln_inference_executions_total",
                                            "kiln_inference_timeouts_total", "kiln_inference_requests_total")}
            # A timeout of a tenth of the execution: answered 503 at it, and the execution stops at
            # the next node; the short request after it is answered (right) long before the long
            # execution would have ended. Without the interruption it would wait for it: at least
            # 0.9 of full_s after the 503.
            timeout_s = full_s / 10
            status, h, data, first_s = self.infer(server, big, timeout_us=int(timeout_s * 1e6))
            self.assertEqual(status, 503, data)
            self.assertIn("timed out", json.loads(data)["error"])
            status, h, data, second_s = self.infer(server, small, timeout_us=60_000_000)
            self.assertEqual(status, 200, data)
            np.testing.assert_allclose(binary_outputs(h, data)[1]["y"], self.chain_reference(small), rtol=1e-4,
                                       atol=1e-4)
            self.assertLess(first_s + second_s, full_s / 2,
                            f"the short request was answered {first_s + second_s:.3f} s after the long one was sent, "
                            f"whose whole execution takes {full_s:.3f} s")
            self.assertEqual(count("kiln_inference_interrupted_total"), before["kiln_inference_interrupted_total"] + 1)
            self.assertEqual(count("kiln_inference_executions_total"), before["kiln_inference_executions_total"] + 2)
            self.assertEqual(count("kiln_inference_timeouts_total"), before["kiln_inference_timeouts_total"] + 1)
            self.assertEqual(count("kiln_inference_requests_total"), before["kiln_inference_requests_total"] + 1)
            # The worker's stream is usable again: a long execution runs to its end, right.
            status, h, data, _ = self.infer(server, big, timeout_us=60_000_000)
            self.assertEqual(status, 200, data)
            np.testing.assert_allclose(binary_outputs(h, data)[1]["y"][rows], big_reference, rtol=1e-4, atol=1e-4)
        finally:
            server.stop()


if __name__ == "__main__":
    KILN = sys.argv[1]
    WORK = sys.argv[2]
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
