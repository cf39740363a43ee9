"""Strings, sequences and optionals through kiln.InferenceSession (ONNX Runtime's Python
conventions: arrays of str, lists of arrays, None), checked against NumPy and Python."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import kiln


def save(tmp_path, name, nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def concat_sequence(tmp_path_factory):
    """y = ConcatFromSequence(SequenceInsert(seq, t), axis=0); n = SequenceLength(seq)."""
    seq_type = helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)
    nodes = [helper.make_node("SequenceInsert", ["seq", "t"], ["seq2"]),
             helper.make_node("ConcatFromSequence", ["seq2"], ["y"], axis=0),
             helper.make_node("SequenceLength", ["seq"], ["n"])]
    return save(tmp_path_factory.mktemp("values"), "concat_sequence", nodes,
                [seq_type, helper.make_tensor_value_info("t", TensorProto.FLOAT, ["m", 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3]),
                 helper.make_tensor_value_info("n", TensorProto.INT64, [])])


@pytest.fixture(scope="module")
def string_model(tmp_path_factory):
    """y = StringNormalizer(x, case_change_action=LOWER); eq = Equal(x, x)."""
    nodes = [helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER"),
             helper.make_node("Equal", ["x", "x"], ["eq"])]
    return save(tmp_path_factory.mktemp("values"), "strings", nodes,
                [helper.make_tensor_value_info("x", TensorProto.STRING, ["n"])],
                [helper.make_tensor_value_info("y", TensorProto.STRING, ["n"]),
                 helper.make_tensor_value_info("eq", TensorProto.BOOL, ["n"])])


@pytest.fixture(scope="module")
def optional_model(tmp_path_factory):
    """has = OptionalHasElement(opt); seq = SequenceEmpty -> an empty list."""
    opt = helper.make_value_info("opt", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    nodes = [helper.make_node("OptionalHasElement", ["opt"], ["has"]),
             helper.make_node("SequenceEmpty", [], ["empty"], dtype=TensorProto.FLOAT)]
    return save(tmp_path_factory.mktemp("values"), "optional", nodes, [opt],
                [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                 helper.make_tensor_sequence_value_info("empty", TensorProto.FLOAT, None)])


def test_sequence_in_and_out(concat_sequence):
    sess = kiln.InferenceSession(concat_sequence)
    inputs = {a.name: a for a in sess.get_inputs()}
    assert inputs["seq"].type == "seq(tensor(float))"
    rng = np.random.default_rng(0)
    items = [rng.standard_normal((k, 3)).astype(np.float32) for k in (1, 4, 2)]
    t = rng.standard_normal((5, 3)).astype(np.float32)
    y, n = sess.run(None, {"seq": items, "t": t})
    np.testing.assert_array_equal(y, np.concatenate(items + [t]))
    assert n == 3 and n.dtype == np.int64
    # An empty sequence is an empty list; tuples are sequences too.
    y, n = sess.run(["y", "n"], {"seq": (), "t": t})
    np.testing.assert_array_equal(y, t)
    assert n == 0


def test_strings_in_and_out(string_model):
    sess = kiln.InferenceSession(string_model)
    assert sess.get_inputs()[0].type == "tensor(string)"
    words = ["Kiln", "ÉTÉ", "onnx", ""]
    for feed in (np.array(words, dtype=object), np.array(words), np.array([w.encode() for w in words])):
        y, eq = sess.run(None, {"x": feed})
        assert y.dtype == object and list(y) == [w.lower() for w in words]
        np.testing.assert_array_equal(eq, np.ones(len(words), bool))


def test_optional_none_and_left_out(optional_model):
    sess = kiln.InferenceSession(optional_model)
    assert sess.get_inputs()[0].type == "optional(tensor(float))"
    has, empty = sess.run(None, {"opt": np.ones(2, np.float32)})
    assert bool(has) and empty == []
    assert not bool(sess.run(["has"], {"opt": None})[0])
    assert not bool(sess.run(["has"], {})[0])  # an optional left out of the feed is empty


def test_value_misuse_names_the_problem(concat_sequence, string_model):
    sess = kiln.InferenceSession(concat_sequence)
    t = np.zeros((1, 3), np.float32)
    with pytest.raises(kiln.Error, match=r"input 'seq' \(seq\(tensor\(float\)\)\): expected a list"):
        sess.run(None, {"seq": t, "t": t})
    with pytest.raises(kiln.Error, match=r"item 1: expected dtype float32"):
        sess.run(None, {"seq": [t, t.astype(np.float64)], "t": t})
    with pytest.raises(kiln.Error, match=r"input 't'.*expected shape"):
        sess.run(None, {"seq": [t], "t": np.zeros((1, 4), np.float32)})
    with pytest.raises(kiln.Error, match=r"only optional inputs may be"):
        sess.run(None, {"seq": None, "t": t})
    with pytest.raises(kiln.Error, match=r"'t' \(tensor\(float\)\) is missing"):
        sess.run(None, {"seq": [t]})
    with pytest.raises(kiln.Error, match=r"'u' is not an input"):
        sess.run(None, {"seq": [t], "t": t, "u": t})
    with pytest.raises(kiln.Error, match=r"'z' is not an output"):
        sess.run(["z"], {"seq": [t], "t": t})
    strings = kiln.InferenceSession(string_model)
    with pytest.raises(kiln.Error, match=r"expected an array of str"):
        strings.run(None, {"x": np.zeros(2, np.int64)})
    with pytest.raises(kiln.Error, match=r"element 1 is <class 'int'>"):
        strings.run(None, {"x": np.array(["a", 3], dtype=object)})
    sess.close()
    assert sess.closed
    with pytest.raises(kiln.Error, match="closed"):
        sess.run(None, {"seq": [t], "t": t})
