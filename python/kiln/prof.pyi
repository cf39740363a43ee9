"""Profiling (pyACL's acl.prof): init(dir), start(), stop(), finalize() writes
timeline.json, op_summary.csv, op_statistic.csv and api_statistic.csv into dir.
Unlike aclprof there is no config object: everything is recorded. These calls do not
need kiln.init(); while KILN_PROFILE is set, init() returns 100002."""

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]



def finalize() -> int:
    """finalize() -> ret: stops and writes the profile files into the directory of init()."""

def init(profiler_result_path: str) -> int:
    """init(profiler_result_path) -> ret: the output directory (created if missing)."""

def start(config: object = None) -> int:
    """start(config=None) -> ret: turns recording on (config is accepted for pyACL code and
    ignored).
    """

def stop(config: object = None) -> int:
    """stop(config=None) -> ret: turns recording off."""
