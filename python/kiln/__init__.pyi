"""Type stubs of the kiln package (docs/python.md)."""

from concurrent.futures import Future
from os import PathLike
from typing import Any, Callable, Iterator, Mapping, Sequence, Union, overload

import numpy as np
import numpy.typing as npt

# The pyACL-shaped low level (stubs in their own files).
from . import comm as comm, mdl as mdl, prof as prof, rt as rt, util as util

__version__: str

ShapeSpec = Union[str, Mapping[str, Sequence[Union[int, None]]]]

class Error(Exception):
    """A Kiln failure; str(e) names the thing at fault."""

    code: int
    """The kilnError code (include/kiln/kiln.h), e.g. 100000 for an invalid parameter."""

ERROR_INVALID_PARAM: int
ERROR_UNINITIALIZE: int
ERROR_INVALID_FILE: int
ERROR_MODEL_INPUT_NOT_MATCH: int
ERROR_MODEL_OUTPUT_NOT_MATCH: int
ERROR_INVALID_RESOURCE_HANDLE: int
ERROR_FEATURE_UNSUPPORTED: int
ERROR_FAILURE: int
SUCCESS: int

class NodeArg:
    """An input or output of a model, as ONNX Runtime's NodeArg."""

    @property
    def name(self) -> str:
        """The tensor's name in the model."""
    @property
    def shape(self) -> list[Union[int, str, None]] | None:
        """Dims: ints, and for an open dim its symbolic name or None; None for an unknown rank."""
    @property
    def type(self) -> str:
        """ONNX Runtime's type string, e.g. 'tensor(float)'."""
    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype (uint16 carries bfloat16 bits; None for strings)."""

class InferenceSession:
    """A model loaded for inference, as onnxruntime.InferenceSession."""

    def __init__(
        self,
        path: Union[str, PathLike[str]],
        threads: int | None = None,
        device: int = 0,
        input_shapes: ShapeSpec | None = None,
        precision: str | None = None,
    ) -> None:
        """Loads an .onnx (compiled in memory) or .kiln model on `device`."""
    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs, in order."""
    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in order."""
    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]) -> list[Any]:
        """Runs the model; returns the outputs named (all for None): numpy arrays (of str,
        dtype object, for tensor(string)), lists of arrays for sequences, None for an empty
        optional."""
    def run_async(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]) -> Future[list[Any]]:
        """run() on a worker thread, as a concurrent.futures.Future."""
    def close(self) -> None:
        """Unloads the model once runs in progress finish; idempotent."""
    @property
    def closed(self) -> bool:
        """Whether close() has been called."""
    @property
    def path(self) -> str:
        """The model file the session was created from."""
    def __enter__(self) -> InferenceSession: ...
    def __exit__(self, *exc: object) -> bool: ...

def compile(
    src: Union[str, PathLike[str]],
    dst: Union[str, PathLike[str]],
    input_shape: ShapeSpec | None = None,
    dynamic_dims: Union[str, Sequence[Mapping[str, Sequence[int]]], None] = None,
    dynamic_batch_size: Union[str, Sequence[int], None] = None,
    precision: str | None = None,
    insert_op_conf: Union[str, PathLike[str], None] = None,
    report: bool = True,
) -> dict[str, Any] | None:
    """Compiles an .onnx into a .kiln (kiln compile); returns the compile report as a dict."""

def inspect(path: Union[str, PathLike[str]], nodes: bool = False) -> dict[str, Any]:
    """What a model file holds, as `kiln inspect --json`'s dict."""

class OcrPipeline:
    """Reads the text in images with the PP-OCR models in model_dir, as `kiln ocr` (docs/ocr.md)."""

    def __init__(
        self,
        model_dir: str,
        precision: str = "fp32",
        angle_classifier: bool = True,
        merge_lines: bool = True,
        rec_batch: int = 1,
        cache_dir: str | None = None,
    ) -> None: ...
    def run(self, image: Union[str, bytes, npt.NDArray[np.uint8]], pixel_format: str = "bgr") -> dict[str, Any]:
        """{'lines': [{'text', 'confidence', 'box'}], 'ms', 'note'} for a path, encoded bytes or
        uint8 pixels ([H, W, 3] BGR/RGB or [H, W] grey)."""
    def close(self) -> None: ...
    def __enter__(self) -> OcrPipeline: ...
    def __exit__(self, *exc: object) -> bool: ...

