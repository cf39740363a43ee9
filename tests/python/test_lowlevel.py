"""The pyACL-shaped low-level modules (kiln.rt, kiln.mdl, kiln.prof, kiln.comm, kiln.util).

Tests in this process share the runtime with the other test files (an InferenceSession may
have initialized it): they accept kiln.init()'s 100002 and never finalize. What needs its
own runtime (finalize, 4 devices for collectives) runs in a child interpreter.
"""

import os
import pathlib
import socket
import subprocess
import sys
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]
SHAPE = (2, 3)
ERROR_INVALID_PARAM = 100000
ERROR_REPEAT_INITIALIZE = 100002
ERROR_INVALID_MODEL_ID = 100011
ERROR_INVALID_RESOURCE_HANDLE = 200005
ERROR_INVALID_MEMORY = 200010


def kiln_exe():
    """The kiln command of the build tree the package comes from (KILN_EXE overrides)."""
    if os.environ.get("KILN_EXE"):
        return os.environ["KILN_EXE"]
    native = pathlib.Path(kiln._kiln.__file__).resolve()  # <build>/python/kiln/_kiln*.so
    return str(native.parents[2] / "tools" / "kiln")


@pytest.fixture(scope="module")
def add_relu_model(tmp_path_factory):
    """z = Relu(x + y), x and y float32[2, 3], compiled by `kiln compile` into a .kiln."""
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["z"])]
    graph = helper.make_graph(nodes, "add_relu",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in "xy"],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, list(SHAPE))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder = tmp_path_factory.mktemp("lowlevel")
    onnx.save(model, str(folder / "add_relu.onnx"))
    subprocess.run([kiln_exe(), "compile", str(folder / "add_relu.onnx"), "-o", str(folder / "add_relu.kiln")],
                   check=True, capture_output=True)
    return str(folder / "add_relu.kiln")


def ok(ret):
    """Asserts a pyACL-style return code is 0, showing the message otherwise."""
    assert ret == 0, f"ret {ret}: {kiln.get_recent_err_msg()}"


@pytest.fixture(scope="module")
def runtime():
    """kiln.init() (or the runtime another test started) with device 0 current."""
    ret = kiln.init()
    assert ret in (0, ERROR_REPEAT_INITIALIZE), kiln.get_recent_err_msg()
    ok(kiln.rt.set_device(0))
    yield
    # No finalize: later tests of this process may still use the runtime.


