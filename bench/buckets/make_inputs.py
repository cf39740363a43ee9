#!/usr/bin/env python3
"""Inputs and references for bench/buckets/demo.sh, into WORK_DIR:
- bert_dyn.onnx: the e2e suite's BERT-base (tests/e2e/make_torch_models.py, same weights),
  exported with an open sequence axis; ids/mask of length 200 and the PyTorch outputs at that
  true length; ids/mask of a mix of lengths (60..450), also zero-padded to 512;
- rec500.npy: a 1x3x48x500 image in [0, 1), and rec500_p640.npy, it zero-padded to width 640.

usage: make_inputs.py REPO WORK_DIR
"""
import os
import sys

import numpy as np
import torch

repo, work = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(repo, "tests", "e2e"))
import make_torch_models as m  # noqa: E402

os.makedirs(work, exist_ok=True)
p = lambda name: os.path.join(work, name)  # noqa: E731
torch.manual_seed(0)
model = m.Bert().eval()
gen = torch.Generator().manual_seed(3)
lengths = [60, 140, 200, 300, 450]
for n in lengths:
    ids = torch.randint(1000, m.BERT_VOCAB, (1, n), generator=gen, dtype=torch.int64)
    ids[0, 0], ids[0, n - 1] = 101, 102  # [CLS] ... [SEP]
    mask = torch.ones(1, n, dtype=torch.int64)
    np.save(p(f"ids{n}.npy"), ids.numpy())
    np.save(p(f"mask{n}.npy"), mask.numpy())
    padded = np.zeros((2, 1, 512), np.int64)
    padded[0, :, :n], padded[1, :, :n] = ids.numpy(), mask.numpy()
    np.save(p(f"ids{n}_p512.npy"), padded[0])
    np.save(p(f"mask{n}_p512.npy"), padded[1])
    if n == 200:
        with torch.no_grad():
            h, pooled = model(ids, mask)
        np.save(p("torch_h200.npy"), h.numpy())
        np.save(p("torch_pooled200.npy"), pooled.numpy())
        with torch.no_grad():
            torch.onnx.export(model, (ids, mask), p("bert_dyn.onnx"), opset_version=17,
                              input_names=["input_ids", "attention_mask"],
                              output_names=["last_hidden_state", "pooler_output"],
                              dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"},
                                            "last_hidden_state": {1: "seq"}},
                              do_constant_folding=False)
rng = np.random.default_rng(5)
x = rng.random((1, 3, 48, 500), dtype=np.float32)
np.save(p("rec500.npy"), x)
xp = np.zeros((1, 3, 48, 640), np.float32)
xp[..., :500] = x
np.save(p("rec500_p640.npy"), xp)
print("inputs in", work)
