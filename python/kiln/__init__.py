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
from ._kiln import Error, NodeArg, OcrPipeline, Tokenizer, compile, inspect  # noqa: A004 (compile: kiln compile's name)
from ._kiln import (ERROR_FAILURE, ERROR_FEATURE_UNSUPPORTED, ERROR_INVALID_FILE, ERROR_INVALID_PARAM,
                    ERROR_INVALID_RESOURCE_HANDLE, ERROR_MODEL_INPUT_NOT_MATCH, ERROR_MODEL_OUTPUT_NOT_MATCH,
                    ERROR_UNINITIALIZE)

__version__: str = _kiln.__version__

__all__ = ["Error", "InferenceSession", "LlmEngine", "NodeArg", "OcrPipeline", "Tokenizer", "compile", "inspect",
           "ocr", "__version__"]


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
    top_p=1.0, seed=0, stop_tokens=()) -> id; add_text_request(text, tokenizer, ...) -> id;
    cancel, release. Running: step() (True when idle), run(), a callback through on_token(fn),
    poll(id), or the stream() iterator. Text in, text out: stream() and generate() with a str
    prompt and tokenizer=kiln.Tokenizer(path).
    """

    def stream(self, prompt, tokenizer=None, stop=None, **params):
        """Adds a request and yields its tokens as the engine steps (other requests step along).

        A text prompt (str or bytes) needs `tokenizer` (a kiln.Tokenizer): it is queued by
        add_text_request (<s> in front, stops at </s>) and the text is yielded instead, piece by
        piece, each piece final (a character whose bytes come as several tokens is yielded whole,
        once they have all come). `stop`: a str or a list of str (text prompts only): the request
        ends once its text holds one of them, which is left out (OpenAI's stop sequences), and no
        text that may still turn out to begin one is yielded before it is decided. Closing the
        iterator early (break) cancels the request."""
        text = _is_text(prompt)
        stops = _stop_strings(stop, text, tokenizer)
        pieces = _kiln._TextStream(tokenizer, stops) if text and tokenizer is not None else None
        request = self._add(prompt, tokenizer, params)
        done = False
        try:
            while True:
                tokens, status = self.poll(request)
                if text:
                    for token in tokens:
                        piece, stopped = pieces.push(token)
                        if piece:
                            yield piece
                        if stopped:
                            done = True
                            self.cancel(request)  # ended by its text: no more tokens
                            return
                else:
                    yield from tokens
                if status in ("finished", "cancelled") and not tokens:
                    done = True
                    rest = pieces.finish() if text else ""
                    if rest:
                        yield rest
                    return
                if status not in ("finished", "cancelled"):
                    self.step()
        finally:
            if not done:
                self.cancel(request)

    def generate(self, prompts, tokenizer=None, stop=None, **params):
        """Runs every prompt batched together to the end. `prompts`: a list of token-id lists
        (their generated ids come back), or with `tokenizer` (a kiln.Tokenizer) text: one str
        (its generated text comes back), or a list of str (their texts); a request given as text
        ends at </s>, which its text leaves out. `stop` (text prompts only): a str or a list of
        str that ends a text request once its text holds it, the stop string left out."""
        single = _is_text(prompts)
        items = [prompts] if single else list(prompts)
        stops = _stop_strings(stop, all(map(_is_text, items)), tokenizer)
        if not stops:
            requests = [self._add(p, tokenizer, params) for p in items]
            self.run()
            out = [tokenizer.decode(self.tokens(r)) if _is_text(p) else self.tokens(r) for p, r in zip(items, requests)]
            return out[0] if single else out
        # Each request's text as it comes, so that a stop string ends it at the token that completes it.
        streams = [_kiln._TextStream(tokenizer, stops) for _ in items]  # checks the stop strings first
        texts = {self._add(p, tokenizer, params): text for p, text in zip(items, streams)}
        idle = False
        while not idle:
            idle = self.step()
            for r, text in texts.items():
                for token in ([] if text.stopped else self.poll(r)[0]):
                    text.push(token)
                    if text.stopped:
                        self.cancel(r)
                        break
        out = [text.text if text.stopped else text.text + text.finish() for text in texts.values()]
        return out[0] if single else out

    def _add(self, prompt, tokenizer, params):
        if not _is_text(prompt):
            return self.add_request(prompt, **params)
        if tokenizer is None:
            raise ValueError("a text prompt needs tokenizer=kiln.Tokenizer(path) (or give token ids)")
        return self.add_text_request(prompt, tokenizer, **params)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _is_text(prompt):
    return isinstance(prompt, (str, bytes))


def _stop_strings(stop, text, tokenizer):
    """`stop` as a list of str (a str alone is one); stop strings need text prompts and a tokenizer."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) for s in stops):
        raise TypeError("stop must be a str or a list of str")
    if stops and not text:
        raise ValueError("stop strings need text prompts (and tokenizer=); for token-id prompts give stop_tokens")
    if stops and tokenizer is None:
        raise ValueError("stop strings need tokenizer=kiln.Tokenizer(path)")
    return stops


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
