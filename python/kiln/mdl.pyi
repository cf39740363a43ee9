"""Models (pyACL's acl.mdl): load, execute, descriptions, datasets, dynamic AIPP.

Each function wraps one kilnmdl* function of include/kiln/kiln.h; returns `ret` codes or
(value, ret) tuples; handles are ints. execute() releases the GIL."""

from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]

ARGB8888_U8: int
AYUV444_U8: int
DATA_WITHOUT_AIPP: int
DATA_WITH_DYNAMIC_AIPP: int
DATA_WITH_STATIC_AIPP: int
DYNAMIC_AIPP_NODE: int
INVALID_NODE_INDEX: int
RGB888_U8: int
XRGB8888_U8: int
YUV400_U8: int
YUV420SP_U8: int
YUV422SP_U8: int
YUYV_U8: int

def add_dataset_buffer(dataset: int, data_buffer: int) -> tuple[Any, ...]:
    """add_dataset_buffer(dataset, data_buffer) -> (dataset, ret), as pyACL."""

def create_aipp(batch_size: int) -> int:
    """create_aipp(batch_size) -> aipp: a dynamic AIPP parameter set (0 for batch_size 0 or above
    65536).
    """

def create_dataset() -> int:
    """create_dataset() -> dataset (0 on failure)."""

def create_desc() -> int:
    """create_desc() -> desc: an empty model description (0 on failure)."""

def destroy_aipp(aipp: int) -> int:
    """destroy_aipp(aipp) -> ret."""

def destroy_dataset(dataset: int) -> int:
    """destroy_dataset(dataset) -> ret: the buffers in it are not destroyed."""

def destroy_desc(model_desc: int) -> int:
    """destroy_desc(model_desc) -> ret."""

def execute(model_id: int, input: int, output: int) -> int:
    """execute(model_id, input, output) -> ret: runs the model on the calling thread (GIL
    released); the datasets hold device buffers in the model's input/output order.
    """

def execute_async(model_id: int, input: int, output: int, stream: int) -> int:
    """execute_async(model_id, input, output, stream) -> ret: enqueued on the stream; the datasets
    and buffers must stay alive until kiln.rt.synchronize_stream.
    """

def get_aipp_type(model_id: int, index: int) -> tuple[int, int, int]:
    """get_aipp_type(model_id, index) -> (type, attached_index, ret): DATA_WITHOUT_AIPP ... and the
    parameter input of a dynamic AIPP input (INVALID_NODE_INDEX otherwise).
    """

def get_dataset_buffer(dataset: int, index: int) -> int:
    """get_dataset_buffer(dataset, index) -> data_buffer (0 on error)."""

def get_dataset_num_buffers(dataset: int) -> int:
    """get_dataset_num_buffers(dataset) -> int."""

def get_dataset_tensor_desc(dataset: int, index: int) -> int:
    """get_dataset_tensor_desc(dataset, index) -> tensor_desc: after an execution, the actual shape
    of output index (owned by the dataset; 0 on error).
    """

def get_desc(model_desc: int, model_id: int) -> int:
    """get_desc(model_desc, model_id) -> ret: fills the description of the model."""

def get_first_aipp_info(model_id: int, index: int) -> tuple[dict[str, Any], int]:
    """get_first_aipp_info(model_id, index) -> (info, ret): the static AIPP configuration of an
    image input as a dict keyed by aclAippInfo's field names (empty on error).
    """

def get_input_data_type(model_desc: int, index: int) -> int:
    """get_input_data_type(model_desc, index) -> int: a kiln.FLOAT ... value (-1 on error)."""

