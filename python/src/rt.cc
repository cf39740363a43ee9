// kiln.rt: pyACL's acl.rt over include/kiln/kiln.h's kilnrt* functions, one to one
// (devices, contexts, streams, events, host callbacks, memory). Conventions: lowlevel.h.
#include <cstdint>

#include "python/src/binders.h"
#include "python/src/lowlevel.h"

namespace kiln::python {
namespace {

using Ptr = std::uintptr_t;

// A Python callable and its argument for kilnrtLaunchCallback; deleted by the trampoline
// after the one call it is for.
struct Callback {
  py::object fn;
  py::object user_data;
};

void run_callback(void* user_data) {
  py::gil_scoped_acquire gil;
  auto* cb = static_cast<Callback*>(user_data);
  try {
    cb->fn(cb->user_data);
  } catch (py::error_already_set& e) {
    // No caller to raise to: reported as an unraisable exception, as Python's own
    // callbacks (weakref, __del__) do.
    e.discard_as_unraisable("kiln.rt.launch_callback callback");
  }
  delete cb;
}

}  // namespace

void bind_rt(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "rt",
      "Runtime (pyACL's acl.rt): devices, contexts, streams, events, memory.\n\n"
      "Each function wraps one kilnrt* function of include/kiln/kiln.h. Functions return the\n"
      "error code `ret` (0 is success; kiln.get_recent_err_msg() says why) or a tuple\n"
      "(value, ret); handles and addresses are ints. Blocking calls release the GIL.");
  using gil_release = py::call_guard<py::gil_scoped_release>;

  // ---- Constants (kiln.h's enums, pyACL users' ACL_* values) ----
  m.attr("MEMCPY_HOST_TO_HOST") = int(KILN_MEMCPY_HOST_TO_HOST);
  m.attr("MEMCPY_HOST_TO_DEVICE") = int(KILN_MEMCPY_HOST_TO_DEVICE);
  m.attr("MEMCPY_DEVICE_TO_HOST") = int(KILN_MEMCPY_DEVICE_TO_HOST);
  m.attr("MEMCPY_DEVICE_TO_DEVICE") = int(KILN_MEMCPY_DEVICE_TO_DEVICE);
  m.attr("MEMCPY_DEFAULT") = int(KILN_MEMCPY_DEFAULT);
  m.attr("MEM_MALLOC_HUGE_FIRST") = int(KILN_MEM_MALLOC_HUGE_FIRST);
  m.attr("MEM_MALLOC_HUGE_ONLY") = int(KILN_MEM_MALLOC_HUGE_ONLY);
  m.attr("MEM_MALLOC_NORMAL_ONLY") = int(KILN_MEM_MALLOC_NORMAL_ONLY);
  m.attr("DDR_MEM") = int(KILN_DDR_MEM);
  m.attr("HBM_MEM") = int(KILN_HBM_MEM);
  m.attr("EVENT_SYNC") = KILN_EVENT_SYNC;
  m.attr("EVENT_CAPTURE_STREAM_PROGRESS") = KILN_EVENT_CAPTURE_STREAM_PROGRESS;
  m.attr("EVENT_TIME_LINE") = KILN_EVENT_TIME_LINE;
  m.attr("EVENT_STATUS_COMPLETE") = int(KILN_EVENT_STATUS_COMPLETE);
  m.attr("EVENT_STATUS_NOT_READY") = int(KILN_EVENT_STATUS_NOT_READY);
  m.attr("STREAM_STATUS_COMPLETE") = int(KILN_STREAM_STATUS_COMPLETE);
  m.attr("STREAM_STATUS_NOT_READY") = int(KILN_STREAM_STATUS_NOT_READY);
  m.attr("CALLBACK_NO_BLOCK") = int(KILN_CALLBACK_NO_BLOCK);
  m.attr("CALLBACK_BLOCK") = int(KILN_CALLBACK_BLOCK);
  m.attr("DEVICE") = int(KILN_DEVICE);
  m.attr("HOST") = int(KILN_HOST);

