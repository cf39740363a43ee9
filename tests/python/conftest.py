"""Shared helpers of the Python package's tests (run by CTest: tests/python/CMakeLists.txt).

The build tree's package is found through PYTHONPATH (build/<preset>/python); the ONNX
backend test data is the vendored tests/onnx/backend.
"""

import os
import pathlib

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto

REPO = pathlib.Path(__file__).resolve().parents[2]
BACKEND = REPO / "tests" / "onnx" / "backend"


def read_pb(path):
    """A TensorProto file as a numpy array."""
    t = onnx.TensorProto()
    t.ParseFromString(pathlib.Path(path).read_bytes())
    return numpy_helper.to_array(t)


def add_chain_model(path, n, shape=(1, 16)):
    """An ONNX model of n Adds: y = x + c + c ... (n times), c = 1."""
    c = numpy_helper.from_array(np.ones(shape, np.float32), "c")
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "c"], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))], [c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A one-Add model, x: float32[1, 16] -> y = x + 1."""
    return add_chain_model(tmp_path_factory.mktemp("models") / "add1.onnx", 1)


@pytest.fixture(scope="session")
def dynamic_model(tmp_path_factory):
    """y = Relu(x) with x: float32["batch", 8]."""
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("models") / "relu_dyn.onnx"
    onnx.save(model, str(path))
    return str(path)