def get_input_dims(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """get_input_dims(model_desc, index) -> (dims, ret): dims is {'name', 'dimCount', 'dims'} as
    pyACL; -1 for an open dim.
    """

def get_input_format(model_desc: int, index: int) -> int:
    """get_input_format(model_desc, index) -> int (kiln.FORMAT_*)."""

def get_input_index_by_name(model_desc: int, name: str) -> tuple[int, int]:
    """get_input_index_by_name(model_desc, name) -> (index, ret)."""

def get_input_name_by_index(model_desc: int, index: int) -> str:
    """get_input_name_by_index(model_desc, index) -> str ('' on error)."""

def get_input_size_by_index(model_desc: int, index: int) -> int:
    """get_input_size_by_index(model_desc, index) -> int: bytes (0 when a dim is open)."""

def get_num_inputs(model_desc: int) -> int:
    """get_num_inputs(model_desc) -> int."""

def get_num_outputs(model_desc: int) -> int:
    """get_num_outputs(model_desc) -> int."""

def get_output_data_type(model_desc: int, index: int) -> int:
    """get_output_data_type(model_desc, index) -> int."""

def get_output_dims(model_desc: int, index: int) -> tuple[dict[str, Any], int]:
    """get_output_dims(model_desc, index) -> (dims, ret)."""

def get_output_format(model_desc: int, index: int) -> int:
    """get_output_format(model_desc, index) -> int (kiln.FORMAT_*)."""

def get_output_index_by_name(model_desc: int, name: str) -> tuple[int, int]:
    """get_output_index_by_name(model_desc, name) -> (index, ret)."""

def get_output_name_by_index(model_desc: int, index: int) -> str:
    """get_output_name_by_index(model_desc, index) -> str ('' on error)."""

def get_output_size_by_index(model_desc: int, index: int) -> int:
    """get_output_size_by_index(model_desc, index) -> int: bytes (0 when a dim is open)."""

def load_from_file(model_path: str) -> tuple[int, int]:
    """load_from_file(model_path) -> (model_id, ret): loads a .kiln model for the current context's
    device.
    """

def load_from_file_with_mem(model_path: str, work_ptr: int, work_size: int, weight_ptr: int, weight_size: int) -> tuple[int, int]:
    """load_from_file_with_mem(model_path, work_ptr, work_size, weight_ptr, weight_size) ->
    (model_id, ret): with a caller's activation workspace (device memory, query_size's
    work_size); weight_ptr must be 0.
    """

def load_from_mem(model: Address, model_size: int) -> tuple[int, int]:
    """load_from_mem(model, model_size) -> (model_id, ret): from host bytes (bytes, a NumPy array
    or an address); the bytes are copied.
    """

def query_size(model_path: str) -> tuple[int, int, int]:
    """query_size(model_path) -> (work_size, weight_size, ret)."""

def set_aipp_ax_swap_switch(aipp: int, ax_swap_switch: int) -> int:
    """set_aipp_ax_swap_switch(aipp, switch) -> ret: alpha byte last."""

def set_aipp_by_input_index(model_id: int, dataset: int, index: int, aipp: int) -> int:
    """set_aipp_by_input_index(model_id, dataset, index, aipp) -> ret: the same, index naming the
    image input.
    """

def set_aipp_crop_params(aipp: int, crop_switch: int, crop_start_pos_w: int, crop_start_pos_h: int, crop_size_w: int, crop_size_h: int, batch_index: int) -> int:
    """set_aipp_crop_params(aipp, switch, start_w, start_h, size_w, size_h, batch_index) -> ret."""

def set_aipp_csc_params(aipp: int, csc_switch: int, r0c0: int, r0c1: int, r0c2: int, r1c0: int, r1c1: int, r1c2: int, r2c0: int, r2c1: int, r2c2: int, output_bias_r0: int, output_bias_r1: int, output_bias_r2: int, input_bias_r0: int, input_bias_r1: int, input_bias_r2: int) -> int:
    """set_aipp_csc_params(aipp, csc_switch, 9 matrix entries (1/256 units), 3 output biases, 3
    input biases) -> ret: colour-space conversion for every image.
    """

def set_aipp_dtc_pixel_mean(aipp: int, mean_chn0: int, mean_chn1: int, mean_chn2: int, mean_chn3: int, batch_index: int) -> int:
    """set_aipp_dtc_pixel_mean(aipp, c0, c1, c2, c3, batch_index) -> ret."""

def set_aipp_dtc_pixel_min(aipp: int, min_chn0: float, min_chn1: float, min_chn2: float, min_chn3: float, batch_index: int) -> int:
    """set_aipp_dtc_pixel_min(aipp, c0, c1, c2, c3, batch_index) -> ret."""

def set_aipp_input_format(aipp: int, input_format: int) -> int:
    """set_aipp_input_format(aipp, input_format) -> ret (kiln.mdl.YUV420SP_U8 ...)."""

def set_aipp_padding_params(aipp: int, padding_switch: int, padding_size_top: int, padding_size_bottom: int, padding_size_left: int, padding_size_right: int, batch_index: int) -> int:
    """set_aipp_padding_params(aipp, switch, top, bottom, left, right, batch_index) -> ret."""

def set_aipp_pixel_var_reci(aipp: int, var_reci_chn0: float, var_reci_chn1: float, var_reci_chn2: float, var_reci_chn3: float, batch_index: int) -> int:
    """set_aipp_pixel_var_reci(aipp, c0, c1, c2, c3, batch_index) -> ret: out = (v - mean - min) *
    var_reci.
    """

def set_aipp_rbuv_swap_switch(aipp: int, rbuv_swap_switch: int) -> int:
    """set_aipp_rbuv_swap_switch(aipp, switch) -> ret: swap U/V or R/B."""

def set_aipp_scf_params(aipp: int, scf_switch: int, scf_input_size_w: int, scf_input_size_h: int, scf_output_size_w: int, scf_output_size_h: int, batch_index: int) -> int:
    """set_aipp_scf_params(aipp, switch, in_w, in_h, out_w, out_h, batch_index) -> ret: resize of
    one image.
    """

def set_aipp_src_image_size(aipp: int, src_image_size_w: int, src_image_size_h: int) -> int:
    """set_aipp_src_image_size(aipp, w, h) -> ret: pixels of every source image."""

def set_dataset_tensor_desc(dataset: int, tensor_desc: int, index: int) -> tuple[int, int]:
    """set_dataset_tensor_desc(dataset, tensor_desc, index) -> (dataset, ret): the actual shape of
    input index (the dataset keeps a copy).
    """

def set_input_aipp(model_id: int, dataset: int, index: int, aipp: int) -> int:
    """set_input_aipp(model_id, dataset, index, aipp) -> ret: checks the set against the model and
    writes it into the dataset's buffer index (the parameter input).
    """

def unload(model_id: int) -> int:
    """unload(model_id) -> ret: waits for executions in flight, then releases the model."""
