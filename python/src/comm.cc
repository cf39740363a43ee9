// kiln.comm: include/kiln/comm.h (HCCL's shape) one to one over addresses, plus synchronous
// forms over NumPy arrays (all_reduce_array, ...). Conventions: lowlevel.h.
//
// The array forms pass the arrays' host memory straight to the collective (comm.h accepts
// host memory the caller keeps alive until the stream passes the call), then synchronize the
// stream with the GIL released, so ranks that are Python threads of one process progress
// together. An accelerator that cannot read host memory would need a kiln.rt.memcpy to a
// device buffer first.
#include <cstdint>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "kiln/comm.h"
#include "python/src/binders.h"
#include "python/src/lowlevel.h"

namespace kiln::python {
namespace {

using Ptr = std::uintptr_t;

kilnComm comm_of(Ptr h) { return handle_ptr<void>(h); }
kilnrtStream stream_of(Ptr h) { return handle_ptr<void>(h); }

std::string dtype_name(const py::dtype& dt) { return py::str(static_cast<const py::handle&>(dt)); }

// The collective data type of a NumPy dtype; TypeError for one comm.h has no type for.
kilnCommDataType comm_type(const py::dtype& dt) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'i' && size == 1) return KILN_COMM_INT8;
  if (kind == 'i' && size == 2) return KILN_COMM_INT16;
  if (kind == 'i' && size == 4) return KILN_COMM_INT32;
  if (kind == 'i' && size == 8) return KILN_COMM_INT64;
  if (kind == 'u' && size == 1) return KILN_COMM_UINT8;
  if (kind == 'u' && size == 2) return KILN_COMM_UINT16;
  if (kind == 'u' && size == 4) return KILN_COMM_UINT32;
  if (kind == 'u' && size == 8) return KILN_COMM_UINT64;
  if (kind == 'f' && size == 2) return KILN_COMM_FP16;
  if (kind == 'f' && size == 4) return KILN_COMM_FP32;
  if (kind == 'f' && size == 8) return KILN_COMM_FP64;
  throw py::type_error("kiln.comm: no collective data type for numpy dtype " + dtype_name(dt) +
                       " (int8..int64, uint8..uint64, float16, float32, float64)");
}

std::vector<py::ssize_t> shape_of(const py::array& a) { return {a.shape(), a.shape() + a.ndim()}; }

// A C-contiguous array (a copy only when `a` is not one).
py::array contiguous(const py::array& a) { return py::array::ensure(a, py::array::c_style); }

// `out` checked as a destination: C-contiguous, writable, of `dt` and `count` elements.
py::array checked_out(const py::object& out, const py::dtype& dt, py::ssize_t count, const char* what) {
  auto a = out.cast<py::array>();
  if (!(a.flags() & py::array::c_style) || !a.writeable())
    throw py::value_error(std::string(what) + ": out must be a writable C-contiguous array");
  if (!a.dtype().is(dt) && !a.dtype().equal(dt))
    throw py::value_error(std::string(what) + ": out has dtype " + dtype_name(a.dtype()) +
                          ", the input " + dtype_name(dt));
  if (a.size() != count)
    throw py::value_error(std::string(what) + ": out has " + std::to_string(a.size()) + " elements, needs " +
                          std::to_string(count));
  return a;
}

// Runs `enqueue` and, when it succeeded, waits for the stream; the GIL is released.
template <class F>
kilnError run_and_wait(F&& enqueue, kilnrtStream stream) {
  py::gil_scoped_release release;
  kilnError ret = enqueue();
  if (ret == KILN_SUCCESS) ret = kilnrtSynchronizeStream(stream);
  return ret;
}