class Tokenizer:
    """A SentencePiece model (docs/llm.md): text to token ids and back."""

    def __init__(self, path: str) -> None: ...
    def encode(self, text: Union[str, bytes], add_bos: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def eos_id(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Tokenizer: ...
    def __exit__(self, *exc: object) -> bool: ...

class LlmEngine:
    """The LLM engine (docs/llm.md) on a decoder directory of bench/llm/export_decoder.py."""

    def __init__(
        self,
        model_dir: str,
        *,
        block_size: int = 16,
        kv_cache_mib: int = 256,
        kv_blocks: int = 0,
        max_batch: int = 16,
        step_tokens: int = 0,
        prefill_buckets: Sequence[int] | None = None,
        threads: int = 0,
        record_logits: bool = False,
        kv_dtype: str = "fp32",
    ) -> None: ...
    @property
    def model_info(self) -> dict[str, Any]: ...
    def add_request(
        self,
        prompt_ids: Sequence[int],
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_tokens: Sequence[int] = (),
    ) -> int: ...
    def add_text_request(
        self,
        text: Union[str, bytes],
        tokenizer: Tokenizer,
        *,
        max_new_tokens: int = 16,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_tokens: Sequence[int] = (),
    ) -> int: ...
    def cancel(self, request_id: int) -> None: ...
    def release(self, request_id: int) -> None: ...
    def on_token(self, callback: Callable[[int, int, bool], Any] | None) -> None: ...
    def step(self) -> bool: ...
    def run(self) -> None: ...
    def status(self, request_id: int) -> str: ...
    def tokens(self, request_id: int) -> list[int]: ...
    def poll(self, request_id: int) -> tuple[list[int], str]: ...
    def logits(self, request_id: int, index: int) -> npt.NDArray[np.float32]: ...
    def stats(self) -> dict[str, Any]: ...
    @overload
    def stream(self, prompt: Sequence[int], tokenizer: None = None, **params: Any) -> Iterator[int]: ...
    @overload
    def stream(
        self, prompt: Union[str, bytes], tokenizer: Tokenizer, stop: Union[str, Sequence[str], None] = None, **params: Any
    ) -> Iterator[str]: ...
    @overload
    def generate(self, prompts: Sequence[Sequence[int]], tokenizer: None = None, **params: Any) -> list[list[int]]: ...
    @overload
    def generate(
        self, prompts: Union[str, bytes], tokenizer: Tokenizer, stop: Union[str, Sequence[str], None] = None, **params: Any
    ) -> str: ...
    @overload
    def generate(
        self,
        prompts: Sequence[Union[str, bytes, Sequence[int]]],
        tokenizer: Tokenizer,
        stop: Union[str, Sequence[str], None] = None,
        **params: Any,
    ) -> list[Union[str, list[int]]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> LlmEngine: ...
    def __exit__(self, *exc: object) -> bool: ...

def ocr(image: Union[str, bytes, npt.NDArray[np.uint8]], model_dir: str, **options: Any) -> dict[str, Any]:
    """OcrPipeline(model_dir, **options).run(image), for one image."""

# ---- The pyACL-shaped top level (acl.init, acl.create_data_buffer, ...) ----

# An address: an int from this API (0 for NULL), or an object with the buffer protocol
# (a C-contiguous NumPy array, bytearray, bytes where read-only is enough).
Address = Union[int, None, np.ndarray, bytes, bytearray, memoryview]

BF16: int
BOOL: int
COMPLEX128: int
COMPLEX64: int
DOUBLE: int
DT_UNDEFINED: int
FLOAT: int
FLOAT16: int
FORMAT_NC1HWC0: int
FORMAT_NCHW: int
FORMAT_ND: int
FORMAT_NHWC: int
FORMAT_UNDEFINED: int
INT16: int
INT32: int
INT64: int
INT8: int
STRING: int
UINT16: int
UINT32: int
UINT64: int
UINT8: int

def create_data_buffer(data: Address, size: int) -> int:
    """create_data_buffer(data, size) -> data_buffer: wraps (does not own) size bytes at the
    address data (device memory from kiln.rt.malloc); 0 on failure.
    """

def create_tensor_desc(data_type: int, dims: Sequence[int], format: int) -> int:
    """create_tensor_desc(data_type, dims, format) -> tensor_desc (0 on failure)."""

def data_type_size(data_type: int) -> int:
    """data_type_size(data_type) -> int: bytes per element (0 for STRING)."""

def destroy_data_buffer(data_buffer: int) -> int:
    """destroy_data_buffer(data_buffer) -> ret: the memory is not freed."""

def destroy_tensor_desc(tensor_desc: int) -> None:
    """destroy_tensor_desc(tensor_desc) -> None."""

def finalize() -> int:
    """finalize() -> ret: waits for all work and releases every stream, event, context, model and
    allocation. InferenceSession objects and their outputs must be gone before.
    """

def get_data_buffer_addr(data_buffer: int) -> int:
    """get_data_buffer_addr(data_buffer) -> address (0 on error)."""

def get_data_buffer_size_v2(data_buffer: int) -> int:
    """get_data_buffer_size_v2(data_buffer) -> bytes (0 on error)."""

get_data_buffer_size = get_data_buffer_size_v2

def get_recent_err_msg() -> str:
    """get_recent_err_msg() -> str: the message of this thread's last failed call ('' if none)."""

def get_tensor_desc_dim_v2(tensor_desc: int, index: int) -> tuple[int, int]:
    """get_tensor_desc_dim_v2(tensor_desc, index) -> (dim, ret)."""

def get_tensor_desc_element_count(tensor_desc: int) -> int:
    """get_tensor_desc_element_count(tensor_desc) -> int."""

def get_tensor_desc_format(tensor_desc: int) -> int:
    """get_tensor_desc_format(tensor_desc) -> format."""

def get_tensor_desc_num_dims(tensor_desc: int) -> int:
    """get_tensor_desc_num_dims(tensor_desc) -> int."""

def get_tensor_desc_size(tensor_desc: int) -> int:
    """get_tensor_desc_size(tensor_desc) -> bytes."""

def get_tensor_desc_type(tensor_desc: int) -> int:
    """get_tensor_desc_type(tensor_desc) -> data_type."""

def init(config_path: str | None = None) -> int:
    """init(config_path=None) -> ret: kilnInit. config_path: None (KILN_DEVICES=cpu:N decides) or a
    JSON file such as {"devices": "cpu:2"}. 100002 when already initialized (an InferenceSession
    initializes the runtime too).
    """

def update_data_buffer(data_buffer: int, data: Address, size: int) -> int:
    """update_data_buffer(data_buffer, data, size) -> ret."""
