#!/usr/bin/python3
"""Writes the PP-OCR inputs for the e2e tests from the sample image.

Usage: make_ocr_inputs.py IMAGE OUT_DIR [--models ocr_det,ocr_rec,ocr_cls]

Writes OUT_DIR/<model>/input_x.npy ('x' is the input name of all three PP-OCR models):
  ocr_det  [1,3,640,640]  the whole image, fitted and padded, ImageNet mean/std (BGR)
  ocr_rec  [1,3,48,320]   one text line, (x/255-0.5)/0.5, zero-padded on the right
  ocr_cls  [1,3,48,192]   another text line, same normalisation
The inputs are a pure function of the image (no randomness), so they are reproducible.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_util  # noqa: E402

ALL_MODELS = ("ocr_det", "ocr_rec", "ocr_cls")
# Which text line of the image (top to bottom) each line model reads: a mix of digits and
# punctuation for the recogniser, plain words for the orientation classifier.
REC_LINE = 3
CLS_LINE = 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("image")
    parser.add_argument("out_dir")
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in ALL_MODELS:
            parser.error(f"unknown model '{m}'; choose from {','.join(ALL_MODELS)}")

    t0 = time.time()
    rgb = image_util.load_rgb(args.image)
    lines = image_util.text_lines(rgb)
    needed = max(REC_LINE, CLS_LINE) + 1
    if any(m != "ocr_det" for m in models) and len(lines) < needed:
        print(f"make_ocr_inputs.py: {args.image} has {len(lines)} text lines, need {needed}",
              file=sys.stderr)
        return 1
    for m in models:
        if m == "ocr_det":
            x = image_util.det_input(rgb, 640, 640)
        elif m == "ocr_rec":
            x = image_util.line_input(rgb, lines[REC_LINE], 48, 320)
        else:
            x = image_util.line_input(rgb, lines[CLS_LINE], 48, 192)
        out = os.path.join(args.out_dir, m)
        os.makedirs(out, exist_ok=True)
        np.save(os.path.join(out, "input_x.npy"), x)
        print(f"[make_ocr_inputs] {m}: input x {list(x.shape)} -> {out}/input_x.npy", flush=True)
    print(f"[make_ocr_inputs] done in {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