def run_child(code, env=None):
    """Runs Python `code` in a child interpreter with this package; returns its stdout."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = str(pathlib.Path(kiln.__file__).resolve().parents[1])
    child_env.update(env or {})
    done = subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"child failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


class Loaded:
    """A model loaded with its description and one device buffer per input/output."""

    def __init__(self, path):
        self.model_id, ret = kiln.mdl.load_from_file(path)
        ok(ret)
        self.desc = kiln.mdl.create_desc()
        assert self.desc != 0
        ok(kiln.mdl.get_desc(self.desc, self.model_id))
        self.inputs, self.in_ptrs = self._dataset(kiln.mdl.get_num_inputs(self.desc), kiln.mdl.get_input_size_by_index)
        self.outputs, self.out_ptrs = self._dataset(kiln.mdl.get_num_outputs(self.desc),
                                                    kiln.mdl.get_output_size_by_index)

    def _dataset(self, count, size_of):
        dataset = kiln.mdl.create_dataset()
        ptrs = []
        for i in range(count):
            size = size_of(self.desc, i)
            ptr, ret = kiln.rt.malloc(size, kiln.rt.MEM_MALLOC_HUGE_FIRST)
            ok(ret)
            buffer = kiln.create_data_buffer(ptr, size)
            assert buffer != 0
            same, ret = kiln.mdl.add_dataset_buffer(dataset, buffer)
            ok(ret)
            assert same == dataset
            ptrs.append((ptr, size, buffer))
        return dataset, ptrs

    def release(self):
        for dataset, ptrs in ((self.inputs, self.in_ptrs), (self.outputs, self.out_ptrs)):
            for ptr, _, buffer in ptrs:
                ok(kiln.destroy_data_buffer(buffer))
                ok(kiln.rt.free(ptr))
            ok(kiln.mdl.destroy_dataset(dataset))
        ok(kiln.mdl.destroy_desc(self.desc))
        ok(kiln.mdl.unload(self.model_id))


def inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]


def test_sample_flow_runs_the_model_and_matches_numpy(runtime, add_relu_model):
    context, ret = kiln.rt.create_context(0)
    ok(ret)
    stream, ret = kiln.rt.create_stream()
    ok(ret)
    m = Loaded(add_relu_model)

    assert kiln.mdl.get_num_inputs(m.desc) == 2 and kiln.mdl.get_num_outputs(m.desc) == 1
    assert [kiln.mdl.get_input_name_by_index(m.desc, i) for i in range(2)] == ["x", "y"]
    assert kiln.mdl.get_output_name_by_index(m.desc, 0) == "z"
    assert kiln.mdl.get_input_index_by_name(m.desc, "y") == (1, 0)
    assert kiln.mdl.get_input_size_by_index(m.desc, 0) == 24
    assert kiln.mdl.get_output_size_by_index(m.desc, 0) == 24
    dims, ret = kiln.mdl.get_output_dims(m.desc, 0)
    ok(ret)
    assert dims == {"name": "z", "dimCount": 2, "dims": [2, 3]}
    assert kiln.mdl.get_input_data_type(m.desc, 0) == kiln.FLOAT
    assert kiln.data_type_size(kiln.FLOAT) == 4

    x, y = inputs(1)
    for array, (ptr, size, _) in zip((x, y), m.in_ptrs):
        ok(kiln.rt.memcpy(ptr, size, kiln.util.numpy_to_ptr(array), array.nbytes, kiln.rt.MEMCPY_HOST_TO_DEVICE))
    ok(kiln.mdl.execute(m.model_id, m.inputs, m.outputs))
    out = np.empty(SHAPE, np.float32)
    out_ptr, out_size, out_buffer = m.out_ptrs[0]
    ok(kiln.rt.memcpy(kiln.util.numpy_to_ptr(out), out.nbytes, out_ptr, out_size, kiln.rt.MEMCPY_DEVICE_TO_HOST))
    want = np.maximum(x + y, 0)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    # On the CPU device the output buffer is host-addressable: a view, no copy.
    assert kiln.get_data_buffer_addr(out_buffer) == out_ptr
    assert kiln.get_data_buffer_size_v2(out_buffer) == 24
    np.testing.assert_allclose(kiln.util.ptr_to_numpy(out_ptr, SHAPE, np.float32), want, rtol=1e-6)
    # Arrays straight in place of addresses (host memory) work too.
    ok(kiln.rt.memcpy(out, out.nbytes, out_ptr, out_size, kiln.rt.MEMCPY_DEVICE_TO_HOST))

    m.release()
    ok(kiln.rt.destroy_stream(stream))
    ok(kiln.rt.destroy_context(context))
    ok(kiln.rt.set_device(0))


def test_execute_async_with_events_orders_copies_and_compute(runtime, add_relu_model):
    m = Loaded(add_relu_model)
    copy_stream, ret = kiln.rt.create_stream()
    ok(ret)
    compute_stream, ret = kiln.rt.create_stream()
    ok(ret)
    copied, ret = kiln.rt.create_event()
    ok(ret)
    start, ret = kiln.rt.create_event_with_flag(kiln.rt.EVENT_TIME_LINE)
    ok(ret)
    end, ret = kiln.rt.create_event()
    ok(ret)
    x, y = inputs(2)
    host_out, ret = kiln.rt.malloc_host(24)
    ok(ret)

    # Copies on one stream; the compute stream waits for them through an event.
    for array, (ptr, size, _) in zip((x, y), m.in_ptrs):
        ok(kiln.rt.memcpy_async(ptr, size, array, array.nbytes, kiln.rt.MEMCPY_HOST_TO_DEVICE, copy_stream))
    ok(kiln.rt.record_event(copied, copy_stream))
    ok(kiln.rt.stream_wait_event(compute_stream, copied))
    ok(kiln.rt.record_event(start, compute_stream))
    ok(kiln.mdl.execute_async(m.model_id, m.inputs, m.outputs, compute_stream))
    ok(kiln.rt.record_event(end, compute_stream))
    out_ptr, out_size, _ = m.out_ptrs[0]
    ok(kiln.rt.memcpy_async(host_out, 24, out_ptr, out_size, kiln.rt.MEMCPY_DEVICE_TO_HOST, compute_stream))
    ok(kiln.rt.synchronize_stream(compute_stream))

    assert kiln.rt.query_event(end) == (kiln.rt.EVENT_STATUS_COMPLETE, 0)
    assert kiln.rt.stream_query(compute_stream) == (kiln.rt.STREAM_STATUS_COMPLETE, 0)
    ms, ret = kiln.rt.event_elapsed_time(start, end)
    ok(ret)
    assert ms >= 0
    ok(kiln.rt.synchronize_event(end))
    np.testing.assert_allclose(kiln.util.ptr_to_numpy(host_out, SHAPE, np.float32), np.maximum(x + y, 0), rtol=1e-6)

    for event in (copied, start, end):
        ok(kiln.rt.destroy_event(event))
    ok(kiln.rt.free_host(host_out))
    ok(kiln.rt.destroy_stream(copy_stream))
    ok(kiln.rt.destroy_stream(compute_stream))
    m.release()


def test_threads_execute_one_model_concurrently(runtime, add_relu_model):
    model_id, ret = kiln.mdl.load_from_file(add_relu_model)
    ok(ret)
    failures = []

    def worker(seed):
        try:
            ok(kiln.rt.set_device(0))
            x, y = inputs(seed)
            ins, outs = kiln.mdl.create_dataset(), kiln.mdl.create_dataset()
            ptrs = []
            for dataset, arrays in ((ins, (x, y)), (outs, (np.empty(SHAPE, np.float32),))):
                for a in arrays:
                    p, r = kiln.rt.malloc(a.nbytes, 0)
                    ok(r)
                    ok(kiln.rt.memcpy(p, a.nbytes, a, a.nbytes, kiln.rt.MEMCPY_HOST_TO_DEVICE))
                    b = kiln.create_data_buffer(p, a.nbytes)
                    ok(kiln.mdl.add_dataset_buffer(dataset, b)[1])
                    ptrs.append((p, b))
            for _ in range(50):
                ok(kiln.mdl.execute(model_id, ins, outs))
            got = kiln.util.ptr_to_numpy(ptrs[2][0], SHAPE, np.float32).copy()
            np.testing.assert_allclose(got, np.maximum(x + y, 0), rtol=1e-6)
            for p, b in ptrs:
                ok(kiln.destroy_data_buffer(b))
                ok(kiln.rt.free(p))
            ok(kiln.mdl.destroy_dataset(ins))
            ok(kiln.mdl.destroy_dataset(outs))
            ok(kiln.rt.reset_device(0))
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            failures.append(e)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok(kiln.mdl.unload(model_id))
    assert not failures, failures


def test_errors_come_back_as_codes_with_a_message(runtime, add_relu_model, tmp_path):
    assert kiln.rt.destroy_stream(12345) == ERROR_INVALID_RESOURCE_HANDLE
    assert "not a live stream" in kiln.get_recent_err_msg()
    assert kiln.rt.synchronize_event(4096) != 0
    assert kiln.mdl.execute(987654, 0, 0) != 0
    assert kiln.mdl.unload(987654) == ERROR_INVALID_MODEL_ID
    model_id, ret = kiln.mdl.load_from_file(str(tmp_path / "missing.kiln"))
    assert ret != 0 and "missing.kiln" in kiln.get_recent_err_msg()

    ptr, ret = kiln.rt.malloc(64, 0)
    ok(ret)
    host = np.zeros(32, np.float32)  # 128 bytes
    # More bytes than the destination holds; a device address where host memory belongs.
    assert kiln.rt.memcpy(ptr, 64, host, 128, kiln.rt.MEMCPY_HOST_TO_DEVICE) == ERROR_INVALID_PARAM
    assert kiln.rt.memcpy(ptr, 64, ptr, 64, kiln.rt.MEMCPY_HOST_TO_DEVICE) == ERROR_INVALID_MEMORY
    assert kiln.rt.memset(ptr, 64, 0, 128) != 0
    ok(kiln.rt.free(ptr))
    assert kiln.rt.free(ptr) != 0  # twice

    # A dataset short of an input.
    m = Loaded(add_relu_model)
    short = kiln.mdl.create_dataset()
    ok(kiln.mdl.add_dataset_buffer(short, m.in_ptrs[0][2])[1])
    ret = kiln.mdl.execute(m.model_id, short, m.outputs)
    assert ret != 0 and kiln.get_recent_err_msg()
    ok(kiln.mdl.destroy_dataset(short))
    m.release()

    assert kiln.mdl.create_aipp(0) == 0
    assert kiln.mdl.set_aipp_src_image_size(12345, 8, 8) == ERROR_INVALID_PARAM
    # Python-level misuse is a Python exception, not a code.
    with pytest.raises(TypeError):
        kiln.rt.malloc("64", 0)
    with pytest.raises(ValueError):
        kiln.util.numpy_to_ptr(np.zeros((4, 4), np.float32)[:, ::2])


def test_memory_helpers_round_trip(runtime):
    ptr, ret = kiln.rt.malloc(4 * 12, 0)
    ok(ret)
    ok(kiln.rt.memset(ptr, 48, 0, 48))
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    # 2-D copy of 2 columns of each of 3 rows into a packed 3x2 image.
    ok(kiln.rt.memcpy2d(ptr, 8, src, 16, 8, 3, kiln.rt.MEMCPY_HOST_TO_DEVICE))
    view = kiln.util.ptr_to_numpy(ptr, (3, 2), np.float32)
    np.testing.assert_array_equal(view, src[:, :2])
    view[:] = 7  # writable view of the device buffer
    back = np.empty((3, 2), np.float32)
    ok(kiln.rt.memcpy(back, back.nbytes, ptr, 24, kiln.rt.MEMCPY_DEVICE_TO_HOST))
    assert (back == 7).all()
    # pyACL passes NumPy type numbers too.
    assert kiln.util.ptr_to_numpy(ptr, (2,), np.dtype(np.float32).num).dtype == np.float32
    assert kiln.util.ptr_to_bytes(kiln.util.numpy_to_ptr(src), 4) == src.tobytes()[:4]
    ok(kiln.rt.free(ptr))
    free, total, ret = kiln.rt.get_mem_info(kiln.rt.DDR_MEM)
    ok(ret)
    assert 0 < free <= total
    stats, ret = kiln.rt.get_mem_stats(0)
    ok(ret)
    assert stats["alloc_count"] >= 1

    desc = kiln.create_tensor_desc(kiln.FLOAT, [2, 5], kiln.FORMAT_ND)
    assert desc != 0
    assert kiln.get_tensor_desc_num_dims(desc) == 2
    assert kiln.get_tensor_desc_dim_v2(desc, 1) == (5, 0)
    assert kiln.get_tensor_desc_size(desc) == 40
    kiln.destroy_tensor_desc(desc)


def test_callbacks_run_in_stream_order(runtime):
    stream, ret = kiln.rt.create_stream()
    ok(ret)
    seen = []
    for i in range(3):
        ok(kiln.rt.launch_callback(seen.append, i, kiln.rt.CALLBACK_BLOCK, stream))
    ok(kiln.rt.synchronize_stream(stream))
    assert seen == [0, 1, 2]
    ok(kiln.rt.destroy_stream(stream))


def test_profiler_writes_its_files(runtime, add_relu_model, tmp_path):
    if os.environ.get("KILN_PROFILE"):
        pytest.skip("KILN_PROFILE profiles the whole process")
    ok(kiln.prof.init(str(tmp_path)))
    ok(kiln.prof.start())
    m = Loaded(add_relu_model)
    ok(kiln.mdl.execute(m.model_id, m.inputs, m.outputs))
    m.release()
    ok(kiln.prof.stop())
    ok(kiln.prof.finalize())
    for name in ("timeline.json", "op_summary.csv", "api_statistic.csv"):
        assert (tmp_path / name).exists(), name


COLLECTIVES = r"""
import threading
import numpy as np
import kiln