  // ---- Version and run mode ----
  m.def("get_version", [] {
    int32_t major = 0, minor = 0, patch = 0;
    kilnError ret = kilnrtGetVersion(&major, &minor, &patch);
    return py::make_tuple(major, minor, patch, ret);
  }, "get_version() -> (major, minor, patch, ret): kilnrtGetVersion.");
  m.def("get_run_mode", [] {
    kilnrtRunMode mode = KILN_HOST;
    kilnError ret = kilnrtGetRunMode(&mode);
    return py::make_tuple(int(mode), ret);
  }, "get_run_mode() -> (run_mode, ret): always HOST (1), kilnrtGetRunMode.");

  // ---- Devices and contexts ----
  m.def("get_device_count", [] {
    uint32_t count = 0;
    kilnError ret = kilnrtGetDeviceCount(&count);
    return py::make_tuple(count, ret);
  }, "get_device_count() -> (count, ret): the logical devices (KILN_DEVICES=cpu:N makes N).");
  m.def("set_device", &kilnrtSetDevice, py::arg("device_id"), gil_release(),
        "set_device(device_id) -> ret: makes the device current on this thread (its default "
        "context is created on first use).");
  m.def("get_device", [] {
    int32_t id = -1;
    kilnError ret = kilnrtGetDevice(&id);
    return py::make_tuple(id, ret);
  }, "get_device() -> (device_id, ret): this thread's current device.");
  m.def("reset_device", &kilnrtResetDevice, py::arg("device_id"), gil_release(),
        "reset_device(device_id) -> ret: waits for the device's work and releases its default "
        "context once every set_device of it is matched.");
  m.def("synchronize_device", &kilnrtSynchronizeDevice, gil_release(),
        "synchronize_device() -> ret: waits until every stream of the current device is idle.");
  m.def("synchronize_device_with_timeout", &kilnrtSynchronizeDeviceWithTimeout, py::arg("timeout"),
        gil_release(), "synchronize_device_with_timeout(timeout_ms) -> ret (-1 waits forever).");
  m.def("create_context", [](int32_t device_id) {
    kilnrtContext ctx = nullptr;
    kilnError ret = kilnrtCreateContext(&ctx, device_id);
    return py::make_tuple(handle_int(ctx), ret);
  }, py::arg("device_id"),
        "create_context(device_id) -> (context, ret): a new context on the device, made current "
        "on this thread.");
  m.def("destroy_context", [](Ptr ctx) {
    py::gil_scoped_release release;
    return kilnrtDestroyContext(handle_ptr<void>(ctx));
  }, py::arg("context"), "destroy_context(context) -> ret.");
  m.def("set_context", [](Ptr ctx) { return kilnrtSetCurrentContext(handle_ptr<void>(ctx)); },
        py::arg("context"), "set_context(context) -> ret: makes the context current on this thread.");
  m.def("get_context", [] {
    kilnrtContext ctx = nullptr;
    kilnError ret = kilnrtGetCurrentContext(&ctx);
    return py::make_tuple(handle_int(ctx), ret);
  }, "get_context() -> (context, ret): this thread's current context.");

