#!/usr/bin/python3
"""Cosine of a BERT-style model's pooled output, float against int8, over N token inputs.

Inputs are shaped like real text: [CLS] first, [SEP] at a random length of 16..S tokens, token
ids drawn from the vocabulary's word-piece range, padding 0 with the attention mask 0 there
(a fixed seed, not the calibration seed). Both models run on Kiln through its Python package
(PYTHONPATH=build/release/python); a .onnx is compiled on load.

usage: bert_cosine.py FLOAT.onnx INT8.onnx [--n 100] [--seq 128] [--output pooler_output]
                      [--threads 2] [--seed 12345]
"""
import argparse
import json

import numpy as np


def token_inputs(rng, seq):
    ids = rng.integers(1000, 20000, (1, seq)).astype(np.int64)
    length = int(rng.integers(16, seq + 1))
    ids[0, 0] = 101  # [CLS]
    ids[0, length - 1] = 102  # [SEP]
    ids[0, length:] = 0
    return {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("float_model")
    p.add_argument("int8_model")
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--output", default="pooler_output")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=12345)
    a = p.parse_args()
    import kiln

    ref = kiln.InferenceSession(a.float_model, threads=a.threads)
    test = kiln.InferenceSession(a.int8_model, threads=a.threads)
    rng = np.random.default_rng(a.seed)
    cos = []
    for _ in range(a.n):
        feeds = token_inputs(rng, a.seq)
        x = ref.run([a.output], feeds)[0].ravel().astype(np.float64)
        y = test.run([a.output], feeds)[0].ravel().astype(np.float64)
        cos.append(float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))))
    cos = np.array(cos)
    print(f"{a.output} cosine over {a.n} inputs: mean {cos.mean():.5f}  min {cos.min():.5f}  "
          f"p1 {np.percentile(cos, 1):.5f}")
    print(json.dumps({"float": a.float_model, "int8": a.int8_model, "n": a.n, "mean": cos.mean(), "min": cos.min()}))


if __name__ == "__main__":
    main()
