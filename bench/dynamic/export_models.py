#!/usr/bin/python3
"""BERT-base and ResNet-50 with open dims for bench/dynamic_shapes.sh (issue 24).

The models, weights and export settings of the e2e suite (tests/e2e/make_torch_models.py:
seeded weights, BatchNorm kept, constant folding off, its opsets), exported with open dims:
- bert/model.onnx: input_ids and attention_mask [batch, seq] (int64), outputs
  last_hidden_state [batch, seq, 768] and pooler_output [batch, 768];
- resnet50/model.onnx: input [batch, 3, 224, 224], logits [batch, 1000].
The export traces an example of batch 2 (and sequence 16), so that no size-1 dim is baked in.

usage: export_models.py OUT_DIR [bert] [resnet50]
A model whose stamp matches this script, make_torch_models.py and the torch versions is kept.
"""

import argparse
import hashlib
import os
import shutil
import sys
import time

import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "tests", "e2e"))
import make_torch_models as e2e  # noqa: E402

ALL_MODELS = ("bert", "resnet50")


def log(msg):
    print(f"[export_models] {msg}", flush=True)


def digest():
    h = hashlib.sha256(e2e.script_hash().encode())
    with open(os.path.abspath(__file__), "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def build(name):
    if name == "bert":
        torch.manual_seed(0)
        model = e2e.Bert().eval()
        gen = torch.Generator().manual_seed(1)
        ids = torch.randint(1000, e2e.BERT_VOCAB, (2, 16), generator=gen, dtype=torch.int64)
        mask = torch.ones(2, 16, dtype=torch.int64)
        axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                "last_hidden_state": {0: "batch", 1: "seq"}, "pooler_output": {0: "batch"}}
        return (model, (ids, mask), ["input_ids", "attention_mask"],
                ["last_hidden_state", "pooler_output"], axes, e2e.SPECS["bert"]["opset"])
    model, _, input_names, output_names = e2e.build_vision("resnet50")
    x = torch.randn(2, 3, 224, 224, generator=torch.Generator().manual_seed(2))
    axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
    return model, (x,), input_names, output_names, axes, e2e.SPECS["resnet50"]["opset"]


def export(name, out_root, stamp_value):
    out = os.path.join(out_root, name)
    stamp = os.path.join(out, ".stamp")
    onnx_path = os.path.join(out, "model.onnx")
    if os.path.isfile(onnx_path) and os.path.isfile(stamp):
        with open(stamp) as f:
            if f.read().strip() == stamp_value:
                log(f"{name}: cached in {out}")
                return
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    t0 = time.time()
    model, inputs, input_names, output_names, axes, opset = build(name)
    tmp = onnx_path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, inputs, tmp, opset_version=opset, input_names=input_names,
                          output_names=output_names, dynamic_axes=axes, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    onnx.checker.check_model(tmp, full_check=True)
    os.replace(tmp, onnx_path)
    with open(stamp, "w") as f:
        f.write(stamp_value + "\n")
    log(f"{name}: exported with open dims (opset {opset}) in {time.time() - t0:.1f}s")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("models", nargs="*", choices=ALL_MODELS, default=list(ALL_MODELS))
    args = p.parse_args()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    stamp_value = digest()
    for m in args.models:
        export(m, args.out_dir, stamp_value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
