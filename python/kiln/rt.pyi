"""Runtime (pyACL's acl.rt): devices, contexts, streams, events, memory.

Each function wraps one kilnrt* function of include/kiln/kiln.h. Functions return the
error code `ret` (0 is success; kiln.get_recent_err_msg() says why) or a tuple
(value, ret); handles and addresses are ints. Blocking calls release the GIL."""

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]

CALLBACK_BLOCK: int
CALLBACK_NO_BLOCK: int
DDR_MEM: int
DEVICE: int
EVENT_CAPTURE_STREAM_PROGRESS: int
EVENT_STATUS_COMPLETE: int
EVENT_STATUS_NOT_READY: int
EVENT_SYNC: int
EVENT_TIME_LINE: int
HBM_MEM: int
HOST: int
MEMCPY_DEFAULT: int
MEMCPY_DEVICE_TO_DEVICE: int
MEMCPY_DEVICE_TO_HOST: int
MEMCPY_HOST_TO_DEVICE: int
MEMCPY_HOST_TO_HOST: int
MEM_MALLOC_HUGE_FIRST: int
MEM_MALLOC_HUGE_ONLY: int
MEM_MALLOC_NORMAL_ONLY: int
STREAM_STATUS_COMPLETE: int
STREAM_STATUS_NOT_READY: int

def create_context(device_id: int) -> tuple[int, int]:
    """create_context(device_id) -> (context, ret): a new context on the device, made current on
    this thread.
    """

def create_event() -> tuple[int, int]:
    """create_event() -> (event, ret)."""

def create_event_with_flag(flag: int) -> tuple[int, int]:
    """create_event_with_flag(flag) -> (event, ret): EVENT_SYNC | EVENT_TIME_LINE ..."""

def create_stream() -> tuple[int, int]:
    """create_stream() -> (stream, ret): an in-order queue on the current context's device."""

def destroy_context(context: int) -> int:
    """destroy_context(context) -> ret."""

def destroy_event(event: int) -> int:
    """destroy_event(event) -> ret."""

def destroy_stream(stream: int) -> int:
    """destroy_stream(stream) -> ret: waits for the stream's work, then destroys it."""

def empty_cache(device_id: int) -> int:
    """empty_cache(device_id) -> ret: returns the device's cached free blocks to the system."""

def event_elapsed_time(start: int, end: int) -> tuple[float, int]:
    """event_elapsed_time(start, end) -> (ms, ret): milliseconds between two completed records."""

def free(dev_ptr: int) -> int:
    """free(dev_ptr) -> ret."""

def free_host(host_ptr: int) -> int:
    """free_host(host_ptr) -> ret."""

def get_context() -> tuple[int, int]:
    """get_context() -> (context, ret): this thread's current context."""

def get_device() -> tuple[int, int]:
    """get_device() -> (device_id, ret): this thread's current device."""

def get_device_count() -> tuple[int, int]:
    """get_device_count() -> (count, ret): the logical devices (KILN_DEVICES=cpu:N makes N)."""

def get_mem_info(attr: int) -> tuple[int, int, int]:
    """get_mem_info(attr) -> (free, total, ret): bytes of the current device's memory."""

def get_mem_stats(device_id: int) -> tuple[dict[str, Any], int]:
    """get_mem_stats(device_id) -> (dict, ret): the caching allocator's statistics (in_use, cached,
    peak_in_use, reserved, alloc_count, cache_hits, fragmentation); a Kiln extension.
    """

def get_run_mode() -> tuple[int, int]:
    """get_run_mode() -> (run_mode, ret): always HOST (1), kilnrtGetRunMode."""

def get_version() -> tuple[int, int, int, int]:
    """get_version() -> (major, minor, patch, ret): kilnrtGetVersion."""

def launch_callback(callback: Any, user_data: Any, block_type: int, stream: int) -> int:
    """launch_callback(callback, user_data, block_type, stream) -> ret: callback(user_data) runs on
    a host thread in stream order (in process_report on a thread subscribed to the stream).
    CALLBACK_BLOCK makes later stream work wait for it. An exception in it is reported as
    unraisable.
    """

def malloc(size: int, policy: int = 0) -> tuple[int, int]:
    """malloc(size, policy) -> (dev_ptr, ret): device memory of the current device, 64-byte
    aligned. On the CPU device it is host-addressable (kiln.util.ptr_to_numpy views it).
    """

