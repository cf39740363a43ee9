"""NumPy reference of Kiln's AIPP (docs/aipp.md, src/ops/aipp_params.h), in float64.

A configuration is a dict of aipp.cfg field names (ATC's, plus Kiln's csc_preset and
csc_output_bgr) to values, e.g. {"input_format": "YUV420SP_U8", "src_image_size_w": 64, ...};
`config_text` writes it as an aipp.cfg. `aipp(cfg, images, out_shape, nhwc)` computes what
the model input receives from a batch of raw images:

  1. crop the window (load_start_pos_w/h, crop_size_w/h) of the source image;
  2. fetch each pixel's channels in the format's order (chroma of 4:2:x formats from the
     pixel's chroma sample, nearest); rbuv_swap_switch swaps U/V or R/B; ax_swap_switch puts
     the alpha/X byte of a 4-byte format last instead of first;
  3. resize: bilinear with half-pixel centres on the channels of step 2 (before the colour
     conversion, as CANN's DVPP -> AIPP order), source coordinate (o + 0.5) * in / out - 0.5
     clamped to [0, in - 1] (OpenCV INTER_LINEAR's taps, without antialiasing);
  4. csc_switch: v_c = clamp(sum_j M[c][j] * (in_j - input_bias_j) / 256 + output_bias_c,
     0, 255), no rounding (M in 1/256);
  5. out_c = (v_c - mean_chn_c - min_chn_c) * var_reci_chn_c;
  6. padding: the result at (left, top), padding_value around it.

Float fields (mean/min/var_reci, padding_value) are float32 in the file format; the reference
rounds them to float32 first, as the parser does, then computes in float64.

Shared by tests/preprocess (aipp_test.py, aipp_models_test.py) and the video/bench code.
"""

import numpy as np

FORMATS = ("YUV420SP_U8", "XRGB8888_U8", "RGB888_U8", "YUV400_U8", "ARGB8888_U8", "YUYV_U8",
           "YUV422SP_U8", "AYUV444_U8")
YUV_FORMATS = ("YUV420SP_U8", "YUV400_U8", "YUYV_U8", "YUV422SP_U8", "AYUV444_U8")
FOUR_BYTE_FORMATS = ("XRGB8888_U8", "ARGB8888_U8", "AYUV444_U8")

# (Kr, Kb, narrow range) of the csc_preset values.
PRESETS = {
    "BT601_NARROW": (0.299, 0.114, True),
    "BT601_FULL": (0.299, 0.114, False),
    "BT709_NARROW": (0.2126, 0.0722, True),
    "BT709_FULL": (0.2126, 0.0722, False),
}

# ImageNet normalisation in AIPP terms: (v - mean) * var_reci with var_reci = 1 / std.
IMAGENET_MEAN = (123.675, 116.28, 103.53)
IMAGENET_STD = (58.395, 57.12, 57.375)


def format_channels(fmt):
    """Colour channels + alpha a pixel of `fmt` gives: 1, 3 or 4."""
    return 1 if fmt == "YUV400_U8" else 4 if fmt in FOUR_BYTE_FORMATS else 3


