#!/usr/bin/python3
"""AIPP (`kiln compile --insert-op-conf`) against the NumPy reference of docs/aipp.md.

Usage: aipp_test.py KILN WORK_DIR [--only SUBSTRING] [--single]

1. The reference itself (aipp_reference.py) on known values: the CSC presets against the
   published BT.601/BT.709 coefficients, hand-computed conversions, the packed formats
   against an independent packer, and the bilinear resize against PyTorch's (when torch is
   installed).
2. Every input format (NV12, NV21, NV16, YUYV, grey, RGB/BGR, XRGB/ARGB/AYUV with and without
   ax_swap_switch) x crop / resize up and down / padding / CSC (every preset, BGR output, an
   explicit matrix with biases, none) / normalisation, odd sizes, NCHW and NHWC, batch 1
   and 2: a model whose output is its input, compiled with the configuration and run on
   random images, on the fast kernels and on the reference kernels. Kiln must equal the
   reference within |kiln - ref| <= 1e-5 * max(1, |ref|, 255 |var_reci_chn_c|) (relative to
   the channel's value range: channel_range). The compiled input must be uint8
   of the raw shape, and `kiln inspect` must show the AIPP configuration.
   Dynamic AIPP (aipp_mode: dynamic) the same way, its parameter input written by the test:
   per-image crops, resizes and means in a batch of 2, one record for a batch, NHWC, image
   rows longer than the image; parameters that do not fit fail the run naming the field.
3. Bad configurations: one clear error line, exit code 1, no crash.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import aipp_reference as ar  # noqa: E402

RTOL = 1e-5
FAILURES = []


def channel_range(cfg, channels, nhwc, ndim):
    """Per output channel, the size of the values it is computed from: 255 * |var_reci_chn_c|
    (a raw 0..255 channel: 255). Kiln computes in float32; an output near 0 can be the
    difference of terms near 255 (the colour conversion's), whose float32 rounding is 1e-5 of
    them, not of the small result. Errors are measured against the larger of the two."""
    r = np.array([255.0 * abs(cfg.get(f"var_reci_chn_{c}", 1.0)) for c in range(channels)])
    shape = [1] * ndim
    shape[-1 if nhwc else 1] = channels
    return r.reshape(shape)


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    FAILURES.append(msg)


# ---------------------------------------------------------------------------------------------
# 1. The reference on known values.

# Published YUV -> RGB coefficients (R: Y, V; G: U, V; B: U), full precision where the
# standard gives it; the presets must be these times 256, rounded.
PUBLISHED = {
    "BT601_NARROW": (255 / 219, 1.596027, 0.391762, 0.812968, 2.017232),
    "BT601_FULL": (1.0, 1.402, 0.344136, 0.714136, 1.772),
    "BT709_NARROW": (255 / 219, 1.792741, 0.213249, 0.532909, 2.112402),
    "BT709_FULL": (1.0, 1.5748, 0.187324, 0.468124, 1.8556),
}
# The integer matrices everyone uses for BT.601 (e.g. libyuv's, ITU-R BT.601 in 8.8 fixed point).
CLASSIC_601_NARROW = [[298, 0, 409], [298, -100, -208], [298, 516, 0]]


def self_test():
    n0 = len(FAILURES)
    for preset, (y, rv, gu, gv, bu) in PUBLISHED.items():
        want = [[y, 0, rv], [y, -gu, -gv], [y, bu, 0]]
        want = [[float(np.floor(abs(v) * 256 + 0.5) * np.sign(v)) for v in row] for row in want]
        m, ib, ob = ar.preset_matrix(preset)
        if m != want:
            fail(f"reference: {preset} matrix {m}, published coefficients give {want}")
        narrow = preset.endswith("NARROW")
        if ib != [16.0 if narrow else 0.0, 128.0, 128.0] or ob != [0.0, 0.0, 0.0]:
            fail(f"reference: {preset} biases {ib} {ob}")
        mb, _, _ = ar.preset_matrix(preset, bgr=True)
        if mb != m[::-1]:
            fail(f"reference: {preset} BGR rows are not the RGB rows reversed")
    if ar.preset_matrix("BT601_NARROW")[0] != CLASSIC_601_NARROW:
        fail("reference: BT601_NARROW is not the classic 298/409/100/208/516")

    # Hand-computed NV12 -> RGB, BT.601 narrow, one 2x2 block: Y 100/235/16/81, U 90, V 200.
    # R = (84*298 + 72*409) / 256 = 212.8125; G = (84*298 + 38*100 - 72*208) / 256 = 54.125;
    # B = (84*298 - 38*516) / 256 = 21.1875. Y 235: R = (219*298 + 72*409)/256 > 255 -> 255,
    # G = (65262 + 3800 - 14976)/256 = 211.2734375, B = (65262 - 19608)/256 = 178.3359375.
    # Y 16: R = 29448/256 = 115.03125, G = (3800 - 14976)/256 < 0 -> 0, B < 0 -> 0.
    nv12 = np.array([[100, 235], [16, 81], [90, 200]], dtype=np.uint8)
    cfg = {"input_format": "YUV420SP_U8", "src_image_size_w": 2, "src_image_size_h": 2,
           "csc_switch": True, "csc_preset": "BT601_NARROW"}
    got = ar.aipp(cfg, nv12[None], 3, nhwc=True)[0]
    want = np.array([[[212.8125, 54.125, 21.1875], [255.0, 211.2734375, 178.3359375]],
                     [[115.03125, 0.0, 0.0], [(65 * 298 + 72 * 409) / 256,
                                               (65 * 298 + 3800 - 72 * 208) / 256,
                                               max(0.0, (65 * 298 - 38 * 516) / 256)]]])
    if not np.array_equal(got, want):
        fail(f"reference: hand-computed NV12 block\n got {got.tolist()}\nwant {want.tolist()}")
    # NV21 is NV12 with U and V exchanged; csc_output_bgr reverses the channels.
    nv21 = nv12.copy()
    nv21[2] = nv12[2, ::-1]
    got21 = ar.aipp(dict(cfg, rbuv_swap_switch=True), nv21[None], 3, nhwc=True)[0]
    if not np.array_equal(got21, want):
        fail("reference: NV21 with rbuv_swap_switch differs from NV12")
    gotbgr = ar.aipp(dict(cfg, csc_output_bgr=True), nv12[None], 3, nhwc=True)[0]
    if not np.array_equal(gotbgr, want[..., ::-1]):
        fail("reference: csc_output_bgr is not the channels reversed")

    # Packed formats against a packer written from the format descriptions.
    rng = np.random.default_rng(7)
    h, w = 6, 8
    yp = rng.integers(0, 256, (h, w), dtype=np.uint8)
    u2 = rng.integers(0, 256, (h // 2, w // 2), dtype=np.uint8)
    v2 = rng.integers(0, 256, (h // 2, w // 2), dtype=np.uint8)
    u1 = rng.integers(0, 256, (h, w // 2), dtype=np.uint8)
    v1 = rng.integers(0, 256, (h, w // 2), dtype=np.uint8)
    alpha = rng.integers(0, 256, (h, w), dtype=np.uint8)
    up = lambda p, fy: np.repeat(np.repeat(p, 2, axis=1), fy, axis=0)  # noqa: E731
    packed = {
        "YUV420SP_U8": (np.concatenate([yp, np.stack([u2, v2], -1).reshape(h // 2, w)]),
                        np.stack([yp, up(u2, 2), up(v2, 2)], -1)),
        "YUV422SP_U8": (np.concatenate([yp, np.stack([u1, v1], -1).reshape(h, w)]),
                        np.stack([yp, up(u1, 1), up(v1, 1)], -1)),
        "YUYV_U8": (np.stack([yp[:, 0::2], u1, yp[:, 1::2], v1], -1).reshape(h, w * 2),
                    np.stack([yp, up(u1, 1), up(v1, 1)], -1)),
        "AYUV444_U8": (np.stack([alpha, yp, up(u1, 1), up(v1, 1)], -1),
                       np.stack([yp, up(u1, 1), up(v1, 1), alpha], -1)),
        "ARGB8888_U8": (np.stack([alpha, yp, up(u1, 1), up(v1, 1)], -1),
                        np.stack([yp, up(u1, 1), up(v1, 1), alpha], -1)),
    }
    for fmt, (raw, planes) in packed.items():
        c = {"input_format": fmt, "src_image_size_w": w, "src_image_size_h": h}
        got = ar.fetch(c, raw)[..., :planes.shape[-1]]
        if not np.array_equal(got, planes):
            fail(f"reference: {fmt} channels differ from the packer's")
        if fmt in ar.FOUR_BYTE_FORMATS:
            swapped = np.concatenate([raw[..., 1:], raw[..., :1]], -1)  # alpha last
            if not np.array_equal(ar.fetch(dict(c, ax_swap_switch=True), swapped), planes):
                fail(f"reference: {fmt} with ax_swap_switch")

    # Bilinear with half-pixel centres = PyTorch's bilinear without align_corners/antialias
    # (= OpenCV INTER_LINEAR), up and down, in float64.
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("reference: torch is not installed; bilinear resize checked by hand only")
        torch = None
    if torch is not None:
        x = rng.uniform(0, 255, (13, 17, 3))
        for oh, ow in ((5, 7), (29, 40), (1, 1), (13, 3), (2, 34)):
            ref = F.interpolate(torch.from_numpy(x.transpose(2, 0, 1)[None].copy()), size=(oh, ow),
                                mode="bilinear", align_corners=False).numpy()[0].transpose(1, 2, 0)
            got = ar.resize_bilinear(x, oh, ow)
            if np.abs(got - ref).max() > 1e-9:
                fail(f"reference: resize 17x13 -> {ow}x{oh} differs from torch by {np.abs(got - ref).max()}")
    # 2 -> 4 by hand: centres at -0.25 (clamped to 0), 0.25, 0.75, 1.25 (clamped to 1).
    got = ar.resize_bilinear(np.array([[[0.0], [100.0]]]), 1, 4)[0, :, 0]
    if not np.allclose(got, [0, 25, 75, 100], atol=0, rtol=0):
        fail(f"reference: 2 -> 4 resize {got}")
    print(f"reference self-test: {'ok' if len(FAILURES) == n0 else 'FAILED'}", flush=True)


# ---------------------------------------------------------------------------------------------
# 2. Kiln against the reference.

def identity_model(path, shapes):
    """A model whose outputs out<i> are its inputs data<i> (one per shape)."""
    xs, ys, nodes = [], [], []
    for i, shape in enumerate(shapes):
        xs.append(helper.make_tensor_value_info(f"data{i}", TensorProto.FLOAT, shape))
        ys.append(helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, shape))
        nodes.append(helper.make_node("Identity", [f"data{i}"], [f"out{i}"]))
    graph = helper.make_graph(nodes, "aipp_identity", xs, ys)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)


# Formats and their switches: (name, fields, model channels).
VARIANTS = [
    ("nv12", {"input_format": "YUV420SP_U8"}, 3),
    ("nv21", {"input_format": "YUV420SP_U8", "rbuv_swap_switch": True}, 3),
    ("nv16", {"input_format": "YUV422SP_U8"}, 3),
    ("nv61", {"input_format": "YUV422SP_U8", "rbuv_swap_switch": True}, 3),
    ("yuyv", {"input_format": "YUYV_U8"}, 3),
    ("grey", {"input_format": "YUV400_U8"}, 1),
    ("rgb", {"input_format": "RGB888_U8"}, 3),
    ("bgr", {"input_format": "RGB888_U8", "rbuv_swap_switch": True}, 3),
    ("xrgb", {"input_format": "XRGB8888_U8"}, 3),
    ("rgbx", {"input_format": "XRGB8888_U8", "ax_swap_switch": True}, 3),
    ("argb", {"input_format": "ARGB8888_U8"}, 3),
    ("rgba", {"input_format": "ARGB8888_U8", "ax_swap_switch": True}, 3),
    ("abgr", {"input_format": "ARGB8888_U8", "rbuv_swap_switch": True}, 3),
    ("argb_4ch", {"input_format": "ARGB8888_U8"}, 4),
    ("rgba_4ch", {"input_format": "ARGB8888_U8", "ax_swap_switch": True}, 4),
    ("ayuv", {"input_format": "AYUV444_U8"}, 3),
    ("yuva", {"input_format": "AYUV444_U8", "ax_swap_switch": True}, 3),
    ("ayvu", {"input_format": "AYUV444_U8", "rbuv_swap_switch": True}, 3),
    ("ayuv_4ch", {"input_format": "AYUV444_U8", "ax_swap_switch": True}, 4),
]

# Geometry: (name, src WxH, fields). Sizes are odd where the format allows (a 4:2:x width,
# or a 4:2:0 height, is made even by adding 1); crops start at odd positions.
GEOMETRIES = [
    ("plain", (37, 29), {}),
    ("crop", (50, 36), {"crop": True, "load_start_pos_w": 7, "load_start_pos_h": 5,
                        "crop_size_w": 17, "crop_size_h": 13}),
    ("crop_down", (64, 48), {"crop": True, "load_start_pos_w": 5, "load_start_pos_h": 3,
                             "crop_size_w": 41, "crop_size_h": 31,
                             "resize": True, "resize_output_w": 20, "resize_output_h": 15}),
    ("crop_up_pad", (24, 16), {"crop": True, "load_start_pos_w": 3, "load_start_pos_h": 1,
                               "crop_size_w": 13, "crop_size_h": 9,
                               "resize": True, "resize_output_w": 31, "resize_output_h": 23,
                               "padding": True, "left_padding_size": 2, "right_padding_size": 3,
                               "top_padding_size": 1, "bottom_padding_size": 4,
                               "padding_value": -1.5}),
    ("resize_mixed_pad", (40, 22), {"resize": True, "resize_output_w": 57, "resize_output_h": 9,
                                    "padding": True, "right_padding_size": 1,
                                    "top_padding_size": 2, "padding_value": 7.25}),
    ("pad", (20, 14), {"padding": True, "left_padding_size": 1, "right_padding_size": 2,
                       "top_padding_size": 3, "bottom_padding_size": 4, "padding_value": 0.5}),
    ("resize_thin", (30, 20), {"crop": True, "load_start_pos_w": 1, "load_start_pos_h": 0,
                               "crop_size_w": 27, "crop_size_h": 20,
                               "resize": True, "resize_output_w": 1, "resize_output_h": 5}),
    ("big_down", (300, 200), {"resize": True, "resize_output_w": 32, "resize_output_h": 24}),
    # A crop 1 pixel wide (the fast kernel's scalar path), stretched.
    ("crop_1px", (21, 15), {"crop": True, "load_start_pos_w": 3, "load_start_pos_h": 4,
                            "crop_size_w": 1, "crop_size_h": 7,
                            "resize": True, "resize_output_w": 6, "resize_output_h": 9}),
    # A crop 1 pixel high, not resized.
    ("crop_1row", (21, 15), {"crop": True, "load_start_pos_w": 5, "load_start_pos_h": 9,
                             "crop_size_w": 9, "crop_size_h": 1, "padding": True,
                             "top_padding_size": 5, "padding_value": -2.0}),
]

# Colour conversions: YUV formats take presets (and none); every 3-channel format takes an
# explicit matrix with input and output biases.
YUV_COLOURS = [
    ("bt601n", {"csc_switch": True, "csc_preset": "BT601_NARROW"}),
    ("bt709f", {"csc_switch": True, "csc_preset": "BT709_FULL"}),
    ("bt601f_bgr", {"csc_switch": True, "csc_preset": "BT601_FULL", "csc_output_bgr": True}),
    ("bt709n", {"csc_switch": True, "csc_preset": "BT709_NARROW"}),
    ("default_preset", {"csc_switch": True}),
    ("matrix", None),  # the explicit matrix below
    ("no_csc", {}),
]
# RGB -> YUV (BT.601 full range in 1/256: Y, U + 128, V + 128), with an input bias on G.
MATRIX = {"csc_switch": True,
          "matrix_r0c0": 77, "matrix_r0c1": 150, "matrix_r0c2": 29,
          "matrix_r1c0": -43, "matrix_r1c1": -85, "matrix_r1c2": 128,
          "matrix_r2c0": 128, "matrix_r2c1": -107, "matrix_r2c2": -21,
          "input_bias_0": 0, "input_bias_1": 3, "input_bias_2": 0,
          "output_bias_0": 5, "output_bias_1": 128, "output_bias_2": 128}
RGB_COLOURS = [("no_csc", {}), ("matrix", None)]

NORMS = [
    ("raw", {}),
    ("imagenet", ar.imagenet_fields()),
    ("mean_min_var", {"mean_chn_0": 10.5, "mean_chn_1": -3.25, "mean_chn_2": 100.0, "mean_chn_3": 1.0,
                      "min_chn_0": 2.0, "min_chn_1": 0.5, "min_chn_2": -7.75, "min_chn_3": 30.0,
                      "var_reci_chn_0": 0.25, "var_reci_chn_1": -0.5, "var_reci_chn_2": 1.0 / 3,
                      "var_reci_chn_3": 0.125}),
    ("grey_norm", {"mean_chn_0": 127.5, "var_reci_chn_0": 1.0 / 127.5}),
]


def build_cases():
    """(name, cfg, channels, batch, nhwc) for every variant x geometry."""
    cases = []
    for vi, (vname, vfields, channels) in enumerate(VARIANTS):
        fmt = vfields["input_format"]
        colours = ([("none", {})] if channels != 3 else
                   YUV_COLOURS if fmt in ar.YUV_FORMATS else RGB_COLOURS)
        for gi, (gname, (w, h), gfields) in enumerate(GEOMETRIES):
            if fmt in ("YUV420SP_U8", "YUV422SP_U8", "YUYV_U8"):
                w += w % 2
            if fmt == "YUV420SP_U8":
                h += h % 2
            cname, cfields = colours[(vi + gi) % len(colours)]
            if cfields is None:
                cfields = MATRIX
            nname, nfields = NORMS[(vi * 3 + gi) % len(NORMS)]
            cfg = {"src_image_size_w": w, "src_image_size_h": h}
            cfg.update(vfields)
            cfg.update(gfields)
            cfg.update(cfields)
            cfg.update({k: v for k, v in nfields.items() if int(k[-1]) < channels})
            batch = 2 if (vi + gi) % 4 == 1 else 1
            ow, oh = ar.output_size(cfg)
            # NHWC needs an H that is not a channel count (the compiler tells layouts by dim 1).
            nhwc = (vi + 2 * gi) % 3 == 0 and oh not in (1, 3, 4)
            name = f"{vname}-{gname}-{cname}-{nname}-{'nhwc' if nhwc else 'nchw'}-b{batch}"
            cases.append((name, cfg, channels, batch, nhwc))
    # Outputs over the fast kernel's kStreamBytes (non-temporal stores), tested as one model:
    # the benchmark's 1080p NV12 -> 640x640 BGR (bench/aipp), and NV21 cropped at odd
    # positions, resized and padded above and below.
    big = {"input_format": "YUV420SP_U8", "src_image_size_w": 1920, "src_image_size_h": 1080,
           "resize": True, "resize_output_w": 640, "resize_output_h": 640,
           "csc_switch": True, "csc_preset": "BT601_NARROW", "csc_output_bgr": True}
    big.update(ar.imagenet_fields())
    cases.append(("big-nv12_1080p_640-bt601n_bgr-imagenet-nchw-b1", big, 3, 1, False))
    big = {"input_format": "YUV420SP_U8", "rbuv_swap_switch": True,
           "src_image_size_w": 1280, "src_image_size_h": 720,
           "crop": True, "load_start_pos_w": 3, "load_start_pos_h": 5, "crop_size_w": 1001, "crop_size_h": 701,
           "resize": True, "resize_output_w": 768, "resize_output_h": 600,
           "padding": True, "top_padding_size": 3, "bottom_padding_size": 5, "padding_value": -0.5,
           "csc_switch": True, "csc_preset": "BT709_NARROW"}
    big.update(ar.imagenet_fields())
    cases.append(("big-nv21_crop_pad-bt709n-imagenet-nchw-b1", big, 3, 1, False))
    return cases


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def model_shape(case):
    _, cfg, channels, batch, nhwc = case
    ow, oh = ar.output_size(cfg)
    return [batch, oh, ow, channels] if nhwc else [batch, channels, oh, ow]


def run_kernels(kiln, d, args, name):
    """Runs d/m.kiln on the fast and on the reference kernels: (mode, output dir) of each run
    that succeeded."""
    for mode, extra in (("fast", []), ("reference", ["--reference-kernels"])):
        out_dir = os.path.join(d, f"out_{mode}")
        r = run([kiln, "run", os.path.join(d, "m.kiln"), "--output-dir", out_dir, "--warmup", "0"]
                + args + extra)
        if r.returncode != 0:
            fail(f"{name} [{mode} kernels]: run exit {r.returncode}: {r.stderr.strip()}")
        else:
            yield mode, out_dir


def compare(what, got, ref, cfg, channels, nhwc):
    if got.shape != ref.shape or got.dtype != np.float32:
        fail(f"{what}: output {got.dtype}{list(got.shape)}, want float32{list(ref.shape)}")
        return
    err = np.abs(got.astype(np.float64) - ref)
    scale = np.maximum(np.maximum(1.0, np.abs(ref)), channel_range(cfg, channels, nhwc, ref.ndim))
    excess = err / scale
    if excess.max() > RTOL:
        at = np.unravel_index(np.argmax(excess), excess.shape)
        fail(f"{what}: max |kiln - ref| / max(1, |ref|, range) = {excess.max():.3g} at {list(at)} "
             f"(kiln {got[at]!r}, ref {ref[at]!r}); {np.count_nonzero(excess > RTOL)} of "
             f"{excess.size} values over {RTOL}")
    else:
        print(f"ok {what}: max rel err {excess.max():.2g}", flush=True)


def check_group(kiln, work, name, cases, seed):
    """Cases as the inputs of one model (aipp_op blocks with related_input_rank 0, 1, ...):
    one compile and one run per kernel kind check them all. Returns False if it did not
    compile (check_group on each case alone then tells which)."""
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    identity_model(os.path.join(d, "m.onnx"), [model_shape(c) for c in cases])
    with open(os.path.join(d, "aipp.cfg"), "w") as f:
        f.write("".join(ar.config_text(c[1], related_input_rank=i) for i, c in enumerate(cases)))
    r = run([kiln, "compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln"),
             "--insert-op-conf", os.path.join(d, "aipp.cfg")])
    if r.returncode != 0:
        if len(cases) == 1:
            fail(f"{name}: compile exit {r.returncode}: {r.stderr.strip()}")
        return False
    r = run([kiln, "inspect", "--json", os.path.join(d, "m.kiln")])
    if r.returncode != 0:
        fail(f"{name}: inspect exit {r.returncode}: {r.stderr.strip()}")
        return True
    info = json.loads(r.stdout)
    inputs = {i["name"]: i for i in info["inputs"]}
    args, refs = [], []
    rng = np.random.default_rng(seed)
    for i, (cname, cfg, channels, batch, nhwc) in enumerate(cases):
        raw_shape = [batch] + list(ar.image_dims(cfg["input_format"], cfg["src_image_size_w"],
                                                 cfg["src_image_size_h"]))
        inp = inputs.get(f"data{i}")
        if not inp or inp["dtype"] != "uint8" or inp["shape"] != raw_shape:
            fail(f"{cname}: compiled input {inp}, want uint8 {raw_shape}")
        desc = info.get("aipp", {}).get(f"data{i}", "")
        if "static AIPP" not in desc or cfg["input_format"] not in desc:
            fail(f"{cname}: kiln inspect does not show the AIPP configuration: {desc!r}")
        images = ar.random_images(cfg["input_format"], cfg["src_image_size_w"],
                                  cfg["src_image_size_h"], batch, rng)
        path = os.path.join(d, f"image{i}.npy")
        np.save(path, images)
        args += ["--input", f"data{i}={path}"]
        refs.append(ar.aipp(cfg, images, channels, nhwc))
    for mode, out_dir in run_kernels(kiln, d, args, name):
        for i, (cname, cfg, channels, batch, nhwc) in enumerate(cases):
            compare(f"{cname} [{mode} kernels]", np.load(os.path.join(out_dir, f"out{i}.npy")), refs[i],
                    cfg, channels, nhwc)
    return True


# Dynamic AIPP: the parameters come at run time in the input "<image input>_aipp_params",
# which kilnmdlSetInputAIPP fills; here the test writes its bytes itself, in the layout of
# serialize_aipp (src/ops/aipp_params.cc): a header, the common part, one record per image.
FORMAT_NUMBERS = {"YUV420SP_U8": 1, "XRGB8888_U8": 2, "RGB888_U8": 3, "YUV400_U8": 4,
                  "ARGB8888_U8": 7, "YUYV_U8": 8, "YUV422SP_U8": 9, "AYUV444_U8": 10}


def dynamic_params(cfgs, size):
    """uint8[size]: the serialized parameters of per-image configurations (one for all, or
    one per image; the common fields are the first's)."""
    c = cfgs[0]
    m, ib, ob = ar.csc_params(c) or ([[0.0] * 3] * 3, [0.0] * 3, [0.0] * 3)
    data = struct.pack("<4I", 0x5041494B, 1, len(cfgs), 0)
    data += struct.pack("<3i4B15f", FORMAT_NUMBERS[c["input_format"]], c["src_image_size_w"],
                        c["src_image_size_h"], int(ar.csc_params(c) is not None),
                        int(c.get("rbuv_swap_switch", False)), int(c.get("ax_swap_switch", False)), 0,
                        *[v for row in m for v in row], *ib, *ob)
    for c in cfgs:
        g = lambda k: c.get(k, 0)  # noqa: E731
        data += struct.pack("<4B10i13f", int(g("crop")), int(g("resize")), int(g("padding")), 0,
                            g("load_start_pos_w"), g("load_start_pos_h"), g("crop_size_w"),
                            g("crop_size_h"), g("resize_output_w"), g("resize_output_h"),
                            g("left_padding_size"), g("right_padding_size"), g("top_padding_size"),
                            g("bottom_padding_size"), g("padding_value"),
                            *[g(f"mean_chn_{i}") for i in range(4)], *[g(f"min_chn_{i}") for i in range(4)],
                            *[c.get(f"var_reci_chn_{i}", 1.0) for i in range(4)])
    assert len(data) <= size, (len(data), size)
    return np.frombuffer(data + bytes(size - len(data)), dtype=np.uint8)


def dynamic_cases():
    """(name, per-image configurations, channels, batch, nhwc, max_src_image_size)."""
    nv12 = {"input_format": "YUV420SP_U8", "src_image_size_w": 64, "src_image_size_h": 48,
            "csc_switch": True, "csc_preset": "BT601_NARROW"}
    argb = {"input_format": "ARGB8888_U8", "src_image_size_w": 30, "src_image_size_h": 20,
            "ax_swap_switch": True, "rbuv_swap_switch": True, "resize": True,
            "resize_output_w": 21, "resize_output_h": 15, "padding": True, "left_padding_size": 1,
            "right_padding_size": 1, "top_padding_size": 1, "bottom_padding_size": 1}
    grey = {"input_format": "YUV400_U8", "src_image_size_w": 11, "src_image_size_h": 9,
            "mean_chn_0": 127.5, "var_reci_chn_0": 1 / 127.5}
    return [
        # Two images of a batch cropped and resized differently, normalised differently.
        ("nv12_per_image", [dict(nv12, crop=True, load_start_pos_w=4, load_start_pos_h=2,
                                 crop_size_w=40, crop_size_h=30, **ar.imagenet_fields()),
                            dict(nv12, crop=True, load_start_pos_w=1, load_start_pos_h=3,
                                 crop_size_w=21, crop_size_h=15, resize=True,
                                 resize_output_w=40, resize_output_h=30, mean_chn_1=50.0)],
         3, 2, False, 64 * 48 * 3 // 2 + 100),
        ("rgba_nhwc", [dict(argb, **ar.imagenet_fields())], 3, 1, True, 30 * 20 * 4),
        ("grey_one_record_batch2", [grey], 1, 2, False, 200),
    ]


def check_dynamic(kiln, work, cases, seed):
    d = os.path.join(work, "dynamic")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shapes = []
    for name, cfgs, channels, batch, nhwc, max_bytes in cases:
        ow, oh = ar.output_size(cfgs[0])
        shapes.append([batch, oh, ow, channels] if nhwc else [batch, channels, oh, ow])
    identity_model(os.path.join(d, "m.onnx"), shapes)
    with open(os.path.join(d, "aipp.cfg"), "w") as f:
        for i, case in enumerate(cases):
            f.write(f"aipp_op {{ aipp_mode: dynamic related_input_rank: {i} "
                    f"max_src_image_size: {case[5]} }}\n")
    r = run([kiln, "compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln"),
             "--insert-op-conf", os.path.join(d, "aipp.cfg")])
    if r.returncode != 0:
        fail(f"dynamic: compile exit {r.returncode}: {r.stderr.strip()}")
        return
    r = run([kiln, "inspect", "--json", os.path.join(d, "m.kiln")])
    info = json.loads(r.stdout) if r.returncode == 0 else {"inputs": []}
    inputs = {i["name"]: i for i in info["inputs"]}
    rng = np.random.default_rng(seed)
    args, refs = [], []
    for i, (name, cfgs, channels, batch, nhwc, max_bytes) in enumerate(cases):
        params_bytes = 16 + 76 + 96 * batch
        want = {f"data{i}": [batch, max_bytes], f"data{i}_aipp_params": [params_bytes]}
        for k, shape in want.items():
            if inputs.get(k, {}).get("shape") != shape or inputs[k]["dtype"] != "uint8":
                fail(f"dynamic {name}: compiled input {k} is {inputs.get(k)}, want uint8 {shape}")
        if "dynamic AIPP" not in info.get("aipp", {}).get(f"data{i}", ""):
            fail(f"dynamic {name}: kiln inspect does not show the dynamic AIPP")
        # Each row: the image, then bytes the AIPP must not read.
        raw = rng.integers(0, 256, (batch, max_bytes), dtype=np.uint8)
        c = cfgs[0]
        images = raw[:, :int(np.prod(ar.image_dims(c["input_format"], c["src_image_size_w"],
                                                   c["src_image_size_h"])))]
        refs.append(np.concatenate([ar.aipp(cfgs[n % len(cfgs)], images[n:n + 1], channels, nhwc)
                                    for n in range(batch)]))
        for k, v in ((f"data{i}", raw), (f"data{i}_aipp_params", dynamic_params(cfgs, params_bytes))):
            np.save(os.path.join(d, k + ".npy"), v)
            args += ["--input", f"{k}={os.path.join(d, k + '.npy')}"]
    for mode, out_dir in run_kernels(kiln, d, args, "dynamic"):
        for i, (name, cfgs, channels, batch, nhwc, _) in enumerate(cases):
            got = np.load(os.path.join(out_dir, f"out{i}.npy"))
            for n in range(batch):
                compare(f"dynamic {name} image {n} [{mode} kernels]", got[n:n + 1],
                        refs[i][n:n + 1], cfgs[n % len(cfgs)], channels, nhwc)

    # Parameters that do not fit: a run-time error naming the field, no crash.
    name, cfgs, channels, batch, nhwc, max_bytes = cases[0]
    bad = [cfgs[0], dict(cfgs[1], load_start_pos_w=50)]
    path = os.path.join(d, "bad_params.npy")
    np.save(path, dynamic_params(bad, 16 + 76 + 96 * batch))
    bad_args = [a.replace(os.path.join(d, "data0_aipp_params.npy"), path) for a in args]
    r = run([kiln, "run", os.path.join(d, "m.kiln"), "--warmup", "0"] + bad_args)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode != 1 or len(lines) != 1 or "load_start_pos_w 50" not in lines[0]:
        fail(f"dynamic: a crop outside image 1: exit {r.returncode}, want 1 and one line naming "
             f"load_start_pos_w: {r.stderr.strip()!r}")
    else:
        print(f"ok dynamic bad parameters: {lines[0]}", flush=True)


# ---------------------------------------------------------------------------------------------
# 3. Bad configurations.

GOOD = {"input_format": "YUV420SP_U8", "src_image_size_w": 64, "src_image_size_h": 48,
        "crop": True, "load_start_pos_w": 4, "load_start_pos_h": 2,
        "crop_size_w": 40, "crop_size_h": 30, "csc_switch": True}


def bad_cases():
    """(name, cfg text, model shape, substrings the one error line must hold)."""
    good = ar.config_text(GOOD)
    shape3 = [1, 3, 30, 40]
    return [
        ("unknown_field", good.replace("  crop: true\n", "  crop: true\n  crop_offset_w: 2\n"),
         shape3, ["aipp.cfg:8", "crop_offset_w"]),
        ("crop_outside", ar.config_text(dict(GOOD, load_start_pos_w=30)), shape3,
         ["load_start_pos_w 30", "crop_size_w 40", "src_image_size_w 64"]),
        ("crop_negative", ar.config_text(dict(GOOD, load_start_pos_h=-2)), shape3,
         ["load_start_pos"]),
        ("resize_to_0", ar.config_text(dict(GOOD, resize=True, resize_output_w=0,
                                            resize_output_h=30)), shape3, ["resize_output"]),
        ("grey_for_3_channels", ar.config_text({"input_format": "YUV400_U8", "src_image_size_w": 40,
                                                "src_image_size_h": 30}), shape3,
         ["YUV400_U8", "3"]),
        ("rgb_for_1_channel", ar.config_text({"input_format": "RGB888_U8", "src_image_size_w": 40,
                                              "src_image_size_h": 30}), [1, 1, 30, 40],
         ["RGB888_U8", "1"]),
        ("size_mismatch", ar.config_text(GOOD), [1, 3, 32, 40], ["40x30", "40x32"]),
        ("odd_nv12_width", ar.config_text({"input_format": "YUV420SP_U8", "src_image_size_w": 41,
                                           "src_image_size_h": 30}), [1, 3, 30, 41],
         ["src_image_size_w"]),
        # The field name with no ":" on line 4; protobuf sees the "}" of line 5 instead.
        ("malformed", "aipp_op {\n  aipp_mode: static\n  input_format: YUV420SP_U8\n"
                      "  src_image_size_w: 64 src_image_size_h\n}\n", shape3, ["aipp.cfg:5", ":"]),
        ("truncated", good[:len(good) // 2], shape3, ["aipp.cfg"]),
        # TODO: protobuf reports the position after the value, the next line (aipp.cfg:5).
        ("bad_enum", good.replace("YUV420SP_U8", "NV12"), shape3, ["aipp.cfg:", "input_format", "NV12"]),
        ("empty", "", shape3, ["aipp.cfg"]),
    ]


def check_bad(kiln, work, name, text, shape, want):
    d = os.path.join(work, "bad_" + name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    identity_model(os.path.join(d, "m.onnx"), [shape])
    with open(os.path.join(d, "aipp.cfg"), "w") as f:
        f.write(text)
    r = run([kiln, "compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln"),
             "--insert-op-conf", os.path.join(d, "aipp.cfg")])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    problems = []
    if r.returncode != 1:
        problems.append(f"exit code {r.returncode}, want 1")
    if len(lines) != 1:
        problems.append(f"{len(lines)} stderr lines, want 1")
    msg = lines[0] if lines else ""
    for s in want:
        if s not in msg:
            problems.append(f"error does not say {s!r}")
    if os.path.exists(os.path.join(d, "m.kiln")):
        problems.append("a model file was written")
    if problems:
        fail(f"bad config {name}: {'; '.join(problems)}: {r.stderr.strip()!r}")
    else:
        print(f"ok bad config {name}: {msg}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kiln")
    ap.add_argument("work_dir")
    ap.add_argument("--only", default="", help="run the cases whose name holds this")
    ap.add_argument("--single", action="store_true", help="one model per case (slower)")
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)

    self_test()
    cases = [c for c in build_cases() if args.only in c[0]]
    # One model per input format variant, each of its cases an input; --single: one each.
    groups = {}
    for case in cases:
        groups.setdefault("single-" + case[0] if args.single else case[0].split("-")[0], []).append(case)
    for seed, (name, group) in enumerate(groups.items()):
        if not check_group(args.kiln, args.work_dir, name, group, seed):
            print(f"{name}: the model of {len(group)} inputs did not compile; each alone:", flush=True)
            for i, case in enumerate(group):
                check_group(args.kiln, args.work_dir, "single-" + case[0], [case], seed * 100 + i)
    dynamic = [c for c in dynamic_cases() if args.only in "dynamic-" + c[0]]
    if dynamic:
        check_dynamic(args.kiln, args.work_dir, dynamic, seed=len(groups))
    bad = [b for b in bad_cases() if args.only in "bad_" + b[0]]
    for b in bad:
        check_bad(args.kiln, args.work_dir, *b)
    print(f"{len(cases)} static and {len(dynamic)} dynamic configurations x 2 kernels, "
          f"{len(bad)} bad configurations: "
          f"{len(FAILURES)} failure(s)", flush=True)
    for f in FAILURES:
        print(f"  {f}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
