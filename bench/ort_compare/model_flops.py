#!/usr/bin/python3
"""FLOPs of the Conv/ConvTranspose/MatMul/Gemm nodes of an ONNX model, from ONNX shape inference.

Usage: model_flops.py MODEL.onnx [NAME:d0,d1,...;NAME:...]   (fixes open input dims first)

A multiply-add counts as 2 FLOPs; bias adds and everything that is not Conv, ConvTranspose,
MatMul or Gemm (activations, norms, pooling, elementwise) count as 0, the usual convention for
"GFLOPs of a model" (ResNet-50 at 224x224: 8.2 GFLOPs). A counted node whose input or output
shape inference cannot determine is an error, never a silent 0.
"""

import math
import sys

import onnx
from onnx import shape_inference

COUNTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")


class FlopsError(Exception):
    pass


def parse_shapes(spec):
    """'x:1,3,640,640;y:1,128' -> {'x': [1, 3, 640, 640], 'y': [1, 128]}."""
    shapes = {}
    for item in filter(None, (s.strip() for s in (spec or "").split(";"))):
        name, _, dims = item.rpartition(":")
        if not name:
            raise FlopsError(f"bad input shape '{item}' (want NAME:d0,d1,...)")
        shapes[name] = [int(d) for d in dims.split(",")]
    return shapes


def _fix_inputs(model, shapes):
    initializers = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        dims = inp.type.tensor_type.shape.dim
        if inp.name in shapes:
            want = shapes[inp.name]
            if len(want) != len(dims):
                raise FlopsError(f"input '{inp.name}' has rank {len(dims)}, the given shape {want} "
                                 f"has rank {len(want)}")
            for d, v in zip(dims, want):
                d.ClearField("dim_param")
                d.dim_value = v
        elif any(not d.HasField("dim_value") for d in dims):
            raise FlopsError(f"input '{inp.name}' has open dims; give its shape")


def _shape_table(model):
    table = {}
    for vi in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        table[vi.name] = dims
    for init in model.graph.initializer:
        table[init.name] = list(init.dims)
    return table


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_flops(node, shape_of):
    """FLOPs of one counted node; shape_of(name) returns the full static shape or raises."""
    op = node.op_type
    if op == "Conv":
        w = shape_of(node.input[1])  # [Cout, Cin/group, k...]
        y = shape_of(node.output[0])  # [N, Cout, spatial...]
        return 2 * math.prod(y) * math.prod(w[1:])
    if op == "ConvTranspose":
        x = shape_of(node.input[0])  # [N, Cin, spatial...]
        w = shape_of(node.input[1])  # [Cin, Cout/group, k...]
        # Every input element is scattered through a (Cout/group x kernel) window.
        return 2 * math.prod(x) * math.prod(w[1:])
    if op == "MatMul":
        a, b = shape_of(node.input[0]), shape_of(node.input[1])
        y = shape_of(node.output[0])
        k = a[-1] if len(a) >= 1 else 1
        if len(a) == 1 and len(b) >= 2:
            k = a[0]
        return 2 * math.prod(y) * k
    if op == "Gemm":
        a = shape_of(node.input[0])
        y = shape_of(node.output[0])
        k = a[0] if _attr(node, "transA", 0) else a[1]
        return 2 * math.prod(y) * k
    raise FlopsError(f"not a counted op: {op}")


def count_flops(model_or_path, input_shapes=None, extra_shapes=None):
    """Returns (total FLOPs, {op_type: FLOPs}) of the model with the given input shapes.

    extra_shapes ({tensor: dims}) fills in tensors that shape inference leaves open (the
    benchmark reads them from an ONNX Runtime run); inferred static shapes take precedence.
    """
    model = onnx.load(model_or_path) if isinstance(model_or_path, str) else model_or_path
    model = onnx.ModelProto.FromString(model.SerializeToString())  # we edit the inputs
    _fix_inputs(model, input_shapes or {})
    inferred = shape_inference.infer_shapes(model, data_prop=True)
    table = _shape_table(inferred)
    for name, dims in (extra_shapes or {}).items():
        if table.get(name) is None or any(d is None for d in table[name]):
            table[name] = list(dims)

    def shape_of(name):
        dims = table.get(name)
        if dims is None or any(d is None or d < 0 for d in dims):
            raise FlopsError(f"shape inference left '{name}' without a static shape ({dims})")
        return dims

    by_op = {}
    for node in inferred.graph.node:
        if node.op_type in COUNTED and node.domain in ("", "ai.onnx"):
            try:
                f = node_flops(node, shape_of)
            except FlopsError as e:
                raise FlopsError(f"{node.op_type} node '{node.name}': {e}") from None
            by_op[node.op_type] = by_op.get(node.op_type, 0) + f
    return sum(by_op.values()), by_op


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        total, by_op = count_flops(argv[1], parse_shapes(argv[2] if len(argv) == 3 else ""))
    except FlopsError as e:
        print(f"model_flops.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    detail = ", ".join(f"{op} {f / 1e9:.3f}" for op, f in sorted(by_op.items()))
    print(f"{total / 1e9:.4f} GFLOPs ({detail})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
