"""`kiln compile --custom-ops FILE.py` (docs/dsl.md, "Custom ops in Python"): element-wise ops
written with kiln.dsl in a Python file serve the custom-domain nodes of a model; the compiled
model gives NumPy's values (and PSwish fuses into the convolution as a plugin's does). A
broken file (syntax error, an exception, a compute that is not element-wise or reduces, no
op, an exit) is a one-line error naming the file and line, exit code 1."""

import json
import math
import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln

RNG = np.random.default_rng(7)

OPS = '''
from kiln import dsl


@dsl.custom_op("py.ops", "PSwish", attrs={"beta": 1.0})
def pswish(x, beta):
    return dsl.compute(x.shape, lambda *i: x[i] * dsl.sigmoid(beta * x[i]), name="Y")


def softplus(v):
    return dsl.max(v, 0.0) + dsl.log(1.0 + dsl.exp(-dsl.abs(v)))


@dsl.custom_op("py.ops", "GatedMish", attrs={"alpha": 0.5})
def gated_mish(x, gate, alpha):
    def body(*i):
        m = x[i] * dsl.tanh(softplus(x[i]))
        return dsl.select(gate[i] > 0, m + alpha * gate[i], m * dsl.erf(gate[i]))
    return dsl.compute(x.shape, body, name="Y")
'''


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def erf(x):
    return np.vectorize(math.erf)(x)


def make_model(path):
    """x[1,8,6,6] -> Conv 1x1 -> PSwish(beta=1.7) -> GatedMish(gate[1,8,1,1] broadcast, alpha=0.25) -> y."""
    w = RNG.standard_normal((8, 8, 1, 1)).astype(np.float32) * 0.5
    b = RNG.standard_normal(8).astype(np.float32) * 0.1
    gate = RNG.standard_normal((1, 8, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv"),
        helper.make_node("PSwish", ["c"], ["p"], name="pswish", domain="py.ops", beta=1.7),
        helper.make_node("GatedMish", ["p", "gate"], ["y"], name="gated", domain="py.ops", alpha=0.25),
    ]
    g = helper.make_graph(nodes, "py_custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
                           numpy_helper.from_array(gate, "gate")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("py.ops", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))

    def reference(x):
        xd = x.astype(np.float64)
        c = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), xd) + b.reshape(1, 8, 1, 1)
        p = c * sigmoid(np.float64(np.float32(1.7)) * c)
        m = p * np.tanh(np.maximum(p, 0) + np.log1p(np.exp(-np.abs(p))))
        gd = gate.astype(np.float64)
        return np.where(gd > 0, m + 0.25 * gd, m * erf(gd))
    return reference


def run_kiln(binary, *args):
    return subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)


def test_model_with_python_custom_ops_matches_numpy(kiln_binary, tmp_path):
    ops = tmp_path / "ops.py"
    ops.write_text(OPS)
    reference = make_model(tmp_path / "m.onnx")
    r = run_kiln(kiln_binary, "compile", str(tmp_path / "m.onnx"), "--custom-ops", str(ops), "-o",
                 str(tmp_path / "m.kiln"), "--report", str(tmp_path / "report.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"custom op py.ops::PSwish from {ops}" in r.stdout
    assert f"custom op py.ops::GatedMish from {ops}" in r.stdout
    fusions = json.loads((tmp_path / "report.json").read_text())["fusions"]
    # kiln.dsl.sigmoid is the text form's sigmoid, so x * sigmoid(beta * x) ends the convolution.
    assert fusions.get("Conv+Silu (custom py.ops::PSwish)") == 1, fusions
    x = RNG.standard_normal((1, 8, 6, 6)).astype(np.float32)
    with kiln.InferenceSession(str(tmp_path / "m.kiln")) as sess:  # no Python file needed to run
        (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-5)


BAD_FILES = {
    "syntax.py": ("from kiln import dsl\n\ndef f(:\n    pass\n", r"syntax\.py:3: SyntaxError: "),
    "raises.py": ("from kiln import dsl\n\n\n@dsl.custom_op('py.ops', 'Bad')\ndef bad(x):\n"
                  "    return dsl.compute(x.shape, lambda *i: x[i] * undefined_name, name='Y')\n",
                  r"raises\.py:6: NameError: name 'undefined_name' is not defined"),
    "shifted.py": ("from kiln import dsl\n\n\n@dsl.custom_op('py.ops', 'Shift')\ndef shift(x):\n"
                   "    return dsl.compute(x.shape, lambda i: x[i + 1], name='Y')\n",
                   r"shifted\.py:4: Error: custom op py\.ops::Shift: a custom op in a model is element-wise"),
    "reduces.py": ("from kiln import dsl\n\n\n@dsl.custom_op('py.ops', 'Total')\ndef total(x):\n"
                   "    k = dsl.reduce_axis(x.shape[0], name='k')\n"
                   "    return dsl.compute(x.shape, lambda i: dsl.sum(x[k], axis=k), name='Y')\n",
                   r"reduces\.py:4: Error: custom op py\.ops::Total: reductions are not available"),
    "wrong_rank.py": ("from kiln import dsl\n\n\n@dsl.custom_op('py.ops', 'Rank2')\ndef rank2(x):\n"
                      "    return dsl.compute(x.shape, lambda i, j: x[i, j], name='Y')\n",
                      r"wrong_rank\.py:6: TypeError: "),
    "mismatch.py": ("from kiln import dsl\n\n\n@dsl.custom_op('py.ops', 'Wide')\ndef wide(x):\n"
                    "    return dsl.compute((4,), lambda i: x[i], name='Y')\n",
                    r"mismatch\.py:4: Error: custom op py\.ops::Wide: its output 'Y' has shape \[4\], its input 'x' \[n\]"),
    "none.py": ("x = 1\n", r"none\.py: Error: defines no custom op"),
    "exits.py": ("import sys\nsys.exit(3)\n", r"exits\.py:2: SystemExit: 3"),
    "builtin.py": ("from kiln import dsl\n\n\n@dsl.custom_op('', 'Relu')\ndef relu(x):\n"
                   "    return dsl.compute(x.shape, lambda *i: dsl.max(x[i], 0.0), name='Y')\n",
                   r"Relu is one of Kiln's own ops"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_broken_python_file_is_a_one_line_error(kiln_binary, tmp_path, name):
    text, expected = BAD_FILES[name]
    (tmp_path / name).write_text(text)
    make_model(tmp_path / "m.onnx")
    r = run_kiln(kiln_binary, "compile", str(tmp_path / "m.onnx"), "--custom-ops", str(tmp_path / name), "-o",
                 str(tmp_path / "m.kiln"))
    assert r.returncode == 1, r.stdout + r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    assert re.search(expected, lines[0]), lines[0]
    assert not (tmp_path / "m.kiln").exists()


def test_missing_python_file_is_an_error(kiln_binary, tmp_path):
    make_model(tmp_path / "m.onnx")
    r = run_kiln(kiln_binary, "compile", str(tmp_path / "m.onnx"), "--custom-ops", str(tmp_path / "absent.py"), "-o",
                 str(tmp_path / "m.kiln"))
    assert r.returncode == 1 and "absent.py: no such file" in r.stderr, r.stderr
