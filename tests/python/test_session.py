"""kiln.InferenceSession: ONNX Runtime's API, misuse errors, zero-copy outputs, async,
threads x sessions, no leaks; kiln.compile and kiln.inspect."""

import concurrent.futures
import gc
import os
import resource
import threading
import time

import numpy as np
import pytest

import kiln
from conftest import add_chain_model


def test_version():
    assert kiln.__version__.count(".") == 2


def test_io_description(tiny_model):
    with kiln.InferenceSession(tiny_model) as sess:
        (x,), (y,) = sess.get_inputs(), sess.get_outputs()
        assert (x.name, x.shape, x.type, x.dtype) == ("x", [1, 16], "tensor(float)", np.dtype(np.float32))
        assert (y.name, y.shape) == ("y", [1, 16])


def test_run_and_output_owns_kiln_buffer(tiny_model):
    with kiln.InferenceSession(tiny_model) as sess:
        x = np.arange(16, dtype=np.float32).reshape(1, 16)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, x + 1)
        # No copy: the array views the device buffer the model wrote, owned by a capsule.
        assert not y.flags.owndata and type(y.base).__name__ == "PyCapsule"
        assert sess.run(["y"], {"x": x})[0].shape == (1, 16)
        # A non-contiguous input is accepted (copied to contiguous first).
        wide = np.zeros((1, 32), np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": wide[:, ::2]})[0], np.ones((1, 16), np.float32))


def test_dynamic_dims(dynamic_model):
    with kiln.InferenceSession(dynamic_model) as sess:
        assert sess.get_inputs()[0].shape == ["batch", 8]
        for n in (1, 5, 3):
            x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    with kiln.InferenceSession(dynamic_model, input_shapes={"x": [2, 8]}) as fixed:
        assert fixed.get_inputs()[0].shape == [2, 8]


def test_misuse_errors_name_the_problem(tiny_model):
    sess = kiln.InferenceSession(tiny_model)
    x = np.zeros((1, 16), np.float32)
    cases = [
        ({"x": x.astype(np.float64)}, None, "input 'x': expected dtype float32"),
        ({"x": np.zeros((2, 16), np.float32)}, None, "input 'x': expected shape [1,16], got [2,16]"),
        ({"x": x, "z": x}, None, "'z' is not an input"),
        ({}, None, "input 'x' (tensor(float)[1,16]) is missing"),
        ({"x": [0.0] * 16}, None, "expected a numpy.ndarray"),
        ({"x": x}, ["nope"], "'nope' is not an output"),
    ]
    for feed, names, message in cases:
        with pytest.raises(kiln.Error, match=None) as e:
            sess.run(names, feed)
        assert message in str(e.value), str(e.value)
        assert e.value.code in (kiln.ERROR_INVALID_PARAM, kiln.ERROR_MODEL_INPUT_NOT_MATCH)
    sess.close()
    sess.close()  # idempotent
    with pytest.raises(kiln.Error, match="is closed") as e:
        sess.run(None, {"x": x})
    assert e.value.code == kiln.ERROR_INVALID_RESOURCE_HANDLE
    with pytest.raises(kiln.Error, match="no_such.onnx"):
        kiln.InferenceSession("no_such.onnx")
    with pytest.raises(kiln.Error, match="precision='fp8'"):
        kiln.InferenceSession(tiny_model, precision="fp8")


def test_close_from_another_thread_while_running(tmp_path):
    model = add_chain_model(tmp_path / "chain.onnx", 200, shape=(64, 1024))
    sess = kiln.InferenceSession(model)
    x = np.zeros((64, 1024), np.float32)
    errors, runs = [], [0]
    stop = threading.Event()

    def loop():
        while not stop.is_set():
            try:
                sess.run(None, {"x": x})
                runs[0] += 1
            except kiln.Error as e:
                errors.append(str(e))
                return

    t = threading.Thread(target=loop)
    t.start()
    time.sleep(0.2)
    sess.close()  # waits for the run in progress; the next one fails
    t.join(5)
    stop.set()
    assert runs[0] > 0 and errors and "is closed" in errors[0]


def test_run_async(tiny_model):
    with kiln.InferenceSession(tiny_model) as sess:
        xs = [np.full((1, 16), i, np.float32) for i in range(8)]
        futures = [sess.run_async(None, {"x": x}) for x in xs]
        assert all(isinstance(f, concurrent.futures.Future) for f in futures)
        for x, f in zip(xs, futures):
            np.testing.assert_array_equal(f.result(timeout=10)[0], x + 1)
        bad = sess.run_async(None, {"x": xs[0].astype(np.int32)})
        with pytest.raises(kiln.Error, match="expected dtype float32"):
            bad.result(timeout=10)


def test_threads_by_sessions(tmp_path):
    model = add_chain_model(tmp_path / "chain.onnx", 20, shape=(4, 256))
    sessions = [kiln.InferenceSession(model) for _ in range(2)]
    failures = []

    def worker(k):
        rng = np.random.default_rng(k)
        sess = sessions[k % 2]
        for _ in range(200):
            x = rng.standard_normal((4, 256)).astype(np.float32)
            y = sess.run(None, {"x": x})[0]
            if not np.allclose(y, x + 20, atol=1e-5):
                failures.append(k)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in sessions:
        s.close()
    assert not failures


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def test_no_leak_over_10000_runs(tiny_model):
    with kiln.InferenceSession(tiny_model) as sess:
        x = np.zeros((1, 16), np.float32)
        for _ in range(1000):  # warm up caches and pools
            sess.run(None, {"x": x})
        gc.collect()
        before = rss_bytes()
        for _ in range(10000):
            sess.run(None, {"x": x})
        gc.collect()
        after = rss_bytes()
    assert after <= before * 1.01, f"RSS grew from {before} to {after} bytes over 10,000 runs"


def test_compile_and_inspect(tmp_path, dynamic_model):
    dst = tmp_path / "relu.kiln"
    report = kiln.compile(dynamic_model, dst, dynamic_batch_size=[1, 4])
    assert report["nodes"]["after"] >= 1 and len(report["variants"]) == 2
    info = kiln.inspect(dst)
    assert info["format"] == "kiln" and info["buckets"]["kind"]
    assert kiln.inspect(dynamic_model)["inputs"][0]["shape"] == ["batch", 8]
    assert kiln.compile(dynamic_model, tmp_path / "fixed.kiln", input_shape="x:3,8", report=False) is None
    with kiln.InferenceSession(tmp_path / "fixed.kiln") as sess:
        assert sess.get_inputs()[0].shape == [3, 8]
        with pytest.raises(kiln.Error, match="input_shapes and precision apply to an .onnx"):
            kiln.InferenceSession(tmp_path / "fixed.kiln", input_shapes={"x": [3, 8]})
    with pytest.raises(kiln.Error) as e:
        kiln.compile(tmp_path / "missing.onnx", tmp_path / "x.kiln")
    assert "missing.onnx" in str(e.value)


def test_large_inputs_mapped_and_shared_between_threads(tmp_path):
    """Inputs of 16 KiB and more are mapped for the run (kilnrtHostRegister) instead of copied;
    an array fed by several threads at once is mapped by one run and copied by the others.
    Every result is the input plus 1, computed by NumPy, and the input is left as it was."""
    path = add_chain_model(tmp_path / "add_big.onnx", 1, shape=(1, 8192))
    x = np.random.default_rng(3).standard_normal((1, 8192)).astype(np.float32)
    before = x.copy()
    with kiln.InferenceSession(path) as sess:
        failures = []

        def work():
            try:
                for _ in range(200):
                    (y,) = sess.run(None, {"x": x})
                    if not np.array_equal(y, x + np.float32(1)):
                        failures.append("wrong result")
            except kiln.Error as e:
                failures.append(str(e))

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not failures, failures[:3]
        # An output array (Kiln's device memory) fed back as an input: copied device to device.
        (y,) = sess.run(None, {"x": x})
        assert np.array_equal(sess.run(None, {"x": y})[0], (x + np.float32(1)) + np.float32(1))
        # A fresh array at each run (the allocator may reuse addresses a finished run mapped).
        for k in range(200):
            z = np.full((1, 8192), k, np.float32)
            assert np.array_equal(sess.run(None, {"x": z})[0], z + np.float32(1))
    assert np.array_equal(x, before)