  // ---- Streams ----
  m.def("create_stream", [] {
    kilnrtStream stream = nullptr;
    kilnError ret = kilnrtCreateStream(&stream);
    return py::make_tuple(handle_int(stream), ret);
  }, "create_stream() -> (stream, ret): an in-order queue on the current context's device.");
  m.def("destroy_stream", [](Ptr stream) {
    py::gil_scoped_release release;
    return kilnrtDestroyStream(handle_ptr<void>(stream));
  }, py::arg("stream"), "destroy_stream(stream) -> ret: waits for the stream's work, then destroys it.");
  m.def("synchronize_stream", [](Ptr stream) {
    py::gil_scoped_release release;
    return kilnrtSynchronizeStream(handle_ptr<void>(stream));
  }, py::arg("stream"),
        "synchronize_stream(stream) -> ret: waits for the work submitted so far (0: the default "
        "stream). A task that failed gives ERROR_RT_TASK_FAILED (107021) with its message.");
  m.def("synchronize_stream_with_timeout", [](Ptr stream, int32_t timeout) {
    py::gil_scoped_release release;
    return kilnrtSynchronizeStreamWithTimeout(handle_ptr<void>(stream), timeout);
  }, py::arg("stream"), py::arg("timeout"),
        "synchronize_stream_with_timeout(stream, timeout_ms) -> ret: 107020 when time runs out.");
  m.def("stream_query", [](Ptr stream) {
    kilnrtStreamStatus status = KILN_STREAM_STATUS_COMPLETE;
    kilnError ret = kilnrtStreamQuery(handle_ptr<void>(stream), &status);
    return py::make_tuple(int(status), ret);
  }, py::arg("stream"), "stream_query(stream) -> (status, ret): STREAM_STATUS_COMPLETE or _NOT_READY.");
  m.def("stream_wait_event", [](Ptr stream, Ptr event) {
    return kilnrtStreamWaitEvent(handle_ptr<void>(stream), handle_ptr<void>(event));
  }, py::arg("stream"), py::arg("event"),
        "stream_wait_event(stream, event) -> ret: later work on the stream waits for the event's "
        "latest record.");

  // ---- Events ----
  m.def("create_event", [] {
    kilnrtEvent event = nullptr;
    kilnError ret = kilnrtCreateEvent(&event);
    return py::make_tuple(handle_int(event), ret);
  }, "create_event() -> (event, ret).");
  m.def("create_event_with_flag", [](uint32_t flag) {
    kilnrtEvent event = nullptr;
    kilnError ret = kilnrtCreateEventWithFlag(&event, flag);
    return py::make_tuple(handle_int(event), ret);
  }, py::arg("flag"), "create_event_with_flag(flag) -> (event, ret): EVENT_SYNC | EVENT_TIME_LINE ...");
  m.def("destroy_event", [](Ptr event) { return kilnrtDestroyEvent(handle_ptr<void>(event)); },
        py::arg("event"), "destroy_event(event) -> ret.");
  m.def("record_event", [](Ptr event, Ptr stream) {
    return kilnrtRecordEvent(handle_ptr<void>(event), handle_ptr<void>(stream));
  }, py::arg("event"), py::arg("stream"),
        "record_event(event, stream) -> ret: the event completes when the stream's earlier work has run.");
  m.def("reset_event", [](Ptr event, Ptr stream) {
    return kilnrtResetEvent(handle_ptr<void>(event), handle_ptr<void>(stream));
  }, py::arg("event"), py::arg("stream"), "reset_event(event, stream) -> ret.");
  m.def("query_event", [](Ptr event) {
    kilnrtEventStatus status = KILN_EVENT_STATUS_RESERVED;
    kilnError ret = kilnrtQueryEvent(handle_ptr<void>(event), &status);
    return py::make_tuple(int(status), ret);
  }, py::arg("event"), "query_event(event) -> (status, ret): EVENT_STATUS_COMPLETE or _NOT_READY.");
  m.def("synchronize_event", [](Ptr event) {
    py::gil_scoped_release release;
    return kilnrtSynchronizeEvent(handle_ptr<void>(event));
  }, py::arg("event"), "synchronize_event(event) -> ret: waits for the event's latest record.");
  m.def("synchronize_event_with_timeout", [](Ptr event, int32_t timeout) {
    py::gil_scoped_release release;
    return kilnrtSynchronizeEventWithTimeout(handle_ptr<void>(event), timeout);
  }, py::arg("event"), py::arg("timeout"), "synchronize_event_with_timeout(event, timeout_ms) -> ret.");
  m.def("event_elapsed_time", [](Ptr start, Ptr end) {
    float ms = 0;
    kilnError ret = kilnrtEventElapsedTime(&ms, handle_ptr<void>(start), handle_ptr<void>(end));
    return py::make_tuple(ms, ret);
  }, py::arg("start"), py::arg("end"),
        "event_elapsed_time(start, end) -> (ms, ret): milliseconds between two completed records.");