def image_dims(fmt, w, h):
    """The raw shape of one image (no batch dim), as aipp_image_dims in aipp_params.h."""
    if fmt == "YUV420SP_U8":
        return (h * 3 // 2, w)
    if fmt == "YUV422SP_U8":
        return (h * 2, w)
    if fmt == "YUV400_U8":
        return (h, w)
    if fmt == "YUYV_U8":
        return (h, w * 2)
    if fmt == "RGB888_U8":
        return (h, w, 3)
    if fmt in FOUR_BYTE_FORMATS:
        return (h, w, 4)
    raise ValueError(f"unknown input_format {fmt}")


def random_images(fmt, w, h, batch, rng):
    """A batch of random raw images, uint8 [batch, *image_dims]."""
    return rng.integers(0, 256, size=(batch,) + image_dims(fmt, w, h), dtype=np.uint8)


def preset_matrix(preset, bgr=False):
    """(matrix [3][3] in 1/256, input_bias[3], output_bias[3]) of a csc_preset, YUV -> RGB.

    From the standard Kr/Kb: R = Y' + 2(1-Kr) V', G = Y' - (2Kb(1-Kb) U' + 2Kr(1-Kr) V') / Kg,
    B = Y' + 2(1-Kb) U', with Y' = (Y - 16) * 255/219 and U', V' = (U|V - 128) * 255/224 in
    narrow range (Y' = Y, U' = U - 128 in full range); each coefficient rounded to 1/256.
    """
    kr, kb, narrow = PRESETS[preset]
    kg = 1 - kr - kb
    ys = 255 / 219 if narrow else 1.0
    cs = 255 / 224 if narrow else 1.0
    rows = [[ys, 0.0, 2 * (1 - kr) * cs],
            [ys, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs],
            [ys, 2 * (1 - kb) * cs, 0.0]]
    # Round half away from zero, as C's lround (no coefficient sits on .5 anyway).
    m = [[float(np.sign(v) * np.floor(abs(v) * 256 + 0.5)) for v in row] for row in rows]
    if bgr:
        m = m[::-1]
    return m, [16.0 if narrow else 0.0, 128.0, 128.0], [0.0, 0.0, 0.0]


def _f32(v):
    return float(np.float32(v))


def csc_params(cfg):
    """(matrix, input_bias, output_bias) the configuration converts with, or None without CSC."""
    if not cfg.get("csc_switch", False):
        return None
    if any(k.startswith("matrix_r") for k in cfg):
        m = [[float(cfg.get(f"matrix_r{r}c{c}", 0)) for c in range(3)] for r in range(3)]
        ib = [float(cfg.get(f"input_bias_{i}", 0)) for i in range(3)]
        ob = [float(cfg.get(f"output_bias_{i}", 0)) for i in range(3)]
        return m, ib, ob
    preset = cfg.get("csc_preset", "NONE")
    return preset_matrix("BT601_NARROW" if preset == "NONE" else preset, cfg.get("csc_output_bgr", False))


def fetch(cfg, img):
    """Step 2 on one raw image: float64 [H, W, 4] channels (c0, c1, c2, alpha), 0 where absent."""
    fmt = cfg["input_format"]
    w, h = cfg["src_image_size_w"], cfg["src_image_size_h"]
    img = np.asarray(img, dtype=np.uint8).reshape(image_dims(fmt, w, h))
    ch = np.zeros((h, w, 4), dtype=np.float64)
    if fmt in ("YUV420SP_U8", "YUV422SP_U8"):
        ch[..., 0] = img[:h]
        uv = img[h:].reshape(-1, w // 2, 2)  # rows of (U, V) pairs
        if fmt == "YUV420SP_U8":
            uv = np.repeat(uv, 2, axis=0)
        uv = np.repeat(uv, 2, axis=1)
        ch[..., 1] = uv[..., 0]
        ch[..., 2] = uv[..., 1]
    elif fmt == "YUYV_U8":
        q = img.reshape(h, w // 2, 4)  # Y0 U Y1 V
        ch[:, 0::2, 0] = q[..., 0]
        ch[:, 1::2, 0] = q[..., 2]
        ch[..., 1] = np.repeat(q[..., 1], 2, axis=1)
        ch[..., 2] = np.repeat(q[..., 3], 2, axis=1)
    elif fmt == "YUV400_U8":
        ch[..., 0] = img
    elif fmt == "RGB888_U8":
        ch[..., :3] = img
    else:  # alpha/X first, or last with ax_swap_switch
        if cfg.get("ax_swap_switch", False):
            ch[..., :3] = img[..., :3]
            ch[..., 3] = img[..., 3]
        else:
            ch[..., :3] = img[..., 1:]
            ch[..., 3] = img[..., 0]
    if cfg.get("rbuv_swap_switch", False):
        i = 1 if fmt in YUV_FORMATS else 0  # U<->V, or R<->B
        ch[..., [i, 2]] = ch[..., [2, i]]
    return ch


def csc(cfg, ch):
    """Step 4 on [..., 4] channels: the colour channels converted and clamped, alpha kept."""
    p = csc_params(cfg)
    if p is None:
        return ch
    m, ib, ob = (np.asarray(a, dtype=np.float64) for a in p)
    out = ch.copy()
    d = ch[..., :3] - ib
    out[..., :3] = np.clip(d @ m.T / 256.0 + ob, 0.0, 255.0)
    return out


def bilinear_taps(n_in, n_out):
    """Per output index: (i0, i1, w1), half-pixel centres, source clamped to [0, n_in - 1]."""
    s = (np.arange(n_out, dtype=np.float64) + 0.5) * n_in / n_out - 0.5
    s = np.clip(s, 0.0, n_in - 1)
    i0 = np.floor(s).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    return i0, i1, s - i0


def resize_bilinear(x, out_h, out_w):
    """Step 3 on float64 [H, W, C]: bilinear, half-pixel centres, edges clamped."""
    h, w = x.shape[:2]
    if (h, w) == (out_h, out_w):
        return x
    y0, y1, wy = bilinear_taps(h, out_h)
    x0, x1, wx = bilinear_taps(w, out_w)
    wx = wx[None, :, None]
    top = x[y0][:, x0] * (1 - wx) + x[y0][:, x1] * wx
    bot = x[y1][:, x0] * (1 - wx) + x[y1][:, x1] * wx
    wy = wy[:, None, None]
    return top * (1 - wy) + bot * wy


def output_size(cfg):
    """(W, H) of the AIPP output: src_image_size, then crop, resize and padding."""
    w, h = cfg["src_image_size_w"], cfg["src_image_size_h"]
    if cfg.get("crop", False):
        w, h = cfg["crop_size_w"], cfg["crop_size_h"]
    if cfg.get("resize", False):
        w, h = cfg["resize_output_w"], cfg["resize_output_h"]
    if cfg.get("padding", False):
        w += cfg.get("left_padding_size", 0) + cfg.get("right_padding_size", 0)
        h += cfg.get("top_padding_size", 0) + cfg.get("bottom_padding_size", 0)
    return w, h


def aipp_image(cfg, img, channels):
    """Steps 1-6 on one raw image: float64 [H, W, channels] (HWC)."""
    ch = fetch(cfg, img)  # step 2 is per pixel: before the crop is the same
    if cfg.get("crop", False):
        x, y = cfg.get("load_start_pos_w", 0), cfg.get("load_start_pos_h", 0)
        ch = ch[y:y + cfg["crop_size_h"], x:x + cfg["crop_size_w"]]
    if cfg.get("resize", False):
        ch = resize_bilinear(ch, cfg["resize_output_h"], cfg["resize_output_w"])
    ch = csc(cfg, ch)[..., :channels]
    mean = np.array([_f32(cfg.get(f"mean_chn_{c}", 0)) for c in range(channels)])
    mn = np.array([_f32(cfg.get(f"min_chn_{c}", 0)) for c in range(channels)])
    var = np.array([_f32(cfg.get(f"var_reci_chn_{c}", 1)) for c in range(channels)])
    ch = (ch - mean - mn) * var
    if cfg.get("padding", False):
        w, h = output_size(cfg)
        out = np.full((h, w, channels), _f32(cfg.get("padding_value", 0)), dtype=np.float64)
        top, left = cfg.get("top_padding_size", 0), cfg.get("left_padding_size", 0)
        out[top:top + ch.shape[0], left:left + ch.shape[1]] = ch
        ch = out
    return ch


def aipp(cfg, images, channels, nhwc=False):
    """Steps 1-6 on a batch of raw images [N, *image_dims]: float64 NCHW (or NHWC)."""
    out = np.stack([aipp_image(cfg, img, channels) for img in images])
    return out if nhwc else out.transpose(0, 3, 1, 2)


def _value_text(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def config_text(cfg, aipp_mode="static", related_input_rank=0):
    """The aipp.cfg text of a configuration dict (one aipp_op block)."""
    lines = ["aipp_op {", f"  aipp_mode: {aipp_mode}", f"  related_input_rank: {related_input_rank}"]
    lines += [f"  {k}: {_value_text(v)}" for k, v in cfg.items()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def imagenet_fields(mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """mean_chn_c / var_reci_chn_c fields of a normalisation (v - mean) / std."""
    f = {}
    for c in range(3):
        f[f"mean_chn_{c}"] = float(mean[c])
        f[f"var_reci_chn_{c}"] = 1.0 / std[c]
    return f
