#!/usr/bin/python3
"""Refits a classifier's last layer to real images, so that top-1 agreement means something.

The seeded random-weight models of tests/e2e/make_torch_models.py predict almost one class
for every image (on the 600 evaluation images of collect_images.py ResNet-50's fp32 argmax
takes 3 distinct values, MobileNetV2's 3, 560 of 600 the same), so "top-1 agreement with
fp32" is near-trivial there, or decided by logit margins of a few hundredths. This replaces
the final Gemm (the one producing the graph output) by a linear classifier fitted to the
model's own features, keeping the backbone's random weights:

  1. features: the Gemm's input (the pooled, flattened activations) of the FIT images, computed
     by ONNX Runtime (bench/quant/eval_ort.js), not by Kiln;
  2. labels: k-means (k-means++ seeding, fixed seed) of those features into K clusters: the
     labelling is the images' own grouping, there is no ground truth;
  3. the Gemm: ridge least squares from the centred features to the centred one-hot labels
     (dual form, n < D), lambda = 0.1 * mean eigenvalue of the Gram matrix; its K outputs
     replace the 1000, scaled so the fitted images' logits span about +-10 as a trained
     ImageNet network's do.

It is an honest stand-in, not ImageNet accuracy: the backbone is untrained, the labels are
clusters. Only the FIT images are seen; the images top-1 agreement is measured on are not.

usage: fit_classifier.py MODEL.onnx FIT_DIR -o OUT.onnx [--first N] [--classes 16] [--seed 28]
                         [--threads 1]
  FIT_DIR: .npy samples (collect_images.py's calibration/); --first N uses the first N in name
  order (kiln quantize holds out the LAST --eval-fraction of its samples for the sensitivity
  analysis: fitting on the rest keeps that held-out part unseen too).
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))


def final_gemm(graph):
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type == "Gemm" and node.output[0] in outputs:
            return node
    sys.exit("no Gemm produces a graph output")


def ort_features(model, gemm, files, threads, tmp):
    """The Gemm's input per sample, from ONNX Runtime on a copy whose output is that input."""
    feat = onnx.ModelProto()
    feat.CopyFrom(model)
    g = feat.graph
    g.node.remove([n for n in g.node if n.name == gemm.name and n.output[0] == gemm.output[0]][0])
    for init in [i for i in g.initializer if i.name in gemm.input[1:]]:
        g.initializer.remove(init)
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info(gemm.input[0], onnx.TensorProto.FLOAT,
                                                       None))
    path = os.path.join(tmp, "features.onnx")
    onnx.save(feat, path)
    out = os.path.join(tmp, "features.npy")
    subprocess.run(["node", os.path.join(HERE, "eval_ort.js"), path, out, str(threads)] + files,
                   cwd=SRC, check=True)
    x = np.load(out).astype(np.float64)
    return x.reshape(x.shape[0], -1)


def kmeans(x, k, rng, iterations=100):
    centres = [x[rng.randint(len(x))]]
    for _ in range(1, k):   # k-means++: the next centre drawn with probability ~ squared distance
        d2 = ((x[:, None, :] - np.array(centres)[None]) ** 2).sum(2).min(1)
        centres.append(x[rng.choice(len(x), p=d2 / d2.sum())])
    centres = np.array(centres)
    for _ in range(iterations):
        labels = ((x[:, None, :] - centres[None]) ** 2).sum(2).argmin(1)
        new = np.array([x[labels == c].mean(0) if (labels == c).any() else centres[c]
                        for c in range(k)])
        if np.allclose(new, centres):
            break
        centres = new
    return labels


def fit_ridge(x, labels, k):
    """W [D, K], b [K] minimising |(x W + b) - onehot|^2 + lam |W|^2."""
    mu = x.mean(0)
    xc = x - mu
    y = np.eye(k)[labels]
    ybar = y.mean(0)
    gram = xc @ xc.T
    lam = 0.1 * np.trace(gram) / len(x)
    w = xc.T @ np.linalg.solve(gram + lam * np.eye(len(x)), y - ybar)
    return w, ybar - mu @ w


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("fit_dir")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--classes", type=int, default=16)
    p.add_argument("--seed", type=int, default=28)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)

    files = sorted(glob.glob(os.path.join(args.fit_dir, "*.npy")))
    if args.first:
        files = files[:args.first]
    if len(files) < 2 * args.classes:
        sys.exit(f"{len(files)} fit samples for {args.classes} classes: too few")
    model = onnx.load(args.model)
    gemm = final_gemm(model.graph)
    with tempfile.TemporaryDirectory() as tmp:
        x = ort_features(model, gemm, files, args.threads, tmp)

    labels = kmeans(x, args.classes, np.random.RandomState(args.seed))
    w, b = fit_ridge(x, labels, args.classes)
    logits = x @ w + b
    scale = 10.0 / np.abs(logits).max()
    w, b, logits = w * scale, b * scale, logits * scale

    inits = {i.name: i for i in model.graph.initializer}
    inits[gemm.input[1]].CopyFrom(numpy_helper.from_array(
        np.ascontiguousarray(w.T).astype(np.float32), gemm.input[1]))   # transB = 1: [K, D]
    inits[gemm.input[2]].CopyFrom(numpy_helper.from_array(b.astype(np.float32), gemm.input[2]))
    for o in model.graph.output:
        if o.name == gemm.output[0]:
            o.type.tensor_type.shape.dim[-1].Clear()
            o.type.tensor_type.shape.dim[-1].dim_value = args.classes
    del model.graph.value_info[:]   # shapes below the Gemm are re-inferred by whoever loads it
    onnx.checker.check_model(model)
    onnx.save(model, args.output)

    counts = np.bincount(labels, minlength=args.classes)
    fit_agree = float((logits.argmax(1) == labels).mean())
    top2 = np.sort(logits, 1)[:, -2:]
    print(f"{args.output}: {len(files)} fit samples of {args.fit_dir}, {x.shape[1]} features "
          f"(ONNX Runtime), {args.classes} k-means classes of sizes {counts.tolist()}; the fitted "
          f"Gemm predicts its cluster for {fit_agree * 100:.1f}% of them, median top-1 margin "
          f"{np.median(top2[:, 1] - top2[:, 0]):.3f} (logits within +-10)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