def check(ret):
    assert ret == 0, (ret, kiln.get_recent_err_msg())

check(kiln.init())
for n in (2, 3, 4):
    comms, ret = kiln.comm.init_all(list(range(n)))
    check(ret)
    rng = np.random.default_rng(n)
    data = [rng.standard_normal((n * 2, 5)).astype(np.float32) for _ in range(n)]
    ints = [np.arange(7, dtype=np.int64) * (r + 1) for r in range(n)]
    results = [None] * n
    failures = []

    def rank(r):
        try:
            check(kiln.rt.set_device(r))
            assert kiln.comm.get_rank_id(comms[r]) == (r, 0)
            assert kiln.comm.get_rank_size(comms[r]) == (n, 0)
            summed, ret = kiln.comm.all_reduce_array(data[r], kiln.comm.REDUCE_SUM, comms[r])
            check(ret)
            biggest, ret = kiln.comm.all_reduce_array(ints[r], kiln.comm.REDUCE_MAX, comms[r])
            check(ret)
            gathered, ret = kiln.comm.all_gather_array(ints[r], comms[r])
            check(ret)
            scattered, ret = kiln.comm.reduce_scatter_array(data[r], kiln.comm.REDUCE_SUM, comms[r])
            check(ret)
            b = data[r].copy()
            check(kiln.comm.broadcast_array(b, 1, comms[r]))
            # The address form on device memory: all_reduce in place, then copy back.
            ptr, ret = kiln.rt.malloc(data[r].nbytes, 0)
            check(ret)
            check(kiln.rt.memcpy(ptr, data[r].nbytes, data[r], data[r].nbytes, kiln.rt.MEMCPY_HOST_TO_DEVICE))
            stream, ret = kiln.rt.create_stream()
            check(ret)
            check(kiln.comm.all_reduce(ptr, ptr, data[r].size, kiln.comm.DATA_TYPE_FP32, kiln.comm.REDUCE_SUM,
                                       comms[r], stream))
            check(kiln.rt.synchronize_stream(stream))
            on_device = kiln.util.ptr_to_numpy(ptr, data[r].shape, np.float32).copy()
            check(kiln.rt.destroy_stream(stream))
            check(kiln.rt.free(ptr))
            results[r] = (summed, biggest, gathered, scattered, b, on_device)
        except Exception as e:
            failures.append((r, e))

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    total = np.sum(data, axis=0)
    for r, (summed, biggest, gathered, scattered, b, on_device) in enumerate(results):
        np.testing.assert_allclose(summed, total, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(on_device, total, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(biggest, ints[-1])
        np.testing.assert_array_equal(gathered, np.stack(ints))
        np.testing.assert_allclose(scattered, total[r * 2:(r + 1) * 2], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(b, data[1])
    for c in comms:
        check(kiln.comm.destroy(c))
    print("ranks", n, "ok")
check(kiln.finalize())
"""


def test_collectives_over_numpy_arrays_with_ranks_as_threads():
    out = run_child(COLLECTIVES, {"KILN_DEVICES": "cpu:4", "KILN_COMM_TIMEOUT": "30"})
    assert out.split("\n")[:3] == ["ranks 2 ok", "ranks 3 ok", "ranks 4 ok"]


RANK_PROCESS = r"""
import numpy as np, kiln
assert kiln.init() == 0
assert kiln.rt.set_device(0) == 0
comm, ret = kiln.comm.init_from_env()
assert ret == 0, kiln.get_recent_err_msg()
rank, ret = kiln.comm.get_rank_id(comm)
total, ret = kiln.comm.all_reduce_array(np.arange(5, dtype=np.float64) * (rank + 1), kiln.comm.REDUCE_SUM, comm)
assert ret == 0, kiln.get_recent_err_msg()
print(rank, total.tolist())
assert kiln.comm.destroy(comm) == 0
assert kiln.finalize() == 0
"""


def test_collectives_with_ranks_as_processes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(pathlib.Path(kiln.__file__).resolve().parents[1]), KILN_WORLD_SIZE="2",
               KILN_ROOT_ADDR=f"127.0.0.1:{port}", KILN_COMM_TIMEOUT="30")
    procs = [subprocess.Popen([sys.executable, "-c", RANK_PROCESS], env=dict(env, KILN_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    want = (np.arange(5) * 3.0).tolist()
    assert sorted(out.strip() for out, _ in outs) == [f"0 {want}", f"1 {want}"]


def test_comm_array_forms_refuse_what_they_cannot_reduce():
    out = run_child(r"""
import numpy as np, kiln
assert kiln.init() == 0
comms, ret = kiln.comm.init_all([0])
assert ret == 0, kiln.get_recent_err_msg()
kiln.rt.set_device(0)
try:
    kiln.comm.all_reduce_array(np.zeros(3, np.complex64), kiln.comm.REDUCE_SUM, comms[0])
except TypeError as e:
    print("TypeError", "complex64" in str(e))
result, ret = kiln.comm.all_reduce_array(np.ones(3, np.float32), kiln.comm.REDUCE_SUM, 12345)
print("bad comm", ret != 0)
assert kiln.comm.destroy(comms[0]) == 0
assert kiln.finalize() == 0
""")
    assert out.split() == ["TypeError", "True", "bad", "comm", "True"]


def test_example_acl_sample_flow_matches_numpy(add_relu_model, tmp_path):
    x, y = inputs(3)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(pathlib.Path(kiln.__file__).resolve().parents[1])
    done = subprocess.run([sys.executable, str(REPO / "examples" / "python" / "acl_sample_flow.py"), add_relu_model,
                           "--inputs", str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), "--outputs-dir",
                           str(tmp_path / "out")], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "output 0 'z': float32 [2, 3]" in done.stdout
    np.testing.assert_allclose(np.load(tmp_path / "out" / "out0.npy"), np.maximum(x + y, 0), rtol=1e-6)
