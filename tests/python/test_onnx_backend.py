"""The ONNX backend node tests through kiln.InferenceSession, as `kiln conformance` runs
them: every test with plain tensor inputs and outputs passes, except those the
conformance expectations (tests/conformance/expected_failures.txt) list."""

import numpy as np
import onnx

import kiln
from conftest import BACKEND, REPO, read_pb

RTOL, ATOL = 1e-3, 1e-5  # tools/conformance_compare.h


def expected_failures():
    names = set()
    for line in (REPO / "tests" / "conformance" / "expected_failures.txt").read_text().splitlines():
        if line.startswith("node/"):
            names.add(line.split()[0].split("/", 1)[1])
    return names


# Element types a numpy array carries as the C API does (bfloat16, strings, float8 and the
# 4- and 2-bit types do not count as plain tensors).
PLAIN = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
         onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
         onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL}


def plain_tensor_io(model):
    values = list(model.graph.input) + list(model.graph.output)
    return all(v.type.HasField("tensor_type") and v.type.tensor_type.elem_type in PLAIN for v in values)


# Outputs of these are compared by shape and dtype only, as kiln conformance does.
RANDOM_OPS = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial"}


def has_random_op(graph):
    return any(n.op_type in RANDOM_OPS or any(has_random_op(a.g) for a in n.attribute if a.HasField("g"))
               for n in graph.node)


def close_enough(got, ref, random=False):
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return False
    if random:
        return True
    if ref.dtype.kind in "fc":
        both_nan = np.isnan(got) & np.isnan(ref)
        ok = np.isclose(got, ref, rtol=RTOL, atol=ATOL) | both_nan
        return bool(ok.all())
    return bool(np.array_equal(got, ref))


def run_case(folder, random):
    """None when it passes, else why not."""
    sess = kiln.InferenceSession(folder / "model.onnx")
    try:
        names = [i.name for i in sess.get_inputs()]
        for data in sorted(folder.glob("test_data_set_*")):
            feed = {}
            for k, path in enumerate(sorted(data.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))):
                feed[names[k]] = read_pb(path)
            refs = [read_pb(p) for p in sorted(data.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
            got = sess.run(None, feed)
            for k, (g, r) in enumerate(zip(got, refs)):
                if not close_enough(g, r, random):
                    return f"{data.name} output {k}: got {g.dtype}{list(g.shape)}, want {r.dtype}{list(r.shape)}"
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
        if not plain_tensor_io(model):
            not_plain += 1
            continue
        try:
            why = run_case(folder, has_random_op(model.graph))
        except kiln.Error as e:
            why = f"kiln.Error {e.code}: {e}"
        if why:
            failed.append(f"{folder.name}: {why}")
        else:
            passed += 1
    print(f"node suite through InferenceSession: {passed} passed, {len(failed)} failed, "
          f"{not_plain} without plain tensor inputs/outputs, {len(skip)} expected failures skipped")
    assert not failed, "\n".join(failed[:60])
