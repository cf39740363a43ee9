#!/usr/bin/python3
"""The first convolution folded into the Aipp node (kiln AippConv, docs/aipp.md).

Usage: aipp_conv_test.py KILN WORK_DIR

Each case is a small ONNX model, Conv [+ Relu] [+ a second Conv, so that layout_assignment
stores the first one's output in NC1HWC0], compiled with an aipp.cfg. The compile report must
say the Aipp node and the convolution were folded (pattern "Aipp+Conv"), `kiln inspect` must
still show the input's AIPP configuration, and the model's output on random raw images, on the
fast and on the reference kernels, must equal the same network computed here in NumPy
(float64) on the image preprocessed by the NumPy reference (aipp_reference.py, rounded to
float32 as a model input): max |kiln - ref| / max |ref| <= 1e-4, the tolerance of
aipp_models_test.py. Sizes are chosen so that the fast kernel runs several strips of rows,
the last one shorter, and rows of zero padding above and below the image.

Every folded case has an image over 2 MiB (smaller ones are not folded). Cases that must not
fold: a dynamic Aipp, a 0.9 MB image, an image read by two nodes, and
--disable-pass aipp_conv_fusion; each note in the report must say why (or nothing is folded),
and the last three must still compute the right output.
"""

import csv
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import aipp_reference as ar  # noqa: E402

