#!/usr/bin/python3
"""Turns an image into a PP-OCR detection model input.

Usage: image_to_npy.py IMAGE OUT.npy [--size 640x640]

The image is fitted into WIDTHxHEIGHT keeping its aspect ratio, normalised with ImageNet mean/std
in BGR order as PP-OCR does, zero-padded, and saved as float32 [1, 3, HEIGHT, WIDTH].
"""

import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import image_util  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("image")
    parser.add_argument("output")
    parser.add_argument("--size", default="640x640", help="WIDTHxHEIGHT (default 640x640)")
    args = parser.parse_args()
    m = re.fullmatch(r"(\d+)x(\d+)", args.size)
    if not m or int(m.group(1)) == 0 or int(m.group(2)) == 0:
        parser.error(f"--size must be WIDTHxHEIGHT with positive numbers, got '{args.size}'")
    w, h = int(m.group(1)), int(m.group(2))
    try:
        x = image_util.det_input(image_util.load_rgb(args.image), h, w)
    except (OSError, RuntimeError) as e:
        print(f"image_to_npy.py: {e}", file=sys.stderr)
        return 1
    np.save(args.output, x)
    print(f"{args.output}: float32 {list(x.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
