#!/usr/bin/python3
"""Writes past-KV decoders written unlike bench/llm/export_decoder.py's into OUT_DIR/variants
(a CTest fixture, tests/llm/CMakeLists.txt), so that the engine's attention matcher
(src/llm/decoder_graph_split.h) is shown not to be tied to that exporter:

  hf-gpt2/            a GPT-2 written as Hugging Face's modeling_gpt2 writes it: one fused QKV
                      projection as Conv1D (addmm over the flattened tokens, then view) split
                      in three, the scale on the queries (Mul) instead of a Div of the scores,
                      causality from a constant lower-triangular buffer sliced by the past and
                      new lengths and applied with Where(., scores, finfo.min), attention_mask
                      added as (1 - mask) * finfo.min, tanh GELU; with PyTorch's greedy decode
                      of test prompts (reference.json, reference_logits.npy; the torch module
                      with its own contiguous cache, batch 1) and config.json (context);
  refuse-softmax-axis/ the same model normalising over the queries' axis (Softmax axis 2);
  refuse-noncausal/   the same model without the causal buffer (every token sees every
                      other): both must be refused by the matcher, with the node named;
  refuse-token-mixing/ the same model adding the mean over the sequence to the embeddings
                      (outside attention, an op that mixes tokens): refused by the probe that
                      runs the stages on 3 tokens together and on each alone.
"""
import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "llm"))
import export_decoder  # noqa: E402  (the reference decode and the test prompts)

CONFIG = dict(style="hf-gpt2", vocab=160, d_model=64, layers=2, heads=4, kv_heads=4, ffn=256, context=128)


class Conv1D(nn.Module):
    """Hugging Face's Conv1D: a linear layer as addmm over the flattened tokens."""

    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)
        self.nf = nf

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Block(nn.Module):
    def __init__(self, c, softmax_axis, causal):
        super().__init__()
        d = c["d_model"]
        self.h, self.hd = c["heads"], d // c["heads"]
        self.softmax_axis, self.causal = softmax_axis, causal
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = Conv1D(3 * d, d), Conv1D(d, d)
        self.c_fc, self.c_proj2 = Conv1D(c["ffn"], d), Conv1D(d, c["ffn"])
        ctx = c["context"]
        self.register_buffer("bias", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)).view(1, 1, ctx, ctx))

    def split_heads(self, x):
        return x.view(x.size()[:-1] + (self.h, self.hd)).permute(0, 2, 1, 3)

    def forward(self, x, mask, past_k, past_v):
        q, k, v = self.c_attn(self.ln_1(x)).split(x.size(-1), dim=2)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        k, v = torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)
        w = torch.matmul(q * (self.hd ** -0.5), k.transpose(-1, -2))
        if self.causal:
            ql, kl = q.size(-2), k.size(-2)
            causal = self.bias[:, :, kl - ql:kl, :kl]
            w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = (w + mask).softmax(dim=self.softmax_axis)
        a = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        a = a.view(a.size()[:-2] + (self.h * self.hd,))
        x = x + self.c_proj(a)
        y = self.c_proj2(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x + y, k, v


class HfGpt2(nn.Module):
    def __init__(self, c, softmax_axis=-1, causal=True, mix_tokens=False):
        super().__init__()
        self.c = c
        self.mix_tokens = mix_tokens
        self.wte = nn.Embedding(c["vocab"], c["d_model"])
        self.wpe = nn.Embedding(c["context"], c["d_model"])
        self.h = nn.ModuleList([Block(c, softmax_axis, causal) for _ in range(c["layers"])])
        self.ln_f = nn.LayerNorm(c["d_model"])

    def forward(self, input_ids, attention_mask, position_ids, *past):
        mask = attention_mask[:, None, None, :].to(torch.float32)
        mask = (1.0 - mask) * torch.finfo(torch.float32).min
        x = self.wte(input_ids) + self.wpe(position_ids)
        if self.mix_tokens:
            x = x + x.mean(dim=1, keepdim=True)
        presents = []
        for i, blk in enumerate(self.h):
            x, k, v = blk(x, mask, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return (torch.matmul(self.ln_f(x), self.wte.weight.t()), *presents)


def build(seed, **kw):
    torch.manual_seed(seed)
    model = HfGpt2(CONFIG, **kw).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "ln" in n and "weight" in n:
                p.uniform_(0.8, 1.2)
            elif "ln" in n:
                p.normal_(0.0, 0.02)
            elif "wte" in n:
                p.normal_(0.0, 0.1)
            elif "wpe" in n:
                p.normal_(0.0, 0.02)
    return model


def write(out, model, reference):
    os.makedirs(out, exist_ok=True)
    export_decoder.export_past_kv(model, CONFIG, os.path.join(out, "decoder.onnx"))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"name": os.path.basename(out), "context": CONFIG["context"]}, f)
    if reference:
        prompts = export_decoder.test_prompts(CONFIG, 20, 4321)
        export_decoder.write_reference(model, CONFIG, prompts, 24, out, "reference")


def main():
    out = os.path.join(sys.argv[1], "variants")
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    write(os.path.join(out, "hf-gpt2"), build(99), reference=True)
    write(os.path.join(out, "refuse-softmax-axis"), build(99, softmax_axis=-2), reference=False)
    write(os.path.join(out, "refuse-noncausal"), build(99, causal=False), reference=False)
    write(os.path.join(out, "refuse-token-mixing"), build(99, mix_tokens=True), reference=False)


if __name__ == "__main__":
    main()