void bind_communicators(py::module_& m) {
  m.def("get_root_info", [] {
    kilnRootInfo info{};
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnCommGetRootInfo(&info);
    }
    return py::make_tuple(py::bytes(info.internal, sizeof(info.internal)), ret);
  }, "get_root_info() -> (root_info: bytes, ret): on the process that will be rank 0 (kilnCommGetRootInfo).");
  m.def("init_root_info", [](uint32_t n_ranks, py::bytes root_info, uint32_t rank) {
    std::string blob = root_info;
    kilnRootInfo info{};
    if (blob.size() != sizeof(info.internal))
      throw py::value_error("init_root_info: root_info must be the " + std::to_string(sizeof(info.internal)) +
                            " bytes get_root_info returned, got " + std::to_string(blob.size()));
    std::copy(blob.begin(), blob.end(), info.internal);
    kilnComm comm = nullptr;
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnCommInitRootInfo(n_ranks, &info, rank, &comm);
    }
    return py::make_tuple(handle_int(comm), ret);
  }, py::arg("n_ranks"), py::arg("root_info"), py::arg("rank"),
        "init_root_info(n_ranks, root_info, rank) -> (comm, ret): joins the world (blocks until all "
        "n_ranks joined; GIL released). Uses the current context's device.");
  m.def("init_from_env", [] {
    kilnComm comm = nullptr;
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnCommInitFromEnv(&comm);
    }
    return py::make_tuple(handle_int(comm), ret);
  }, "init_from_env() -> (comm, ret): rank and size from mpirun's environment (OMPI_COMM_WORLD_*) or "
     "KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR.");
  m.def("init_all", [](std::vector<int32_t> devices) {
    std::vector<kilnComm> comms(devices.size(), nullptr);
    kilnError ret;
    {
      py::gil_scoped_release release;
      ret = kilnCommInitAll(static_cast<uint32_t>(devices.size()), devices.data(), comms.data());
    }
    py::list out;
    for (kilnComm c : comms) out.append(handle_int(c));
    return py::make_tuple(out, ret);
  }, py::arg("devices"),
        "init_all(devices) -> ([comm, ...], ret): one process, rank i on devices[i] (ranks are threads: "
        "each calls kiln.rt.set_device(devices[i]) and uses comms[i]).");
  m.def("destroy", [](Ptr c) {
    py::gil_scoped_release release;
    return kilnCommDestroy(comm_of(c));
  }, py::arg("comm"), "destroy(comm) -> ret: waits for the communicator's queued operations, then frees it.");
  m.def("abort", [](Ptr c) { return kilnCommAbort(comm_of(c)); }, py::arg("comm"),
        "abort(comm) -> ret: pending and later operations fail with 400003; never blocks.");
  m.def("get_rank_id", [](Ptr c) {
    uint32_t rank = 0;
    kilnError ret = kilnCommGetRankId(comm_of(c), &rank);
    return py::make_tuple(rank, ret);
  }, py::arg("comm"), "get_rank_id(comm) -> (rank, ret).");
  m.def("get_rank_size", [](Ptr c) {
    uint32_t size = 0;
    kilnError ret = kilnCommGetRankSize(comm_of(c), &size);
    return py::make_tuple(size, ret);
  }, py::arg("comm"), "get_rank_size(comm) -> (rank_size, ret).");
  m.def("get_async_error", [](Ptr c) {
    kilnError async_error = KILN_SUCCESS;
    kilnError ret = kilnCommGetAsyncError(comm_of(c), &async_error);
    return py::make_tuple(async_error, ret);
  }, py::arg("comm"), "get_async_error(comm) -> (async_error, ret): the code of the first failed operation.");
}

