"""Kiln: an inference stack for the CPU, from Python.

High level, as ONNX Runtime::

    import kiln
    sess = kiln.InferenceSession("model.onnx")        # or a .kiln offline model
    outputs = sess.run(None, {"x": x})                # list of numpy arrays

kiln.compile() and kiln.inspect() are `kiln compile` and `kiln inspect --json`. The
pyACL-shaped low-level modules (kiln.rt, kiln.mdl, ...) are submodules of the native
module, imported here when the build has them. See docs/python.md.
"""

import concurrent.futures as _futures
import sys as _sys
import threading as _threading
import types as _types

from . import _kiln
from ._kiln import Error, NodeArg, OcrPipeline, compile, inspect  # noqa: A004 (compile: kiln compile's name)
from ._kiln import (ERROR_FAILURE, ERROR_FEATURE_UNSUPPORTED, ERROR_INVALID_FILE, ERROR_INVALID_PARAM,
                    ERROR_INVALID_RESOURCE_HANDLE, ERROR_MODEL_INPUT_NOT_MATCH, ERROR_MODEL_OUTPUT_NOT_MATCH,
                    ERROR_UNINITIALIZE)

__version__: str = _kiln.__version__

__all__ = ["Error", "InferenceSession", "LlmEngine", "NodeArg", "OcrPipeline", "compile", "inspect", "ocr",
           "__version__"]


def ocr(image, model_dir, **options):
    """Reads the text in one image (`kiln ocr`): OcrPipeline(model_dir, **options).run(image).
    For many images keep one OcrPipeline: it loads the models once."""
    with OcrPipeline(model_dir, **options) as pipeline:
        return pipeline.run(image)


class InferenceSession(_kiln.InferenceSession):
    """A model loaded for inference, as onnxruntime.InferenceSession.

    InferenceSession(path, threads=None, device=0, input_shapes=None, precision=None)

    path: an .onnx model (compiled in memory) or a .kiln offline model. threads: intra-op
    threads per device (process-wide: the first session decides). device: the logical
    device (KILN_DEVICES=cpu:N makes N). input_shapes: {"x": [1, 3, 224, 224]} or
    "x:1,3,224,224" fixes open dims of an .onnx. precision: "fp32", "bf16" or "mixed".
    Use it as a context manager or call close().
    """

    def __init__(self, path, threads=None, device=0, input_shapes=None, precision=None):
        super().__init__(str(path), threads, device, input_shapes, precision)
        self._executor = None
        self._executor_lock = _threading.Lock()

    def run_async(self, output_names, input_feed):
        """Runs the model on a worker thread; returns a concurrent.futures.Future of run()'s list.

        Runs of one session execute concurrently (the GIL is released while Kiln runs);
        keep the input arrays unchanged until the future is done.
        """
        with self._executor_lock:
            if self._executor is None:
                self._executor = _futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="kiln-run")
        return self._executor.submit(self.run, output_names, input_feed)

    def close(self):
        """Unloads the model after runs in progress (and pending run_async calls) finish."""
        with self._executor_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        super().close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class LlmEngine(_kiln.LlmEngine):
    """The LLM engine (docs/llm.md) on a decoder directory written by bench/llm/export_decoder.py.

    LlmEngine(model_dir, *, block_size=16, kv_cache_mib=256, kv_blocks=0, max_batch=16,
              step_tokens=0, prefill_buckets=None, threads=0, record_logits=False)

    step_tokens > 0 (at least max_batch) bounds the rows of every step: chunked prefill beside
    the decode rows. Requests: add_request(ids, max_new_tokens=16, temperature=0.0, top_k=0,
    top_p=1.0, seed=0, stop_tokens=()) -> id; cancel, release. Running: step() (True when
    idle), run(), a callback through on_token(fn), poll(id), or the stream() iterator.
    """

    def stream(self, prompt_ids, **params):
        """Adds a request and yields its tokens as the engine steps (other requests step along).

        Closing the iterator early (break) cancels the request."""
        request = self.add_request(prompt_ids, **params)
        done = False
        try:
            while True:
                tokens, status = self.poll(request)
                yield from tokens
                if status in ("finished", "cancelled") and not tokens:
                    done = True
                    return
                if status not in ("finished", "cancelled"):
                    self.step()
        finally:
            if not done:
                self.cancel(request)

    def generate(self, prompts, **params):
        """Runs every prompt (a list of token-id lists) batched together to the end; their tokens."""
        requests = [self.add_request(p, **params) for p in prompts]
        self.run()
        return [self.tokens(r) for r in requests]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# The low-level modules (kiln.rt, kiln.mdl, ...) live in the native module; make
# `import kiln.rt` work for each. (_dsl is the native half of kiln.dsl, python/kiln/dsl.py.)
for _name in dir(_kiln):
    _value = getattr(_kiln, _name)
    if isinstance(_value, _types.ModuleType) and not _name.startswith("_"):
        globals()[_name] = _value
        _sys.modules[__name__ + "." + _name] = _value
        __all__.append(_name)
# The native module's other public names (kiln.init, kiln.create_data_buffer, ... of the
# low level) are the package's too.
for _name in dir(_kiln):
    if not _name.startswith("_") and _name not in globals():
        globals()[_name] = getattr(_kiln, _name)
        __all__.append(_name)
del _name, _value
