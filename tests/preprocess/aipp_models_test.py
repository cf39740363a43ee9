#!/usr/bin/python3
"""Whole models with AIPP from NV12: MobileNetV2 and ResNet-50 (seeded torchvision weights).

Usage: aipp_models_test.py KILN WORK_DIR [--models mobilenet_v2,resnet50]

Each model (made by tests/e2e/make_torch_models.py, cached in WORK_DIR/models) is compiled
twice: plain, and with an aipp.cfg taking a 1920x1080 NV12 frame, resizing it to 224x224,
converting BT.601 narrow range to RGB and normalising with ImageNet's mean and std. The AIPP
model runs on the NV12 frame; the plain model on the frame preprocessed by the NumPy
reference (aipp_reference.py, rounded to float32). Their logits must agree within 1e-4
relative: max |aipp - plain| / max |plain|.
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import aipp_reference as ar  # noqa: E402

MAKE_MODELS = os.path.join(HERE, "..", "e2e", "make_torch_models.py")
RTOL = 1e-4
SRC_W, SRC_H = 1920, 1080


def nv12_frame(rng):
    """A 1080p NV12 frame: smooth gradients and blobs (like a picture) plus a little noise."""
    yy, xx = np.mgrid[0:SRC_H, 0:SRC_W].astype(np.float64)
    luma = 128 + 70 * np.sin(xx / 97.0) * np.cos(yy / 61.0) + 30 * np.sin((xx + yy) / 23.0)
    luma += rng.normal(0, 6, luma.shape)
    cy, cx = np.mgrid[0:SRC_H // 2, 0:SRC_W // 2].astype(np.float64)
    u = 128 + 60 * np.sin(cx / 41.0 + 1.0) + rng.normal(0, 4, cx.shape)
    v = 128 + 60 * np.cos(cy / 37.0) + rng.normal(0, 4, cx.shape)
    uv = np.stack([u, v], -1).reshape(SRC_H // 2, SRC_W)
    frame = np.concatenate([luma, uv]).round().clip(0, 255).astype(np.uint8)
    return frame[None]  # batch of 1: [1, 1620, 1920]


def aipp_config():
    cfg = {"input_format": "YUV420SP_U8", "src_image_size_w": SRC_W, "src_image_size_h": SRC_H,
           "resize": True, "resize_output_w": 224, "resize_output_h": 224,
           "csc_switch": True, "csc_preset": "BT601_NARROW"}
    cfg.update(ar.imagenet_fields())
    return cfg


def run(cmd):
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:2])} exit {r.returncode}: {r.stderr.strip()}")
    return time.time() - t0


def check_model(kiln, work, name, frame, cfg):
    src = os.path.join(work, "models", name)
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    onnx_path = os.path.join(src, "model.onnx")
    shape = ["--input-shape", "input:1,3,224,224"]  # ResNet-50's batch is open in the file
    cfg_path = os.path.join(d, "aipp.cfg")
    with open(cfg_path, "w") as f:
        f.write(ar.config_text(cfg))
    plain, with_aipp = os.path.join(d, "plain.kiln"), os.path.join(d, "aipp.kiln")
    t_plain = run([kiln, "compile", onnx_path, "-o", plain] + shape)
    t_aipp = run([kiln, "compile", onnx_path, "-o", with_aipp, "--insert-op-conf", cfg_path] + shape)

    frame_path = os.path.join(d, "frame_nv12.npy")
    np.save(frame_path, frame)
    tensor_path = os.path.join(d, "input_reference.npy")
    np.save(tensor_path, ar.aipp(cfg, frame, 3).astype(np.float32))
    run([kiln, "run", plain, "--input", f"input={tensor_path}", "--warmup", "0",
         "--output-dir", os.path.join(d, "out_plain")])
    run([kiln, "run", with_aipp, "--input", f"input={frame_path}", "--warmup", "0",
         "--output-dir", os.path.join(d, "out_aipp")])
    b = np.load(os.path.join(d, "out_plain", "logits.npy")).astype(np.float64)
    a = np.load(os.path.join(d, "out_aipp", "logits.npy")).astype(np.float64)
    rel = np.abs(a - b).max() / np.abs(b).max()
    verdict = "ok" if rel <= RTOL and a.shape == b.shape else "FAIL"
    print(f"{verdict} {name}: logits {list(a.shape)}, max |aipp - plain| / max |plain| = {rel:.3g} "
          f"(limit {RTOL}); top-1 {int(a.argmax())} vs {int(b.argmax())}; compile {t_plain:.1f} s plain, "
          f"{t_aipp:.1f} s with AIPP", flush=True)
    return verdict == "ok"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kiln")
    ap.add_argument("work_dir")
    ap.add_argument("--models", default="mobilenet_v2,resnet50")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    try:
        import torch  # noqa: F401  (make_torch_models.py needs them)
        import torchvision  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e} (python3-torch and python3-torchvision make the models)")
        return 77
    os.makedirs(args.work_dir, exist_ok=True)
    t0 = time.time()
    subprocess.run([sys.executable, MAKE_MODELS, os.path.join(args.work_dir, "models"),
                    "--models", ",".join(models)], check=True)
    print(f"models ready in {time.time() - t0:.1f} s", flush=True)
    frame = nv12_frame(np.random.default_rng(0))
    cfg = aipp_config()
    failed = []
    for m in models:
        try:
            if not check_model(args.kiln, args.work_dir, m, frame, cfg):
                failed.append(m)
        except RuntimeError as e:
            print(f"FAIL {m}: {e}", flush=True)
            failed.append(m)
    print(f"{len(models) - len(failed)} of {len(models)} models agree "
          f"({time.time() - t0:.1f} s in all)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