void bind_address_collectives(py::module_& m) {
  using py::arg;
  m.def("all_reduce", [](py::object send, py::object recv, uint64_t count, int dt, int op, Ptr c, Ptr s) {
    void* sp = address_arg(send, false);
    void* rp = address_arg(recv, true);
    py::gil_scoped_release release;
    return kilnAllReduce(sp, rp, count, static_cast<kilnCommDataType>(dt), static_cast<kilnReduceOp>(op), comm_of(c),
                         stream_of(s));
  }, arg("send_buf"), arg("recv_buf"), arg("count"), arg("data_type"), arg("op"), arg("comm"), arg("stream"),
        "all_reduce(send_buf, recv_buf, count, data_type, op, comm, stream) -> ret: enqueued on the stream "
        "(0: default). Buffers: addresses (device memory) or host arrays kept alive until the stream passes "
        "the call; send_buf == recv_buf is in place.");
  m.def("broadcast", [](py::object buf, uint64_t count, int dt, uint32_t root, Ptr c, Ptr s) {
    void* p = address_arg(buf, true);
    py::gil_scoped_release release;
    return kilnBroadcast(p, count, static_cast<kilnCommDataType>(dt), root, comm_of(c), stream_of(s));
  }, arg("buf"), arg("count"), arg("data_type"), arg("root"), arg("comm"), arg("stream"),
        "broadcast(buf, count, data_type, root, comm, stream) -> ret.");
  m.def("reduce", [](py::object send, py::object recv, uint64_t count, int dt, int op, uint32_t root, Ptr c, Ptr s) {
    void* sp = address_arg(send, false);
    void* rp = address_arg(recv, true);
    py::gil_scoped_release release;
    return kilnReduce(sp, rp, count, static_cast<kilnCommDataType>(dt), static_cast<kilnReduceOp>(op), root,
                      comm_of(c), stream_of(s));
  }, arg("send_buf"), arg("recv_buf"), arg("count"), arg("data_type"), arg("op"), arg("root"), arg("comm"),
        arg("stream"),
        "reduce(send_buf, recv_buf, count, data_type, op, root, comm, stream) -> ret (recv_buf on root only).");
  m.def("all_gather", [](py::object send, py::object recv, uint64_t count, int dt, Ptr c, Ptr s) {
    void* sp = address_arg(send, false);
    void* rp = address_arg(recv, true);
    py::gil_scoped_release release;
    return kilnAllGather(sp, rp, count, static_cast<kilnCommDataType>(dt), comm_of(c), stream_of(s));
  }, arg("send_buf"), arg("recv_buf"), arg("send_count"), arg("data_type"), arg("comm"), arg("stream"),
        "all_gather(send_buf, recv_buf, send_count, data_type, comm, stream) -> ret: recv_buf holds "
        "rank_size * send_count elements.");
  m.def("reduce_scatter", [](py::object send, py::object recv, uint64_t count, int dt, int op, Ptr c, Ptr s) {
    void* sp = address_arg(send, false);
    void* rp = address_arg(recv, true);
    py::gil_scoped_release release;
    return kilnReduceScatter(sp, rp, count, static_cast<kilnCommDataType>(dt), static_cast<kilnReduceOp>(op),
                             comm_of(c), stream_of(s));
  }, arg("send_buf"), arg("recv_buf"), arg("recv_count"), arg("data_type"), arg("op"), arg("comm"), arg("stream"),
        "reduce_scatter(send_buf, recv_buf, recv_count, data_type, op, comm, stream) -> ret: rank r gets the "
        "reduction of block r.");
  m.def("all_to_all", [](py::object send, uint64_t send_count, int send_type, py::object recv, uint64_t recv_count,
                         int recv_type, Ptr c, Ptr s) {
    void* sp = address_arg(send, false);
    void* rp = address_arg(recv, true);
    py::gil_scoped_release release;
    return kilnAlltoAll(sp, send_count, static_cast<kilnCommDataType>(send_type), rp, recv_count,
                        static_cast<kilnCommDataType>(recv_type), comm_of(c), stream_of(s));
  }, arg("send_buf"), arg("send_count"), arg("send_type"), arg("recv_buf"), arg("recv_count"), arg("recv_type"),
        arg("comm"), arg("stream"),
        "all_to_all(send_buf, send_count, send_type, recv_buf, recv_count, recv_type, comm, stream) -> ret.");
  m.def("send", [](py::object buf, uint64_t count, int dt, uint32_t dest, Ptr c, Ptr s) {
    void* p = address_arg(buf, false);
    py::gil_scoped_release release;
    return kilnSend(p, count, static_cast<kilnCommDataType>(dt), dest, comm_of(c), stream_of(s));
  }, arg("send_buf"), arg("count"), arg("data_type"), arg("dest_rank"), arg("comm"), arg("stream"),
        "send(send_buf, count, data_type, dest_rank, comm, stream) -> ret.");
  m.def("recv", [](py::object buf, uint64_t count, int dt, uint32_t src, Ptr c, Ptr s) {
    void* p = address_arg(buf, true);
    py::gil_scoped_release release;
    return kilnRecv(p, count, static_cast<kilnCommDataType>(dt), src, comm_of(c), stream_of(s));
  }, arg("recv_buf"), arg("count"), arg("data_type"), arg("src_rank"), arg("comm"), arg("stream"),
        "recv(recv_buf, count, data_type, src_rank, comm, stream) -> ret.");
  m.def("barrier", [](Ptr c, Ptr s) {
    py::gil_scoped_release release;
    return kilnBarrier(comm_of(c), stream_of(s));
  }, arg("comm"), arg("stream"), "barrier(comm, stream) -> ret.");
  m.def("group_start", &kilnGroupStart,
        "group_start() -> ret: this thread's operations are collected until group_end().");
  m.def("group_end", &kilnGroupEnd, py::call_guard<py::gil_scoped_release>(),
        "group_end() -> ret: launches the collected operations together.");
}

