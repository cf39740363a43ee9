"""Whole models through kiln.InferenceSession against PyTorch's references
(tests/e2e/make_torch_models.py, the e2e tests' models and criterion: every output within
1e-4 * max|ref|). The models are made when missing and torch is installed."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kiln
from conftest import REPO

MODELS = ("mobilenet_v2", "resnet50")


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory):
    d = pathlib.Path(os.environ.get("KILN_E2E_MODELS") or tmp_path_factory.mktemp("e2e"))
    missing = [m for m in MODELS if not (d / m / "model.onnx").exists()]
    if missing:
        pytest.importorskip("torch")
        subprocess.run([sys.executable, str(REPO / "tests/e2e/make_torch_models.py"), str(d), "--models",
                        ",".join(missing)], check=True)
    return d


def load_case(folder):
    inputs = {p.stem[len("input_"):]: np.load(p) for p in folder.glob("input_*.npy")}
    expected = {p.stem[len("expected_"):]: np.load(p) for p in folder.glob("expected_*.npy")}
    return inputs, expected


@pytest.mark.parametrize("model", MODELS)
def test_model_matches_pytorch(models_dir, model):
    folder = models_dir / model
    inputs, expected = load_case(folder)
    with kiln.InferenceSession(folder / "model.onnx") as sess:
        names = [o.name for o in sess.get_outputs()]
        outputs = sess.run(None, {i.name: inputs[i.name] for i in sess.get_inputs()})
    for name, got in zip(names, outputs):
        ref = expected[name]
        assert got.shape == ref.shape and got.dtype == ref.dtype
        assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max(), f"{model} output {name}"


def test_two_devices_two_threads(models_dir):
    # Each thread runs MobileNetV2 on its own logical device (KILN_DEVICES=cpu:2 is read at
    # initialization, hence a separate process), with each device's own share of the cores and
    # the same input array; both must match the reference, and neither may raise.
    code = f"""
import threading, numpy as np, kiln, sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
from test_e2e import load_case
import pathlib
folder = pathlib.Path({str(models_dir / "mobilenet_v2")!r})
inputs, expected = load_case(folder)
ref = next(iter(expected.values()))
errors = []
x = next(iter(inputs.values()))  # one array for both devices: one run maps it, the other copies
def work(device):
    try:
        with kiln.InferenceSession(folder / "model.onnx", device=device) as s:
            for _ in range(40):
                got = s.run(None, {{s.get_inputs()[0].name: x}})[0]
                if np.abs(got - ref).max() > 1e-4 * np.abs(ref).max(): errors.append(device)
    except Exception as e:
        errors.append(repr(e))
ts = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errors, errors
"""
    env = dict(os.environ, KILN_DEVICES="cpu:2")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_compile_with_aipp(models_dir, tmp_path):
    # kiln.compile(insert_op_conf=...): the input becomes the raw RGB image, normalised in
    # the model; the same image normalised in NumPy through the plain model agrees.
    cfg = tmp_path / "aipp.cfg"
    cfg.write_text("""aipp_op {
  aipp_mode: static
  input_format: RGB888_U8
  src_image_size_w: 224
  src_image_size_h: 224
  mean_chn_0: 123.675  mean_chn_1: 116.28  mean_chn_2: 103.53
  var_reci_chn_0: 0.0171248  var_reci_chn_1: 0.0175070  var_reci_chn_2: 0.0174292
}
""")
    dst = tmp_path / "mnv2_aipp.kiln"
    onnx_path = models_dir / "mobilenet_v2" / "model.onnx"
    kiln.compile(onnx_path, dst, insert_op_conf=cfg, report=False)
    assert kiln.inspect(dst)["aipp"]
    image = np.random.default_rng(0).integers(0, 256, (1, 224, 224, 3), dtype=np.uint8)
    with kiln.InferenceSession(dst) as sess:
        inp = sess.get_inputs()[0]
        assert inp.dtype == np.uint8
        got = sess.run(None, {inp.name: image.reshape(inp.shape)})[0]
    mean = np.array([123.675, 116.28, 103.53], np.float32)
    var_reci = np.array([0.0171248, 0.0175070, 0.0174292], np.float32)
    x = ((image.astype(np.float32) - mean) * var_reci).transpose(0, 3, 1, 2).copy()
    with kiln.InferenceSession(onnx_path) as plain:
        ref = plain.run(None, {plain.get_inputs()[0].name: x})[0]
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max()
