"""Image loading and PP-OCR style preprocessing in NumPy, shared by the e2e input scripts.

Decoding uses PIL when it is importable and ImageMagick's `convert` otherwise; everything after
decoding (resize, crop, normalise) is NumPy, so both paths give bit-identical inputs.
"""

import math
import os
import shutil
import subprocess

import numpy as np

# PP-OCR's detection normalisation (ImageNet statistics), applied to its BGR channel order.
DET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
DET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def _have_pil():
    if os.environ.get("KILN_E2E_NO_PIL"):  # Lets the ImageMagick path be tested where PIL exists.
        return False
    try:
        import PIL.Image  # noqa: F401 (only whether it imports matters)
        return True
    except ImportError:
        return False


def load_rgb(path):
    """Returns the image as a uint8 array of shape [H, W, 3] in RGB order."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"image '{path}' not found")
    if _have_pil():
        from PIL import Image
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()
    convert = shutil.which("convert")
    identify = shutil.which("identify")
    if not convert or not identify:
        raise RuntimeError("neither PIL nor ImageMagick (convert, identify) is available to "
                           "decode images; install python3-pil or imagemagick")
    size = subprocess.run([identify, "-format", "%w %h", path + "[0]"], check=True,
                          capture_output=True, text=True).stdout.split()
    w, h = int(size[0]), int(size[1])
    raw = subprocess.run([convert, path + "[0]", "-alpha", "off", "-depth", "8", "rgb:-"],
                         check=True, capture_output=True).stdout
    if len(raw) != w * h * 3:
        raise RuntimeError(f"convert gave {len(raw)} bytes for a {w}x{h} RGB image")
    return np.frombuffer(raw, dtype=np.uint8).reshape(h, w, 3).copy()


def resize_bilinear(img, out_h, out_w):
    """Bilinear resize with half-pixel centres (as OpenCV's INTER_LINEAR), float32 result."""
    h, w = img.shape[:2]
    src = img.astype(np.float32)

    def coords(out_n, in_n):
        x = (np.arange(out_n, dtype=np.float64) + 0.5) * (in_n / out_n) - 0.5
        x = np.clip(x, 0, in_n - 1)
        x0 = np.floor(x).astype(np.int64)
        x1 = np.minimum(x0 + 1, in_n - 1)
        return x0, x1, (x - x0).astype(np.float32)

    y0, y1, fy = coords(out_h, h)
    x0, x1, fx = coords(out_w, w)
    fy = fy[:, None, None]
    fx = fx[None, :, None]
    top = src[y0][:, x0] * (1 - fx) + src[y0][:, x1] * fx
    bottom = src[y1][:, x0] * (1 - fx) + src[y1][:, x1] * fx
    return top * (1 - fy) + bottom * fy


def det_input(rgb, out_h=640, out_w=640):
    """PP-OCR detection input [1, 3, out_h, out_w] float32.

    Resized keeping the aspect ratio to fit out_h x out_w, normalised per channel with ImageNet
    mean/std in BGR order (PP-OCR reads with OpenCV), zero-padded at the bottom and right.
    """
    h, w = rgb.shape[:2]
    scale = min(out_h / h, out_w / w)
    rh, rw = max(1, int(round(h * scale))), max(1, int(round(w * scale)))
    bgr = rgb[:, :, ::-1]
    img = bgr.astype(np.float32) if (rh, rw) == (h, w) else resize_bilinear(bgr, rh, rw)
    img = (img / 255.0 - DET_MEAN) / DET_STD
    out = np.zeros((out_h, out_w, 3), dtype=np.float32)
    out[:rh, :rw] = img
    return out.transpose(2, 0, 1)[None].astype(np.float32)


def text_lines(rgb, threshold=128, margin=6):
    """Bounding boxes (top, bottom, left, right) of the dark text lines, top to bottom."""
    dark = rgb.mean(axis=2) < threshold
    rows = dark.any(axis=1)
    lines = []
    r = 0
    h, w = dark.shape
    while r < h:
        if not rows[r]:
            r += 1
            continue
        start = r
        while r < h and rows[r]:
            r += 1
        cols = np.nonzero(dark[start:r].any(axis=0))[0]
        lines.append((max(0, start - margin), min(h, r + margin),
                      max(0, int(cols[0]) - margin), min(w, int(cols[-1]) + 1 + margin)))
    return lines


def line_input(rgb, box, out_h=48, out_w=320):
    """PP-OCR recognition/classification input [1, 3, out_h, out_w] float32 from a crop.

    As PaddleOCR's resize_norm_img: height out_h, width from the aspect ratio capped at out_w,
    (x / 255 - 0.5) / 0.5 in BGR order, zero-padded on the right.
    """
    top, bottom, left, right = box
    crop = rgb[top:bottom, left:right, ::-1]
    h, w = crop.shape[:2]
    rw = min(out_w, int(math.ceil(out_h * w / h)))
    img = resize_bilinear(crop, out_h, rw)
    img = (img / 255.0 - 0.5) / 0.5
    out = np.zeros((out_h, out_w, 3), dtype=np.float32)
    out[:, :rw] = img
    return out.transpose(2, 0, 1)[None].astype(np.float32)