  // ---- Host callbacks ----
  m.def("launch_callback", [](py::object fn, py::object user_data, int block_type, Ptr stream) {
    auto* cb = new Callback{std::move(fn), std::move(user_data)};
    kilnError ret = kilnrtLaunchCallback(&run_callback, cb, static_cast<kilnrtCallbackBlockType>(block_type),
                                         handle_ptr<void>(stream));
    if (ret != KILN_SUCCESS) delete cb;  // never called
    return ret;
  }, py::arg("callback"), py::arg("user_data"), py::arg("block_type"), py::arg("stream"),
        "launch_callback(callback, user_data, block_type, stream) -> ret: callback(user_data) runs "
        "on a host thread in stream order (in process_report on a thread subscribed to the stream). "
        "CALLBACK_BLOCK makes later stream work wait for it. An exception in it is reported as "
        "unraisable.");
  m.def("subscribe_report", [](uint64_t thread_id, Ptr stream) {
    return kilnrtSubscribeReport(thread_id, handle_ptr<void>(stream));
  }, py::arg("thread_id"), py::arg("stream"),
        "subscribe_report(thread_id, stream) -> ret: callbacks of the stream run in that thread's "
        "process_report (thread_id: threading.get_native_id()... any id the thread uses consistently).");
  m.def("unsubscribe_report", [](uint64_t thread_id, Ptr stream) {
    return kilnrtUnSubscribeReport(thread_id, handle_ptr<void>(stream));
  }, py::arg("thread_id"), py::arg("stream"), "unsubscribe_report(thread_id, stream) -> ret.");
  m.def("process_report", &kilnrtProcessReport, py::arg("timeout"), gil_release(),
        "process_report(timeout_ms) -> ret: runs the pending callbacks of subscribed streams; "
        "107020 if none came in time.");

