#!/usr/bin/python3
"""Builds seeded PyTorch models, exports them to ONNX and writes PyTorch's own outputs as references.

Usage: make_torch_models.py OUT_DIR [--models resnet50,mobilenet_v2,bert]

For each model writes OUT_DIR/<model>/model.onnx, input_<name>.npy and expected_<name>.npy
(names sanitised like `kiln run --output-dir`: every char outside [A-Za-z0-9._-] becomes '_').
The references come from PyTorch, not from ONNX, so they are independent of every ONNX consumer.
A model whose files exist and whose stamp matches the hash of this script is not rebuilt.
"""

import argparse
import hashlib
import math
import os
import re
import shutil
import sys
import time

import numpy as np
import onnx
import torch
import torchvision

ALL_MODELS = ("resnet50", "mobilenet_v2", "bert")
STAMP = ".stamp"


def log(msg):
    print(f"[make_torch_models] {msg}", flush=True)


def sanitize(name):
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def script_hash():
    # Another torch or torchvision may initialise or export differently: part of the key too.
    h = hashlib.sha256(f"{torch.__version__} {torchvision.__version__}\n".encode())
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Vision models.


def randomize_batchnorm(model, calib_input):
    """Gives every BatchNorm real running statistics and a non-identity affine part.

    Fresh BN layers have mean 0 / var 1 / gamma 1 / beta 0, which a wrong BN (or a wrong BN
    folding) would still reproduce. Running a seeded batch in train mode with a cumulative
    average makes the statistics real, so activations stay O(1) through 50 layers and the
    reference is well conditioned; gamma/beta are then perturbed so that the affine part matters.
    """
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # Cumulative moving average over the calibration batch.
    model.train()
    with torch.no_grad():
        model(calib_input)
        for bn in bns:
            bn.weight.uniform_(0.75, 1.25)
            bn.bias.uniform_(-0.1, 0.1)
            # A little noise on the statistics too, so they are not exactly the batch's.
            bn.running_mean.add_(torch.empty_like(bn.running_mean).uniform_(-0.05, 0.05))
            bn.running_var.mul_(torch.empty_like(bn.running_var).uniform_(0.9, 1.1))
    model.eval()


def build_vision(name):
    torch.manual_seed(0)
    if name == "resnet50":
        model = torchvision.models.resnet50(weights=None)
    else:
        model = torchvision.models.mobilenet_v2(weights=None)
    calib = torch.randn(4, 3, 224, 224)
    randomize_batchnorm(model, calib)
    x = torch.randn(1, 3, 224, 224)
    return model, (x,), ["input"], ["logits"]


# ---------------------------------------------------------------------------------------------
# BERT-base-like encoder in plain torch.

BERT_VOCAB = 30522
BERT_HIDDEN = 768
BERT_HEADS = 12
BERT_FFN = 3072
BERT_MAX_POS = 512
BERT_TYPES = 2
# All 12 layers of BERT-base: reference plus export (which runs the model again) take about a
# minute on 2 cores with Debian's torch, whose matmuls go through the generic reference BLAS.
BERT_LAYERS = 12
BERT_SEQ = 128
BERT_VALID = 100  # Tokens past this are padding, masked out by attention_mask.
BERT_LN_EPS = 1e-12


class BertLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.query = torch.nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.key = torch.nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.value = torch.nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.attn_out = torch.nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.attn_norm = torch.nn.LayerNorm(BERT_HIDDEN, eps=BERT_LN_EPS)
        self.ffn_in = torch.nn.Linear(BERT_HIDDEN, BERT_FFN)
        self.ffn_out = torch.nn.Linear(BERT_FFN, BERT_HIDDEN)
        self.ffn_norm = torch.nn.LayerNorm(BERT_HIDDEN, eps=BERT_LN_EPS)

    def split_heads(self, t):
        b, s, _ = t.shape
        return t.view(b, s, BERT_HEADS, BERT_HIDDEN // BERT_HEADS).permute(0, 2, 1, 3)

    def forward(self, h, mask_bias):
        q = self.split_heads(self.query(h))
        k = self.split_heads(self.key(h))
        v = self.split_heads(self.value(h))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(BERT_HIDDEN // BERT_HEADS)
        probs = torch.softmax(scores + mask_bias, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3)
        ctx = ctx.reshape(ctx.shape[0], ctx.shape[1], BERT_HIDDEN)
        h = self.attn_norm(h + self.attn_out(ctx))
        # Exact GELU (erf), as BERT uses; exported as Div/Erf/Add/Mul.
        f = self.ffn_out(torch.nn.functional.gelu(self.ffn_in(h)))
        return self.ffn_norm(h + f)


class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.word = torch.nn.Embedding(BERT_VOCAB, BERT_HIDDEN)
        self.position = torch.nn.Embedding(BERT_MAX_POS, BERT_HIDDEN)
        self.token_type = torch.nn.Embedding(BERT_TYPES, BERT_HIDDEN)
        self.emb_norm = torch.nn.LayerNorm(BERT_HIDDEN, eps=BERT_LN_EPS)
        self.layers = torch.nn.ModuleList(BertLayer() for _ in range(BERT_LAYERS))
        self.pooler = torch.nn.Linear(BERT_HIDDEN, BERT_HIDDEN)
        self.init_weights()

    def init_weights(self):
        # BERT's initialiser; LayerNorm gamma/beta are perturbed so they are not the identity.
        for m in self.modules():
            if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                m.weight.data.normal_(0.0, 0.02)
            if isinstance(m, torch.nn.Linear):
                m.bias.data.uniform_(-0.02, 0.02)
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.data.uniform_(0.8, 1.2)
                m.bias.data.uniform_(-0.1, 0.1)

    def forward(self, input_ids, attention_mask):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, dtype=torch.int64).unsqueeze(0)
        token_types = torch.zeros_like(input_ids)
        h = self.word(input_ids) + self.position(positions) + self.token_type(token_types)
        h = self.emb_norm(h)
        # [B, S] -> [B, 1, 1, S]: 0 where attended, -10000 where padded (BERT's own constant).
        mask_bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for layer in self.layers:
            h = layer(h, mask_bias)
        pooled = torch.tanh(self.pooler(h[:, 0]))
        return h, pooled


def build_bert():
    torch.manual_seed(0)
    model = Bert().eval()
    gen = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1000, BERT_VOCAB, (1, BERT_SEQ), generator=gen, dtype=torch.int64)
    input_ids[0, 0] = 101  # [CLS]
    input_ids[0, BERT_VALID - 1] = 102  # [SEP]
    input_ids[0, BERT_VALID:] = 0  # [PAD]
    attention_mask = torch.zeros(1, BERT_SEQ, dtype=torch.int64)
    attention_mask[0, :BERT_VALID] = 1
    return (model, (input_ids, attention_mask), ["input_ids", "attention_mask"],
            ["last_hidden_state", "pooler_output"])


# ---------------------------------------------------------------------------------------------

# Two opsets on purpose: 13, the most common in exported models, and 17, which brings
# LayerNormalization to BERT.
SPECS = {
    "resnet50": dict(opset=13, dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}),
    "mobilenet_v2": dict(opset=17, dynamic_axes=None),
    "bert": dict(opset=17, dynamic_axes=None),
}


def is_cached(out, digest):
    stamp = os.path.join(out, STAMP)
    if not os.path.isfile(stamp):
        return False
    with open(stamp) as f:
        if f.read().strip() != digest:
            return False
    return os.path.isfile(os.path.join(out, "model.onnx"))


def make_model(name, out_root, digest):
    out = os.path.join(out_root, name)
    if is_cached(out, digest):
        log(f"{name}: cached in {out}")
        return
    # Start empty: files of an older version of this script (or a half-written directory) must
    # neither look cached nor be picked up as inputs.
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    stamp = os.path.join(out, STAMP)
    spec = SPECS[name]

    t0 = time.time()
    model, inputs, input_names, output_names = build_bert() if name == "bert" else build_vision(
        name)
    log(f"{name}: built in {time.time() - t0:.1f}s")

    t0 = time.time()
    with torch.no_grad():
        outputs = model(*inputs)
    if isinstance(outputs, torch.Tensor):
        outputs = (outputs,)
    log(f"{name}: PyTorch reference in {time.time() - t0:.1f}s")

    # PRESERVE on a model in eval mode exports inference graphs like EVAL does, but skips the
    # exporter's eval peephole that would fold every BatchNorm into its Conv: BatchNorm stays
    # in the file so that Kiln's own BN handling (and BN folding) is what gets tested. Constant
    # folding is off so the shape arithmetic (Shape/Gather/Concat/Range) reaches Kiln too.
    t0 = time.time()
    onnx_path = os.path.join(out, "model.onnx")
    tmp_path = onnx_path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, inputs, tmp_path, opset_version=spec["opset"],
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=spec["dynamic_axes"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    onnx.checker.check_model(tmp_path, full_check=True)
    os.replace(tmp_path, onnx_path)
    log(f"{name}: exported (opset {spec['opset']}) and checked in {time.time() - t0:.1f}s")

    for n, t in zip(input_names, inputs):
        np.save(os.path.join(out, f"input_{sanitize(n)}.npy"), t.numpy())
    for n, t in zip(output_names, outputs):
        arr = t.numpy()
        np.save(os.path.join(out, f"expected_{sanitize(n)}.npy"), arr)
        log(f"{name}: output {n} shape {list(arr.shape)} max|ref| {np.abs(arr).max():.4g}")
    with open(stamp, "w") as f:
        f.write(digest + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--models", default=",".join(ALL_MODELS),
                        help="comma-separated subset of " + ",".join(ALL_MODELS))
    args = parser.parse_args()
    models = [m for m in args.models.split(",") if m]
    for m in models:
        if m not in ALL_MODELS:
            parser.error(f"unknown model '{m}'; choose from {','.join(ALL_MODELS)}")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    digest = script_hash()
    for m in models:
        t0 = time.time()
        make_model(m, args.out_dir, digest)
        log(f"{m}: done in {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
