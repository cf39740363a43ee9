"""kiln.dsl: Kiln's compute/schedule DSL (docs/dsl.md) from Python, in TVM te's spelling.

What is computed (placeholders, compute, reduce_axis with sum/max/min) is written apart from
how (a schedule: split, tile, reorder, fuse, vectorize, unroll, parallel, compute_at,
compute_inline, and s.cache_read / s.cache_write into local buffers); lower() gives the loop IR, build() a kernel that runs on NumPy arrays in
place::

    from kiln import dsl as te
    n = te.var("n")
    x = te.placeholder((n, 64), name="X")
    y = te.compute((n, 64), lambda i, j: te.max(x[i, j], 0.0), name="Y")
    s = te.create_schedule(y)
    s[y].parallel(y.op.axis[0])
    s[y].vectorize(y.op.axis[1])
    print(te.lower(s, [x, y], name="relu"))
    relu = te.build(s, [x, y], name="relu")
    relu(x_array, y_array)                      # float32, C-contiguous; n read from the shapes

Element-wise ops defined with @custom_op serve custom-domain ONNX nodes in
`kiln compile --custom-ops FILE.py`. Errors are kiln.Error, raised where the mistake is made
(an axis that is not the stage's, a tensor indexed with the wrong number of indices) or by
lower() (illegal schedules, reads out of bounds) and by a kernel call (array shapes).
"""

import inspect as _inspect
import json as _json
import os as _os
import sys as _sys
import traceback as _traceback

from . import _kiln

_native = _kiln._dsl
Error = _kiln.Error

Expr = _native.Expr
IterVar = _native.IterVar
Tensor = _native.Tensor
Stage = _native.Stage
Schedule = _native.Schedule
LoweredFunc = _native.LoweredFunc
Kernel = _native.Kernel

__all__ = ["Error", "Expr", "IterVar", "Tensor", "Stage", "Schedule", "LoweredFunc", "Kernel", "var", "size_var",
           "const", "placeholder", "compute", "reduce_axis", "sum", "max", "min", "exp", "log", "sqrt", "tanh",
           "erf", "abs", "sigmoid", "select", "if_then_else", "cast", "logical_and", "logical_or", "logical_not",
           "create_schedule", "auto_schedule", "lower", "build", "custom_op"]


def _invalid(message):
    error = Error(message)
    error.code = _kiln.ERROR_INVALID_PARAM
    return error


# ---- expressions ---------------------------------------------------------------------------

def var(name="n", dtype="int64"):
    """A symbolic dim (int64): one kernel serves every value, read from the arrays it runs on."""
    if dtype != "int64":
        raise _invalid(f"var '{name}': dtype {dtype!r}; symbolic dims are int64")
    return _native.var(name)


size_var = var


def const(value, dtype="float32"):
    """A constant: a float32 (the default) or an int64 index."""
    if dtype == "float32":
        return _native.cast(float(value), "float32")
    if dtype == "int64":
        return _native.cast(int(value), "int64")
    raise _invalid(f"const: dtype {dtype!r}; the DSL has float32 values and int64 indices")


def placeholder(shape, dtype="float32", name="placeholder"):
    """An input of `shape` (ints and vars), float32, dense, row-major."""
    if dtype != "float32":
        raise _invalid(f"placeholder '{name}': dtype {dtype!r}; tensors are float32")
    return _native.placeholder(_shape(shape), name)


def compute(shape, fcompute, name="compute"):
    """An output of `shape`: element (i, j, ...) is fcompute(i, j, ...) (index Exprs)."""
    return _native.compute(_shape(shape), fcompute, name)


def reduce_axis(dom, name="k"):
    """A reduction axis over `dom`: an extent, or a range (0, extent)."""
    return _native.reduce_axis(dom, name)


def _shape(shape):
    return (shape,) if isinstance(shape, (int, Expr)) else tuple(shape)


def _is_axes(value):
    return isinstance(value, IterVar) or (isinstance(value, (list, tuple)) and len(value) > 0
                                          and all(isinstance(a, IterVar) for a in value))


def sum(expr, axis):  # noqa: A001 (te.sum)
    """The sum of `expr` over the reduction axis (or list of axes) `axis`; a compute's whole body."""
    return _native.sum(expr, axis)