  // ---- Memory ----
  m.def("malloc", [](size_t size, int policy) {
    void* p = nullptr;
    kilnError ret = kilnrtMalloc(&p, size, static_cast<kilnrtMemMallocPolicy>(policy));
    return py::make_tuple(handle_int(p), ret);
  }, py::arg("size"), py::arg("policy") = int(KILN_MEM_MALLOC_HUGE_FIRST),
        "malloc(size, policy) -> (dev_ptr, ret): device memory of the current device, 64-byte "
        "aligned. On the CPU device it is host-addressable (kiln.util.ptr_to_numpy views it).");
  m.def("free", [](Ptr p) { return kilnrtFree(handle_ptr<void>(p)); }, py::arg("dev_ptr"),
        "free(dev_ptr) -> ret.");
  m.def("malloc_host", [](size_t size) {
    void* p = nullptr;
    kilnError ret = kilnrtMallocHost(&p, size);
    return py::make_tuple(handle_int(p), ret);
  }, py::arg("size"), "malloc_host(size) -> (host_ptr, ret): page-locked host memory for async copies.");
  m.def("free_host", [](Ptr p) { return kilnrtFreeHost(handle_ptr<void>(p)); }, py::arg("host_ptr"),
        "free_host(host_ptr) -> ret.");
  m.def("memcpy", [](py::object dst, size_t dest_max, py::object src, size_t count, int kind) {
    void* d = address_arg(dst, true);
    const void* s = address_arg(src, false);
    py::gil_scoped_release release;
    return kilnrtMemcpy(d, dest_max, s, count, static_cast<kilnrtMemcpyKind>(kind));
  }, py::arg("dst"), py::arg("dest_max"), py::arg("src"), py::arg("count"), py::arg("kind"),
        "memcpy(dst, dest_max, src, count, kind) -> ret: synchronous copy of count bytes. dst/src: "
        "int addresses, or NumPy arrays (C-contiguous) for host memory. The kind must match the "
        "domains (a device address where host memory belongs is ERROR_INVALID_MEMORY 200010).");
  m.def("memcpy_async", [](py::object dst, size_t dest_max, py::object src, size_t count, int kind, Ptr stream) {
    void* d = address_arg(dst, true);
    const void* s = address_arg(src, false);
    return kilnrtMemcpyAsync(d, dest_max, s, count, static_cast<kilnrtMemcpyKind>(kind), handle_ptr<void>(stream));
  }, py::arg("dst"), py::arg("dest_max"), py::arg("src"), py::arg("count"), py::arg("kind"), py::arg("stream"),
        "memcpy_async(dst, dest_max, src, count, kind, stream) -> ret: enqueued on the stream's copy "
        "engine; host memory (an array passed) must stay alive until the stream has run it.");
  m.def("memcpy2d", [](py::object dst, size_t dpitch, py::object src, size_t spitch, size_t width, size_t height,
                       int kind) {
    void* d = address_arg(dst, true);
    const void* s = address_arg(src, false);
    py::gil_scoped_release release;
    return kilnrtMemcpy2d(d, dpitch, s, spitch, width, height, static_cast<kilnrtMemcpyKind>(kind));
  }, py::arg("dst"), py::arg("dpitch"), py::arg("src"), py::arg("spitch"), py::arg("width"), py::arg("height"),
        py::arg("kind"),
        "memcpy2d(dst, dpitch, src, spitch, width, height, kind) -> ret: height rows of width bytes, "
        "pitched (image planes); synchronous.");
  m.def("memcpy2d_async", [](py::object dst, size_t dpitch, py::object src, size_t spitch, size_t width,
                             size_t height, int kind, Ptr stream) {
    void* d = address_arg(dst, true);
    const void* s = address_arg(src, false);
    return kilnrtMemcpy2dAsync(d, dpitch, s, spitch, width, height, static_cast<kilnrtMemcpyKind>(kind),
                               handle_ptr<void>(stream));
  }, py::arg("dst"), py::arg("dpitch"), py::arg("src"), py::arg("spitch"), py::arg("width"), py::arg("height"),
        py::arg("kind"), py::arg("stream"),
        "memcpy2d_async(dst, dpitch, src, spitch, width, height, kind, stream) -> ret.");
  m.def("memset", [](Ptr p, size_t max_count, int32_t value, size_t count) {
    py::gil_scoped_release release;
    return kilnrtMemset(handle_ptr<void>(p), max_count, value, count);
  }, py::arg("dev_ptr"), py::arg("max_count"), py::arg("value"), py::arg("count"),
        "memset(dev_ptr, max_count, value, count) -> ret: count bytes of device memory set to value & 0xff.");
  m.def("memset_async", [](Ptr p, size_t max_count, int32_t value, size_t count, Ptr stream) {
    return kilnrtMemsetAsync(handle_ptr<void>(p), max_count, value, count, handle_ptr<void>(stream));
  }, py::arg("dev_ptr"), py::arg("max_count"), py::arg("value"), py::arg("count"), py::arg("stream"),
        "memset_async(dev_ptr, max_count, value, count, stream) -> ret.");
  m.def("get_mem_info", [](int attr) {
    size_t free = 0, total = 0;
    kilnError ret = kilnrtGetMemInfo(static_cast<kilnrtMemAttr>(attr), &free, &total);
    return py::make_tuple(free, total, ret);
  }, py::arg("attr"), "get_mem_info(attr) -> (free, total, ret): bytes of the current device's memory.");
  m.def("get_mem_stats", [](int32_t device_id) {
    kilnrtMemStats s{};
    kilnError ret = kilnrtGetMemStats(device_id, &s);
    py::dict d;
    d["in_use"] = s.inUse;
    d["cached"] = s.cached;
    d["peak_in_use"] = s.peakInUse;
    d["reserved"] = s.reserved;
    d["alloc_count"] = s.allocCount;
    d["cache_hits"] = s.cacheHits;
    d["fragmentation"] = s.fragmentation;
    return py::make_tuple(d, ret);
  }, py::arg("device_id"),
        "get_mem_stats(device_id) -> (dict, ret): the caching allocator's statistics (in_use, cached, "
        "peak_in_use, reserved, alloc_count, cache_hits, fragmentation); a Kiln extension.");
  m.def("empty_cache", &kilnrtEmptyCache, py::arg("device_id"),
        "empty_cache(device_id) -> ret: returns the device's cached free blocks to the system.");
}

}  // namespace kiln::python