void bind_array_collectives(py::module_& m) {
  using py::arg;
  m.def("all_reduce_array", [](py::array a, int op, Ptr c, Ptr s, py::object out) {
    py::array src = contiguous(a);
    kilnCommDataType t = comm_type(src.dtype());
    py::array dst = out.is_none() ? py::array(src.dtype(), shape_of(src))
                                  : checked_out(out, src.dtype(), src.size(), "all_reduce_array");
    void* sp = const_cast<void*>(src.data());
    void* rp = dst.mutable_data();
    uint64_t count = static_cast<uint64_t>(src.size());
    kilnError ret = run_and_wait([&] {
      return kilnAllReduce(sp, rp, count, t, static_cast<kilnReduceOp>(op), comm_of(c), stream_of(s));
    }, stream_of(s));
    return py::make_tuple(dst, ret);
  }, arg("array"), arg("op"), arg("comm"), arg("stream") = 0, arg("out") = py::none(),
        "all_reduce_array(array, op, comm, stream=0, out=None) -> (result, ret): the element-wise "
        "reduction (REDUCE_SUM ...) of every rank's array, in a new array (or out; out=array is in place). "
        "Synchronous: waits for the stream with the GIL released.");
  m.def("all_gather_array", [](py::array a, Ptr c, Ptr s) {
    py::array src = contiguous(a);
    kilnCommDataType t = comm_type(src.dtype());
    uint32_t n = 0;
    kilnError ret = kilnCommGetRankSize(comm_of(c), &n);
    if (ret != KILN_SUCCESS) return py::make_tuple(py::none(), ret);
    std::vector<py::ssize_t> shape = shape_of(src);
    shape.insert(shape.begin(), static_cast<py::ssize_t>(n));
    py::array dst(src.dtype(), shape);
    void* sp = const_cast<void*>(src.data());
    void* rp = dst.mutable_data();
    uint64_t count = static_cast<uint64_t>(src.size());
    ret = run_and_wait([&] { return kilnAllGather(sp, rp, count, t, comm_of(c), stream_of(s)); }, stream_of(s));
    return py::make_tuple(dst, ret);
  }, arg("array"), arg("comm"), arg("stream") = 0,
        "all_gather_array(array, comm, stream=0) -> (result, ret): result[r] is rank r's array "
        "(shape (rank_size, *array.shape)). Synchronous.");
  m.def("reduce_scatter_array", [](py::array a, int op, Ptr c, Ptr s) {
    py::array src = contiguous(a);
    kilnCommDataType t = comm_type(src.dtype());
    uint32_t n = 0;
    kilnError ret = kilnCommGetRankSize(comm_of(c), &n);
    if (ret != KILN_SUCCESS) return py::make_tuple(py::none(), ret);
    if (n == 0 || src.size() % n != 0)
      throw py::value_error("reduce_scatter_array: " + std::to_string(src.size()) +
                            " elements do not split into " + std::to_string(n) + " equal blocks");
    std::vector<py::ssize_t> shape = shape_of(src);
    if (!shape.empty() && shape[0] % n == 0)
      shape[0] /= n;  // block r is rows [r * rows / n, (r + 1) * rows / n)
    else
      shape = {src.size() / static_cast<py::ssize_t>(n)};
    py::array dst(src.dtype(), shape);
    void* sp = const_cast<void*>(src.data());
    void* rp = dst.mutable_data();
    uint64_t count = static_cast<uint64_t>(dst.size());
    ret = run_and_wait([&] {
      return kilnReduceScatter(sp, rp, count, t, static_cast<kilnReduceOp>(op), comm_of(c), stream_of(s));
    }, stream_of(s));
    return py::make_tuple(dst, ret);
  }, arg("array"), arg("op"), arg("comm"), arg("stream") = 0,
        "reduce_scatter_array(array, op, comm, stream=0) -> (result, ret): rank r gets the reduction of "
        "block r of the flattened array (rank_size equal blocks; shape (rows / rank_size, ...) when the "
        "first dim splits, else flat). Synchronous.");
  m.def("broadcast_array", [](py::array a, uint32_t root, Ptr c, Ptr s) {
    if (!(a.flags() & py::array::c_style) || !a.writeable())
      throw py::value_error("broadcast_array: the array must be writable and C-contiguous (it is overwritten "
                            "on every rank but root)");
    kilnCommDataType t = comm_type(a.dtype());
    void* p = a.mutable_data();
    uint64_t count = static_cast<uint64_t>(a.size());
    return run_and_wait([&] { return kilnBroadcast(p, count, t, root, comm_of(c), stream_of(s)); }, stream_of(s));
  }, arg("array"), arg("root"), arg("comm"), arg("stream") = 0,
        "broadcast_array(array, root, comm, stream=0) -> ret: root's array is copied into the array of every "
        "other rank, in place. Synchronous.");
  m.def("reduce_array", [](py::array a, int op, uint32_t root, Ptr c, Ptr s) {
    py::array src = contiguous(a);
    kilnCommDataType t = comm_type(src.dtype());
    py::array dst(src.dtype(), shape_of(src));
    void* sp = const_cast<void*>(src.data());
    void* rp = dst.mutable_data();
    uint64_t count = static_cast<uint64_t>(src.size());
    kilnError ret = run_and_wait([&] {
      return kilnReduce(sp, rp, count, t, static_cast<kilnReduceOp>(op), root, comm_of(c), stream_of(s));
    }, stream_of(s));
    return py::make_tuple(dst, ret);
  }, arg("array"), arg("op"), arg("root"), arg("comm"), arg("stream") = 0,
        "reduce_array(array, op, root, comm, stream=0) -> (result, ret): the reduction on root (on other "
        "ranks the result's contents are undefined). Synchronous.");
}

}  // namespace

