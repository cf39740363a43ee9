"""Collective communication (include/kiln/comm.h, HCCL's shape): communicators and collectives.

all_reduce/broadcast/... wrap kilnAllReduce/kilnBroadcast/... one to one over addresses (ints, or
host NumPy arrays) and return ret; the *_array forms take NumPy arrays, run synchronously (GIL
released) and return (result, ret). Ranks as threads: init_all(devices), each thread calls
kiln.rt.set_device(devices[rank]) and uses its comm; ranks as processes: init_from_env under mpirun."""

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]

DATA_TYPE_BF16: int
DATA_TYPE_FP16: int
DATA_TYPE_FP32: int
DATA_TYPE_FP64: int
DATA_TYPE_INT16: int
DATA_TYPE_INT32: int
DATA_TYPE_INT64: int
DATA_TYPE_INT8: int
DATA_TYPE_UINT16: int
DATA_TYPE_UINT32: int
DATA_TYPE_UINT64: int
DATA_TYPE_UINT8: int
ERROR_COMM_ABORTED: int
ERROR_COMM_CONNECT: int
ERROR_COMM_REMOTE: int
ERROR_COMM_TIMEOUT: int
REDUCE_MAX: int
REDUCE_MIN: int
REDUCE_PROD: int
REDUCE_SUM: int

def abort(comm: int) -> int:
    """abort(comm) -> ret: pending and later operations fail with 400003; never blocks."""

def all_gather(send_buf: Address, recv_buf: Address, send_count: int, data_type: int, comm: int, stream: int) -> int:
    """all_gather(send_buf, recv_buf, send_count, data_type, comm, stream) -> ret: recv_buf holds
    rank_size * send_count elements.
    """

def all_gather_array(array: npt.NDArray[Any], comm: int, stream: int = 0) -> tuple[npt.NDArray[Any], int]:
    """all_gather_array(array, comm, stream=0) -> (result, ret): result[r] is rank r's array (shape
    (rank_size, *array.shape)). Synchronous.
    """

def all_reduce(send_buf: Address, recv_buf: Address, count: int, data_type: int, op: int, comm: int, stream: int) -> int:
    """all_reduce(send_buf, recv_buf, count, data_type, op, comm, stream) -> ret: enqueued on the
    stream (0: default). Buffers: addresses (device memory) or host arrays kept alive until the
    stream passes the call; send_buf == recv_buf is in place.
    """

def all_reduce_array(array: npt.NDArray[Any], op: int, comm: int, stream: int = 0, out: npt.NDArray[Any] | None = None) -> tuple[npt.NDArray[Any], int]:
    """all_reduce_array(array, op, comm, stream=0, out=None) -> (result, ret): the element-wise
    reduction (REDUCE_SUM ...) of every rank's array, in a new array (or out; out=array is in
    place). Synchronous: waits for the stream with the GIL released.
    """

def all_to_all(send_buf: Address, send_count: int, send_type: int, recv_buf: Address, recv_count: int, recv_type: int, comm: int, stream: int) -> int:
    """all_to_all(send_buf, send_count, send_type, recv_buf, recv_count, recv_type, comm, stream)
    -> ret.
    """

def barrier(comm: int, stream: int) -> int:
    """barrier(comm, stream) -> ret."""

def broadcast(buf: Address, count: int, data_type: int, root: int, comm: int, stream: int) -> int:
    """broadcast(buf, count, data_type, root, comm, stream) -> ret."""

def broadcast_array(array: npt.NDArray[Any], root: int, comm: int, stream: int = 0) -> int:
    """broadcast_array(array, root, comm, stream=0) -> ret: root's array is copied into the array
    of every other rank, in place. Synchronous.
    """

def destroy(comm: int) -> int:
    """destroy(comm) -> ret: waits for the communicator's queued operations, then frees it."""

def get_async_error(comm: int) -> tuple[int, int]:
    """get_async_error(comm) -> (async_error, ret): the code of the first failed operation."""

def get_rank_id(comm: int) -> tuple[int, int]:
    """get_rank_id(comm) -> (rank, ret)."""

def get_rank_size(comm: int) -> tuple[int, int]:
    """get_rank_size(comm) -> (rank_size, ret)."""

def get_root_info() -> tuple[bytes, int]:
    """get_root_info() -> (root_info: bytes, ret): on the process that will be rank 0
    (kilnCommGetRootInfo).
    """

def group_end() -> int:
    """group_end() -> ret: launches the collected operations together."""

def group_start() -> int:
    """group_start() -> ret: this thread's operations are collected until group_end()."""

def init_all(devices: Sequence[int]) -> tuple[list[int], int]:
    """init_all(devices) -> ([comm, ...], ret): one process, rank i on devices[i] (ranks are
    threads: each calls kiln.rt.set_device(devices[i]) and uses comms[i]).
    """

def init_from_env() -> tuple[int, int]:
    """init_from_env() -> (comm, ret): rank and size from mpirun's environment (OMPI_COMM_WORLD_*)
    or KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR.
    """

def init_root_info(n_ranks: int, root_info: bytes, rank: int) -> tuple[int, int]:
    """init_root_info(n_ranks, root_info, rank) -> (comm, ret): joins the world (blocks until all
    n_ranks joined; GIL released). Uses the current context's device.
    """

def recv(recv_buf: Address, count: int, data_type: int, src_rank: int, comm: int, stream: int) -> int:
    """recv(recv_buf, count, data_type, src_rank, comm, stream) -> ret."""

def reduce(send_buf: Address, recv_buf: Address, count: int, data_type: int, op: int, root: int, comm: int, stream: int) -> int:
    """reduce(send_buf, recv_buf, count, data_type, op, root, comm, stream) -> ret (recv_buf on
    root only).
    """

def reduce_array(array: npt.NDArray[Any], op: int, root: int, comm: int, stream: int = 0) -> tuple[npt.NDArray[Any], int]:
    """reduce_array(array, op, root, comm, stream=0) -> (result, ret): the reduction on root (on
    other ranks the result's contents are undefined). Synchronous.
    """

def reduce_scatter(send_buf: Address, recv_buf: Address, recv_count: int, data_type: int, op: int, comm: int, stream: int) -> int:
    """reduce_scatter(send_buf, recv_buf, recv_count, data_type, op, comm, stream) -> ret: rank r
    gets the reduction of block r.
    """

def reduce_scatter_array(array: npt.NDArray[Any], op: int, comm: int, stream: int = 0) -> tuple[npt.NDArray[Any], int]:
    """reduce_scatter_array(array, op, comm, stream=0) -> (result, ret): rank r gets the reduction
    of block r of the flattened array (rank_size equal blocks; shape (rows / rank_size, ...)
    when the first dim splits, else flat). Synchronous.
    """

def send(send_buf: Address, count: int, data_type: int, dest_rank: int, comm: int, stream: int) -> int:
    """send(send_buf, count, data_type, dest_rank, comm, stream) -> ret."""
