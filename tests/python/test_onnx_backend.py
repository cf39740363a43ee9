"""The ONNX backend node tests through kiln.InferenceSession, as `kiln conformance` runs
them: every test whose inputs and outputs Python values carry (tensors NumPy has a dtype
for, strings, sequences, optionals) passes, except those the conformance expectations
(tests/conformance/expected_failures.txt) list."""

import pathlib

import numpy as np
import onnx
from onnx import numpy_helper

import kiln
from conftest import BACKEND, REPO, read_pb

RTOL, ATOL = 1e-3, 1e-5  # tools/conformance_compare.h


def expected_failures():
    names = set()
    for line in (REPO / "tests" / "conformance" / "expected_failures.txt").read_text().splitlines():
        if line.startswith("node/"):
            names.add(line.split()[0].split("/", 1)[1])
    return names


# Element types a numpy array carries: as the C API does, bfloat16 as its bits in uint16
# (docs/python.md), strings as arrays of str. NumPy has no type for float8 and the 4- and
# 2-bit types.
PLAIN = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
         onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
         onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL,
         onnx.TensorProto.STRING, onnx.TensorProto.BFLOAT16}


def element_type(type_proto):
    """The element type of a tensor, sequence or optional type; None for maps and nesting
    beyond ONNX Runtime's Python conventions (optional of a sequence of tensors)."""
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return type_proto.tensor_type.elem_type
    if kind == "sequence_type":
        inner = type_proto.sequence_type.elem_type
        return inner.tensor_type.elem_type if inner.WhichOneof("value") == "tensor_type" else None
    if kind == "optional_type":
        return element_type(type_proto.optional_type.elem_type)
    return None


def plain_io(model):
    """Inputs and outputs Python values carry: tensors of PLAIN types (strings as arrays of
    str), sequences of them (lists) and optionals (None when empty)."""
    values = list(model.graph.input) + list(model.graph.output)
    return all(element_type(v.type) in PLAIN for v in values)


def bfloat16_bits(array):
    """onnx's float32 reading of bfloat16 data (exact) as Kiln's uint16 bits."""
    return np.asarray(array.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def read_value(path, type_proto):
    """A test data file as ONNX Runtime's Python API takes or gives the value: an array, a
    list of arrays, or None."""
    value = read_onnx_value(path, type_proto)
    if element_type(type_proto) != onnx.TensorProto.BFLOAT16 or value is None:
        return value
    return [bfloat16_bits(v) for v in value] if isinstance(value, list) else bfloat16_bits(value)


def read_onnx_value(path, type_proto):
    """The value as onnx's numpy_helper reads it."""
    data = pathlib.Path(path).read_bytes()
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        seq = onnx.SequenceProto()
        seq.ParseFromString(data)
        return [numpy_helper.to_array(t) for t in seq.tensor_values]
    if kind == "optional_type":
        opt = onnx.OptionalProto()
        opt.ParseFromString(data)
        if opt.HasField("tensor_value"):
            return numpy_helper.to_array(opt.tensor_value)
        if opt.HasField("sequence_value"):
            return [numpy_helper.to_array(t) for t in opt.sequence_value.tensor_values]
        return None
    return read_pb(path)


# Outputs of these are compared by shape and dtype only, as kiln conformance does.
RANDOM_OPS = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial"}


def has_random_op(graph):
    return any(n.op_type in RANDOM_OPS or any(has_random_op(a.g) for a in n.attribute if a.HasField("g"))
               for n in graph.node)


def close_enough(got, ref, random=False):
    if ref is None or isinstance(ref, list):
        return (got is None if ref is None else
                isinstance(got, list) and len(got) == len(ref) and all(close_enough(g, r, random) for g, r in zip(got, ref)))
    if not isinstance(got, np.ndarray) or got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if random:
        return True
    if ref.dtype.kind in "fc":
        both_nan = np.isnan(got) & np.isnan(ref)
        ok = np.isclose(got, ref, rtol=RTOL, atol=ATOL) | both_nan
        return bool(ok.all())
    return bool(np.array_equal(got, ref))


def describe(value):
    if value is None:
        return "None"
    if isinstance(value, list):
        return "[" + ", ".join(describe(v) for v in value) + "]"
    return f"{value.dtype}{list(value.shape)}"


def run_case(folder, model, random):
    """None when it passes, else why not."""
    sess = kiln.InferenceSession(folder / "model.onnx")
    try:
        initialized = {t.name for t in model.graph.initializer}
        inputs = [v for v in model.graph.input if v.name not in initialized]
        for data in sorted(folder.glob("test_data_set_*")):
            feed = {}
            # input_k.pb is the k-th graph input; an optional one may be left out (empty).
            for k, v in enumerate(inputs):
                path = data / f"input_{k}.pb"
                if path.exists():
                    feed[v.name] = read_value(path, v.type)
            refs = [read_value(data / f"output_{k}.pb", v.type) for k, v in enumerate(model.graph.output)]
            got = sess.run(None, feed)
            for k, (g, r) in enumerate(zip(got, refs)):
                if not close_enough(g, r, random):
                    return f"{data.name} output {k}: got {describe(g)}, want {describe(r)}"
    finally:
        sess.close()
    return None


def test_node_suite():
    skip = expected_failures()
    passed, failed, not_plain = 0, [], 0
    for folder in sorted((BACKEND / "node").iterdir()):
        if not (folder / "model.onnx").exists() or folder.name in skip:
            continue
        model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
        if not plain_io(model):
            not_plain += 1
            continue
        try:
            why = run_case(folder, model, has_random_op(model.graph))
        except kiln.Error as e:
            why = f"kiln.Error {e.code}: {e}"
        if why:
            failed.append(f"{folder.name}: {why}")
        else:
            passed += 1
    print(f"node suite through InferenceSession: {passed} passed, {len(failed)} failed, "
          f"{not_plain} with inputs/outputs NumPy has no type for, {len(skip)} expected failures skipped")
    assert not failed, "\n".join(failed[:60])