RTOL = 1e-4
FAILURES = []


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    FAILURES.append(msg)


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def conv2d(x, w, b, stride, pads, dilation):
    """NumPy float64 convolution, NCHW, one group; pads (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - ((kh - 1) * dilation + 1)) // stride + 1
    ow = (wd + pads[1] + pads[3] - ((kw - 1) * dilation + 1)) // stride + 1
    y = np.zeros((n, m, oh, ow))
    for i in range(kh):
        for j in range(kw):
            r, q = i * dilation, j * dilation
            patch = xp[:, :, r:r + (oh - 1) * stride + 1:stride, q:q + (ow - 1) * stride + 1:stride]
            y += np.einsum("mc,nchw->nmhw", w[:, :, i, j], patch)
    return y + b.reshape(1, -1, 1, 1)


class Net:
    """Conv(c -> m, k x k, stride, pads, dilation) [+ Relu] [+ Conv(m -> m, 1x1)]."""

    def __init__(self, rng, channels, m, k, stride, pads, dilation=1, relu=True, second=True):
        self.c, self.m, self.k, self.stride, self.pads, self.dilation = channels, m, k, stride, pads, dilation
        self.relu, self.second = relu, second
        self.w1 = rng.normal(0, 0.3, (m, channels, k, k)).astype(np.float32)
        self.b1 = rng.normal(0, 0.5, m).astype(np.float32)
        self.w2 = rng.normal(0, 0.1, (m, m, 1, 1)).astype(np.float32)
        self.b2 = rng.normal(0, 0.5, m).astype(np.float32)

    def onnx(self, path, shape, two_readers=False):
        inits = [numpy_helper.from_array(self.w1, "w1"), numpy_helper.from_array(self.b1, "b1")]
        nodes = [helper.make_node("Conv", ["data0", "w1", "b1"], ["c1"], strides=[self.stride] * 2,
                                  pads=list(self.pads), dilations=[self.dilation] * 2,
                                  kernel_shape=[self.k] * 2)]
        last = "c1"
        if self.relu:
            nodes.append(helper.make_node("Relu", ["c1"], ["r1"]))
            last = "r1"
        if self.second:
            inits += [numpy_helper.from_array(self.w2, "w2"), numpy_helper.from_array(self.b2, "b2")]
            nodes.append(helper.make_node("Conv", [last, "w2", "b2"], ["c2"], kernel_shape=[1, 1]))
            last = "c2"
        outputs = [helper.make_tensor_value_info("out0", TensorProto.FLOAT, None)]
        nodes.append(helper.make_node("Identity", [last], ["out0"]))
        if two_readers:  # the image read by the Conv and by a second output
            nodes.append(helper.make_node("Identity", ["data0"], ["image"]))
            outputs.append(helper.make_tensor_value_info("image", TensorProto.FLOAT, None))
        graph = helper.make_graph(nodes, "aipp_conv", [helper.make_tensor_value_info(
            "data0", TensorProto.FLOAT, shape)], outputs, inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)

    def forward(self, x):
        p = self.pads  # ONNX: top, left, bottom, right
        y = conv2d(x, self.w1.astype(np.float64), self.b1.astype(np.float64), self.stride, p, self.dilation)
        if self.relu:
            y = np.maximum(y, 0)
        if self.second:
            y = conv2d(y, self.w2.astype(np.float64), self.b2.astype(np.float64), 1, (0, 0, 0, 0), 1)
        return y


def nv12(w, h, **extra):
    cfg = {"input_format": "YUV420SP_U8", "src_image_size_w": w, "src_image_size_h": h,
           "csc_switch": True, "csc_preset": "BT601_NARROW"}
    cfg.update(ar.imagenet_fields())
    cfg.update(extra)
    return cfg


def rgb(w, h, **extra):
    cfg = {"input_format": "RGB888_U8", "src_image_size_w": w, "src_image_size_h": h}
    cfg.update(ar.imagenet_fields())
    cfg.update(extra)
    return cfg


# (name, aipp config, batch, Net arguments): NV12 and RGB888, crop / resize / padding, stride 1
# and 2, padding of the convolution (asymmetric too), Relu or none, 16 and 32 output channels
# (one and two NC1HWC0 blocks), a plain output (no second conv: the conv's output is the
# graph's), dilation, batch 2.
CASES = [
    ("nv12_resize_s2_relu", nv12(1280, 720, resize=True, resize_output_w=640, resize_output_h=352), 1,
     dict(m=16, k=3, stride=2, pads=(1, 1, 1, 1))),
    ("nv12_crop_pad_s1_relu_m32", nv12(800, 600, crop=True, load_start_pos_w=13, load_start_pos_h=7,
                                       crop_size_w=600, crop_size_h=400, padding=True, top_padding_size=3,
                                       bottom_padding_size=5, left_padding_size=2, right_padding_size=6,
                                       padding_value=0.25), 2,
     dict(m=32, k=3, stride=1, pads=(1, 1, 1, 1))),
    ("rgb_crop_resize_s2_plain_out", rgb(700, 500, crop=True, load_start_pos_w=21, load_start_pos_h=10,
                                         crop_size_w=650, crop_size_h=400, resize=True, resize_output_w=641,
                                         resize_output_h=361), 1,
     dict(m=16, k=3, stride=2, pads=(0, 1, 1, 0), relu=False, second=False)),
    ("bgr_pad_s1_k5_dil2_relu", rgb(640, 280, rbuv_swap_switch=True, padding=True, top_padding_size=4,
                                    bottom_padding_size=0, left_padding_size=0, right_padding_size=8,
                                    padding_value=-1.5), 1,
     dict(m=16, k=5, stride=1, pads=(4, 4, 4, 4), dilation=2)),
    ("rgb_s2_no_pad_m8_plain", rgb(641, 300), 1,
     dict(m=8, k=3, stride=2, pads=(0, 0, 0, 0), relu=True, second=False)),
]


def report_of(path):
    with open(path) as f:
        rep = json.load(f)
    notes = [n for p in rep.get("passes", []) for n in p.get("notes", []) if n.startswith("aipp_conv_fusion")]
    return rep.get("fusions", {}).get("Aipp+Conv", 0), notes


def compile_case(kiln, d, net, cfg, batch, name, mode="static", extra=(), two_readers=False):
    w, h = ar.output_size(cfg) if mode == "static" else (64, 48)
    shape = [batch, net.c, h, w]
    net.onnx(os.path.join(d, "m.onnx"), shape, two_readers)
    with open(os.path.join(d, "aipp.cfg"), "w") as f:
        f.write(ar.config_text(cfg, aipp_mode=mode))
    report = os.path.join(d, "report.json")
    r = run([kiln, "compile", os.path.join(d, "m.onnx"), "-o", os.path.join(d, "m.kiln"), "--insert-op-conf",
             os.path.join(d, "aipp.cfg"), "--report", report] + list(extra))
    if r.returncode != 0:
        fail(f"{name}: compile exit {r.returncode}: {r.stderr.strip()}")
        return None
    return report_of(report)


def check_outputs(kiln, d, net, cfg, batch, name, rng, two_readers=False):
    images = ar.random_images(cfg["input_format"], cfg["src_image_size_w"], cfg["src_image_size_h"], batch, rng)
    np.save(os.path.join(d, "image.npy"), images)
    x = ar.aipp(cfg, images, net.c).astype(np.float32).astype(np.float64)
    ref = net.forward(x)
    for mode, extra in (("fast", []), ("reference", ["--reference-kernels"])):
        out_dir = os.path.join(d, f"out_{mode}")
        r = run([kiln, "run", os.path.join(d, "m.kiln"), "--input", f"data0={os.path.join(d, 'image.npy')}",
                 "--output-dir", out_dir, "--warmup", "0"] + extra)
        if r.returncode != 0:
            fail(f"{name} [{mode}]: run exit {r.returncode}: {r.stderr.strip()}")
            continue
        got = np.load(os.path.join(out_dir, "out0.npy"))
        if got.shape != ref.shape:
            fail(f"{name} [{mode}]: output {list(got.shape)}, want {list(ref.shape)}")
            continue
        rel = np.abs(got.astype(np.float64) - ref).max() / np.abs(ref).max()
        if rel > RTOL:
            fail(f"{name} [{mode}]: max |kiln - ref| / max |ref| = {rel:.3g} > {RTOL}")
        else:
            print(f"ok {name} [{mode} kernels]: output {list(got.shape)}, max rel err {rel:.2g}", flush=True)


def check_folded(kiln, work, case, rng):
    name, cfg, batch, net_args = case
    d = os.path.join(work, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    net = Net(rng, 3, **net_args)
    rep = compile_case(kiln, d, net, cfg, batch, name)
    if rep is None:
        return
    folded, notes = rep
    if folded != 1 or not any("folded into AippConv" in n for n in notes):
        fail(f"{name}: the compile report shows {folded} Aipp+Conv fusion(s), notes {notes}")
    r = run([kiln, "inspect", "--json", os.path.join(d, "m.kiln")])
    desc = json.loads(r.stdout).get("aipp", {}).get("data0", "") if r.returncode == 0 else ""
    if "static AIPP" not in desc or cfg["input_format"] not in desc:
        fail(f"{name}: kiln inspect does not show the AIPP configuration: {desc!r} {r.stderr.strip()}")
    r = run([kiln, "inspect", "--nodes", os.path.join(d, "m.kiln")])
    if "AippConv" not in r.stdout:
        fail(f"{name}: kiln inspect --nodes shows no AippConv node")
    check_outputs(kiln, d, net, cfg, batch, name, rng)
    # The fast kernel must have taken the node (a refused one runs the reference, which the
    # outputs above would not show).
    prof = os.path.join(d, "profile")
    r = run([kiln, "profile", os.path.join(d, "m.kiln"), "--input", f"data0={os.path.join(d, 'image.npy')}",
             "--loops", "1", "--warmup", "0", "--output", prof])
    impls = []
    if r.returncode == 0:
        with open(os.path.join(prof, "op_summary.csv")) as f:
            rows = list(csv.DictReader(f))
        impls = sorted({row["implementation"] for row in rows if row["op type"] == "AippConv"})
    if not impls or any(i == "reference" for i in impls):
        fail(f"{name}: AippConv ran on {impls or r.stderr.strip()}, not its fast kernel")
    else:
        print(f"ok {name}: AippConv ran on {impls[0]}", flush=True)


def check_not_folded(kiln, work, rng):
    base_cfg, base_args = CASES[0][1], CASES[0][3]
    # (name, mode, compile options, two readers, the note's reason, run it)
    for name, mode, extra, two, why, runs in (
            ("dynamic", "dynamic", [], False, "a dynamic Aipp", False),
            ("small_image", "small", [], False, "stays in the cache", True),
            ("two_readers", "static", [], True, "2 readers", True),
            ("disabled", "static", ["--disable-pass", "aipp_conv_fusion"], False, None, True)):
        d = os.path.join(work, "not_" + name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        net = Net(rng, 3, **base_args)
        if mode == "small":  # 320x240 float32: 0.9 MB
            cfg, mode = nv12(640, 480, resize=True, resize_output_w=320, resize_output_h=240), "static"
        elif mode == "dynamic":
            cfg = {"max_src_image_size": 1280 * 720 * 3 // 2}
        else:
            cfg = base_cfg
        rep = compile_case(kiln, d, net, cfg, 1, name, mode, extra, two)
        if rep is None:
            continue
        folded, notes = rep
        if folded != 0:
            fail(f"not_{name}: folded anyway (notes {notes})")
        elif why and not any("not folded" in n and why in n for n in notes):
            fail(f"not_{name}: no note saying '{why}': {notes}")
        else:
            print(f"ok not_{name}: not folded; notes {notes}", flush=True)
        if runs:
            check_outputs(kiln, d, net, cfg, 1, "not_" + name, rng)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    kiln, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(26)
    for case in CASES:
        check_folded(kiln, work, case, rng)
    check_not_folded(kiln, work, rng)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all AippConv cases agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