def _reduce_or_elementwise(name, reduce, elementwise, a, b, axis):
    """te's max/min: a reduction with axis= (or axes as the second operand), else element-wise."""
    if axis is not None:
        if b is not None:
            raise _invalid(f"{name}: give either a second operand or axis=, not both")
        return reduce(a, axis)
    if _is_axes(b):
        return reduce(a, b)
    if b is None:
        raise _invalid(f"{name}: give axis= (a reduction) or a second operand (element-wise)")
    return elementwise(a, b)


def max(a, b=None, axis=None):  # noqa: A001 (te.max)
    """max(expr, axis=k) reduces over k (as te.max); max(a, b) is the element-wise maximum."""
    return _reduce_or_elementwise("max", _native.reduce_max, _native.max, a, b, axis)


def min(a, b=None, axis=None):  # noqa: A001 (te.min)
    """min(expr, axis=k) reduces over k (as te.min); min(a, b) is the element-wise minimum."""
    return _reduce_or_elementwise("min", _native.reduce_min, _native.min, a, b, axis)


exp = _native.exp
log = _native.log
sqrt = _native.sqrt
tanh = _native.tanh
erf = _native.erf
abs = _native.abs  # noqa: A001 (te.abs)
select = _native.select
if_then_else = _native.select
logical_and = _native.logical_and
logical_or = _native.logical_or
logical_not = _native.logical_not


def cast(x, dtype):
    """`x` as 'float32' or 'int64' (tbe's cast_to, tir's Cast)."""
    return _native.cast(x, dtype)


def sigmoid(x):
    """1 / (1 + exp(-x)). In a custom op it becomes the text form's `sigmoid`, which the compiler
    recognises in activations (x * sigmoid(beta * x) fuses into convolution epilogues)."""
    return 1.0 / (1.0 + exp(-cast(x, "float32")))


# ---- schedules -----------------------------------------------------------------------------

def create_schedule(outputs):
    """The schedule of every compute that `outputs` (a Tensor or a list) reads; s[t] is t's Stage."""
    return _native.create_schedule(outputs)


def auto_schedule(schedule):
    """Kiln's default schedule for every stage not scheduled yet (inlined element-wise
    intermediates, a parallel outer loop, a vectorised inner loop). Returns the schedule."""
    _native.auto_schedule(schedule)
    return schedule


def _tile(stage, x_parent, y_parent, x_factor, y_factor):
    """Splits x and y and orders the loops (x_outer, y_outer, x_inner, y_inner), as te's tile."""
    xo, xi = stage.split(x_parent, factor=x_factor)
    yo, yi = stage.split(y_parent, factor=y_factor)
    stage.reorder(xo, yo, xi, yi)
    return xo, yo, xi, yi


Stage.tile = _tile


def lower(schedule, args, name="main"):
    """Lowers `schedule` to one function taking the tensors `args` (inputs and outputs, in the
    order a kernel is called with); str() of the result is the loop IR."""
    return _native.lower(schedule, list(args), name)


def build(schedule_or_lowered, args=None, name="main"):
    """A kernel (compiled by the system C++ compiler, cached on disk): build(lowered) or
    build(schedule, args, name). Call it with one float32 C-contiguous array per argument."""
    if isinstance(schedule_or_lowered, LoweredFunc):
        if args is not None:
            raise _invalid("build: args are given to lower(), not with a LoweredFunc")
        return _native.build(schedule_or_lowered)
    if args is None:
        raise _invalid("build(schedule, args): the tensors the kernel takes are missing")
    return _native.build(lower(schedule_or_lowered, args, name))


# ---- custom ops for models (kiln compile --custom-ops FILE.py) ------------------------------

_registered = []