def malloc_host(size: int) -> tuple[int, int]:
    """malloc_host(size) -> (host_ptr, ret): page-locked host memory for async copies."""

def memcpy(dst: Address, dest_max: int, src: Address, count: int, kind: int) -> int:
    """memcpy(dst, dest_max, src, count, kind) -> ret: synchronous copy of count bytes. dst/src:
    int addresses, or NumPy arrays (C-contiguous) for host memory. The kind must match the
    domains (a device address where host memory belongs is ERROR_INVALID_MEMORY 200010).
    """

def memcpy2d(dst: Address, dpitch: int, src: Address, spitch: int, width: int, height: int, kind: int) -> int:
    """memcpy2d(dst, dpitch, src, spitch, width, height, kind) -> ret: height rows of width bytes,
    pitched (image planes); synchronous.
    """

def memcpy2d_async(dst: Address, dpitch: int, src: Address, spitch: int, width: int, height: int, kind: int, stream: int) -> int:
    """memcpy2d_async(dst, dpitch, src, spitch, width, height, kind, stream) -> ret."""

def memcpy_async(dst: Address, dest_max: int, src: Address, count: int, kind: int, stream: int) -> int:
    """memcpy_async(dst, dest_max, src, count, kind, stream) -> ret: enqueued on the stream's copy
    engine; host memory (an array passed) must stay alive until the stream has run it.
    """

def memset(dev_ptr: int, max_count: int, value: int, count: int) -> int:
    """memset(dev_ptr, max_count, value, count) -> ret: count bytes of device memory set to value &
    0xff.
    """

def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int) -> int:
    """memset_async(dev_ptr, max_count, value, count, stream) -> ret."""

def process_report(timeout: int) -> int:
    """process_report(timeout_ms) -> ret: runs the pending callbacks of subscribed streams; 107020
    if none came in time.
    """

def query_event(event: int) -> tuple[int, int]:
    """query_event(event) -> (status, ret): EVENT_STATUS_COMPLETE or _NOT_READY."""

def record_event(event: int, stream: int) -> int:
    """record_event(event, stream) -> ret: the event completes when the stream's earlier work has
    run.
    """

def reset_device(device_id: int) -> int:
    """reset_device(device_id) -> ret: waits for the device's work and releases its default context
    once every set_device of it is matched.
    """

def reset_event(event: int, stream: int) -> int:
    """reset_event(event, stream) -> ret."""

def set_context(context: int) -> int:
    """set_context(context) -> ret: makes the context current on this thread."""

def set_device(device_id: int) -> int:
    """set_device(device_id) -> ret: makes the device current on this thread (its default context
    is created on first use).
    """

def stream_query(stream: int) -> tuple[int, int]:
    """stream_query(stream) -> (status, ret): STREAM_STATUS_COMPLETE or _NOT_READY."""

def stream_wait_event(stream: int, event: int) -> int:
    """stream_wait_event(stream, event) -> ret: later work on the stream waits for the event's
    latest record.
    """

def subscribe_report(thread_id: int, stream: int) -> int:
    """subscribe_report(thread_id, stream) -> ret: callbacks of the stream run in that thread's
    process_report (thread_id: threading.get_native_id()... any id the thread uses
    consistently).
    """

def synchronize_device() -> int:
    """synchronize_device() -> ret: waits until every stream of the current device is idle."""

def synchronize_device_with_timeout(timeout: int) -> int:
    """synchronize_device_with_timeout(timeout_ms) -> ret (-1 waits forever)."""

def synchronize_event(event: int) -> int:
    """synchronize_event(event) -> ret: waits for the event's latest record."""

def synchronize_event_with_timeout(event: int, timeout: int) -> int:
    """synchronize_event_with_timeout(event, timeout_ms) -> ret."""

def synchronize_stream(stream: int) -> int:
    """synchronize_stream(stream) -> ret: waits for the work submitted so far (0: the default
    stream). A task that failed gives ERROR_RT_TASK_FAILED (107021) with its message.
    """

def synchronize_stream_with_timeout(stream: int, timeout: int) -> int:
    """synchronize_stream_with_timeout(stream, timeout_ms) -> ret: 107020 when time runs out."""

def unsubscribe_report(thread_id: int, stream: int) -> int:
    """unsubscribe_report(thread_id, stream) -> ret."""
