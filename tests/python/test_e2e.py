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
    # initialization, hence a separate process); both must match the reference.
    code = f"""
import threading, numpy as np, kiln, sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
from test_e2e import load_case
import pathlib
folder = pathlib.Path({str(models_dir / "mobilenet_v2")!r})
inputs, expected = load_case(folder)
ref = next(iter(expected.values()))
errors = []
def work(device):
    with kiln.InferenceSession(folder / "model.onnx", device=device, threads=1) as s:
        for _ in range(3):
            got = s.run(None, {{s.get_inputs()[0].name: next(iter(inputs.values()))}})[0]
            if np.abs(got - ref).max() > 1e-4 * np.abs(ref).max(): errors.append(device)
ts = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
[t.start() for t in ts]; [t.join() for t in ts]
assert not errors, errors
"""
    env = dict(os.environ, KILN_DEVICES="cpu:2")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