class CustomOp:
    """An element-wise op defined in the DSL for custom-domain ONNX nodes (see custom_op).

    Calling it with tensors (and attribute values, defaults otherwise) returns its compute,
    to schedule and build like any other."""

    def __init__(self, fn, domain, op_type, attrs):
        self.fn = fn
        self.domain = domain
        self.op_type = op_type
        self.attrs = dict(attrs)
        params = _inspect.signature(fn).parameters.values()
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise _invalid(f"custom op {self.label}: its function takes *{p.name}; name each input")
        names = [p.name for p in params]
        missing = [a for a in self.attrs if a not in names]
        if missing:
            raise _invalid(f"custom op {self.label}: attribute(s) {missing} are not parameters of {fn.__name__}")
        for name, value in self.attrs.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _invalid(f"custom op {self.label}: attribute '{name}' has default {value!r}; attributes are floats")
        self.inputs = [n for n in names if n not in self.attrs]
        if not 1 <= len(self.inputs) <= 8:
            raise _invalid(f"custom op {self.label}: {len(self.inputs)} inputs (1 to 8)")

    @property
    def label(self):
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def __call__(self, *inputs, **attrs):
        unknown = [a for a in attrs if a not in self.attrs]
        if unknown:
            raise _invalid(f"custom op {self.label}: unknown attribute(s) {unknown}")
        return self.fn(*inputs, **{**self.attrs, **attrs})

    def definition(self):
        """The definition `kiln compile` registers: the compute as the custom-op text form,
        traced over rank-1 inputs of one symbolic extent (the op is element-wise: rank-generic)."""
        n = var("n")
        xs = [placeholder((n,), name=name) for name in self.inputs]
        out = self.fn(*xs, **{a: _native._attr_var(a) for a in self.attrs})
        if not isinstance(out, Tensor):
            raise _invalid(f"custom op {self.label}: {self.fn.__name__} returned a {type(out).__name__}, "
                           "expected the Tensor of a compute")
        return {"domain": self.domain, "op_type": self.op_type, "num_inputs": len(self.inputs),
                "attr_names": list(self.attrs), "attr_defaults": [float(v) for v in self.attrs.values()],
                "compute": _native._custom_expr_text(self.label, out, xs)}


def custom_op(domain, op_type=None, attrs=None):
    """Defines an element-wise op for ONNX nodes of (domain, op_type) Kiln lacks::

        @dsl.custom_op("my.ops", "PSwish", attrs={"beta": 1.0})
        def pswish(x, beta):
            return dsl.compute(x.shape, lambda *i: x[i] * dsl.sigmoid(beta * x[i]), name="Y")

    The function's parameters are the node's inputs, then its float attributes (with their
    defaults); it returns a compute over its inputs' shape that reads each input at the
    output's index (rank-generic: `lambda *i`). Inputs broadcast as NumPy's; the output's
    shape is their broadcast. `kiln compile --custom-ops FILE.py` runs the file and compiles
    the ops it defines; the decorated function stays callable to build a kernel in Python."""
    def wrap(fn):
        op = CustomOp(fn, domain, op_type or fn.__name__, attrs or {})
        _registered.append(op)
        return op
    return wrap


def _where(exc, path, fallback):
    """'FILE:LINE: ' of the innermost frame of the exception in the user's file."""
    target = _os.path.realpath(path)
    line = None
    for frame in _traceback.extract_tb(exc.__traceback__):
        if _os.path.realpath(frame.filename) == target:
            line = frame.lineno
    return f"{path}:{line if line is not None else fallback}: "


def _export_main(argv):
    """`kiln compile --custom-ops FILE.py` runs this (tools/custom_ops_python.cc): argv is
    [FILE.py, OUT.json]. Writes {"ops": [definition, ...]} or {"error": "FILE:LINE: ..."}
    (one line) to OUT.json; returns the exit code."""
    import runpy
    path, out_path = argv
    _registered.clear()
    try:
        try:
            runpy.run_path(path, run_name="__kiln_custom_ops__")
        except SyntaxError as e:
            raise
        except BaseException as e:  # SystemExit too: the file must not end the export silently
            raise _Located(_where(e, path, 1), e) from e
        if not _registered:
            raise _Located(f"{path}: ", _invalid("defines no custom op (decorate a function with @kiln.dsl.custom_op)"))
        ops = []
        for op in _registered:
            try:
                ops.append(op.definition())
            except BaseException as e:
                raise _Located(_where(e, path, op.fn.__code__.co_firstlineno), e) from e
        result = {"ops": ops}
    except SyntaxError as e:
        result = {"error": f"{e.filename or path}:{e.lineno}: SyntaxError: {e.msg}"}
    except _Located as e:
        message = str(e.error).strip().splitlines()[0] if str(e.error).strip() else "(no message)"
        result = {"error": f"{e.where}{type(e.error).__name__}: {message}"}
    with open(out_path, "w", encoding="utf-8") as f:
        _json.dump(result, f)
    return 0 if "ops" in result else 1


class _Located(Exception):
    def __init__(self, where, error):
        super().__init__(where)
        self.where = where
        self.error = error


if __name__ == "__main__":
    _sys.exit(_export_main(_sys.argv[1:]))
