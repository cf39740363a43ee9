"""NumPy arrays <-> addresses (pyACL's acl.util). On the CPU device, device memory is host-addressable, so ptr_to_numpy views kiln.rt.malloc memory without a copy."""

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]



def bytes_to_ptr(data: Address) -> int:
    """bytes_to_ptr(data) -> address of a bytes/bytearray object's contents (read-only for bytes)."""

def numpy_to_ptr(array: npt.NDArray[Any]) -> int:
    """numpy_to_ptr(array) -> address of a C-contiguous array's first byte (host memory). The array
    must outlive every use of the address.
    """

def ptr_to_bytes(ptr: int, size: int) -> bytes:
    """ptr_to_bytes(ptr, size) -> bytes: a copy of size bytes of host-addressable memory."""

def ptr_to_numpy(ptr: int, shape: Sequence[int], dtype: npt.DTypeLike) -> npt.NDArray[Any]:
    """ptr_to_numpy(ptr, shape, dtype) -> a writable NumPy view (no copy) of host-addressable
    memory: kiln.rt.malloc_host memory, and kiln.rt.malloc memory of the CPU device. dtype: a
    NumPy dtype or its type number as pyACL passes it. The view does not own the memory: do not
    use it after free. (An accelerator's device memory is not host-addressable: copy it with
    kiln.rt.memcpy.)
    """