void bind_comm(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "comm",
      "Collective communication (include/kiln/comm.h, HCCL's shape): communicators and collectives.\n\n"
      "all_reduce/broadcast/... wrap kilnAllReduce/kilnBroadcast/... one to one over addresses (ints, or\n"
      "host NumPy arrays) and return ret; the *_array forms take NumPy arrays, run synchronously (GIL\n"
      "released) and return (result, ret). Ranks as threads: init_all(devices), each thread calls\n"
      "kiln.rt.set_device(devices[rank]) and uses its comm; ranks as processes: init_from_env under mpirun.");
  for (const auto& [name, value] : std::initializer_list<std::pair<const char*, int>>{
           {"DATA_TYPE_INT8", KILN_COMM_INT8}, {"DATA_TYPE_INT16", KILN_COMM_INT16},
           {"DATA_TYPE_INT32", KILN_COMM_INT32}, {"DATA_TYPE_FP16", KILN_COMM_FP16},
           {"DATA_TYPE_FP32", KILN_COMM_FP32}, {"DATA_TYPE_INT64", KILN_COMM_INT64},
           {"DATA_TYPE_UINT64", KILN_COMM_UINT64}, {"DATA_TYPE_UINT8", KILN_COMM_UINT8},
           {"DATA_TYPE_UINT16", KILN_COMM_UINT16}, {"DATA_TYPE_UINT32", KILN_COMM_UINT32},
           {"DATA_TYPE_FP64", KILN_COMM_FP64}, {"DATA_TYPE_BF16", KILN_COMM_BF16},
           {"REDUCE_SUM", KILN_REDUCE_SUM}, {"REDUCE_PROD", KILN_REDUCE_PROD},
           {"REDUCE_MAX", KILN_REDUCE_MAX}, {"REDUCE_MIN", KILN_REDUCE_MIN},
           {"ERROR_COMM_TIMEOUT", KILN_ERROR_COMM_TIMEOUT}, {"ERROR_COMM_REMOTE", KILN_ERROR_COMM_REMOTE},
           {"ERROR_COMM_ABORTED", KILN_ERROR_COMM_ABORTED}, {"ERROR_COMM_CONNECT", KILN_ERROR_COMM_CONNECT}})
    m.attr(name) = value;
  bind_communicators(m);
  bind_address_collectives(m);
  bind_array_collectives(m);
}

}  // namespace kiln::python
