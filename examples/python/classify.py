#!/usr/bin/python3
"""Classify an image with an ImageNet model through kiln.InferenceSession.

Usage: classify.py MODEL.onnx|MODEL.kiln IMAGE [--labels FILE] [--top 5] [--threads N]

Any model taking a [N, 3, 224, 224] float32 ImageNet-normalised RGB input and returning
logits works: torchvision's ResNet-50 exported to ONNX, or the seeded one the e2e tests make
(python3 tests/e2e/make_torch_models.py models --models resnet50; its weights are random,
so its classes mean nothing, but the flow is the real one). Only the import differs from
ONNX Runtime's version of this script (onnxruntime.InferenceSession -> kiln.InferenceSession).
"""

import argparse
import time

import numpy as np
from PIL import Image

import kiln

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def preprocess(path, size=224):
    """Resize the short side to 256, centre-crop `size`, normalise, NCHW float32."""
    img = Image.open(path).convert("RGB")
    scale = 256 / min(img.size)
    img = img.resize((round(img.width * scale), round(img.height * scale)), Image.BILINEAR)
    left, top = (img.width - size) // 2, (img.height - size) // 2
    img = img.crop((left, top, left + size, top + size))
    x = (np.asarray(img, np.float32) / 255 - MEAN) / STD
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("image")
    parser.add_argument("--labels", help="a text file with one class name per line")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--threads", type=int)
    args = parser.parse_args()

    with kiln.InferenceSession(args.model, threads=args.threads) as sess:
        inp = sess.get_inputs()[0]
        print(f"input {inp.name}: {inp.type} {inp.shape}; output {sess.get_outputs()[0].name}")
        x = preprocess(args.image)
        sess.run(None, {inp.name: x})  # warm-up
        t = time.perf_counter()
        (logits,) = sess.run(None, {inp.name: x})
        ms = 1e3 * (time.perf_counter() - t)
    logits = logits.reshape(-1)
    p = np.exp(logits - logits.max())
    p /= p.sum()
    labels = open(args.labels).read().splitlines() if args.labels else None
    print(f"{ms:.1f} ms")
    for k in np.argsort(-p)[: args.top]:
        print(f"{p[k]:.4f}  {labels[k] if labels else f'class {k}'}")


if __name__ == "__main__":
    main()
