#!/usr/bin/python3
"""Decoder-only transformers in PyTorch, exported for Kiln's LLM engine (src/llm, docs/llm.md).

Two styles with seeded random weights (exact and fast; no download):
  gpt2:  learned positions, LayerNorm, GELU MLP, multi-head attention, tied embeddings;
  llama: RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, untied head.

`export` writes a model directory:
  config.json        the shapes the engine needs (style, sizes, heads, context) and the files;
  decoder.onnx       the whole decoder step in the common past-key-values form (inputs
                     input_ids, attention_mask, position_ids, past_key_values.N.key/value;
                     outputs logits, present.N.key/value), as other runtimes take it;
  embed.onnx, layerN.pre.onnx, layerN.post.onnx, head.onnx
                     the same weights split at the attention boundary, over a flat list of
                     tokens [T] (every sequence of a step side by side): what Kiln compiles,
                     while src/llm runs attention itself through the paged KV cache.
`reference` writes PyTorch's own greedy decode (tokens and the logits of every step, from the
torch module with its own contiguous KV cache) for the tests' prompts: the independent truth.

Everything runs single-threaded and is deterministic (fixed seeds, fixed prompt generator).
"""
import argparse
import json
import math
import os
import sys

import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # ~1M parameters: the tests' models, exported in a second or two.
    "gpt2-tiny": dict(style="gpt2", vocab=512, d_model=128, layers=4, heads=4, kv_heads=4, ffn=512, context=512),
    "llama-tiny": dict(style="llama", vocab=512, d_model=128, layers=4, heads=4, kv_heads=2, ffn=352, context=512),
    # ~10M parameters.
    "gpt2-10m": dict(style="gpt2", vocab=8192, d_model=256, layers=8, heads=8, kv_heads=8, ffn=1024, context=1024),
    "llama-10m": dict(style="llama", vocab=8192, d_model=256, layers=8, heads=8, kv_heads=2, ffn=704, context=1024),
    # GPT-2 small's configuration: 124M parameters.
    "gpt2-124m": dict(style="gpt2", vocab=50257, d_model=768, layers=12, heads=12, kv_heads=12, ffn=3072, context=1024),
}


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, pos, head_dim):
    """Rotates x [..., T, heads, head_dim] by positions pos [..., T] (rotate-half form)."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = pos.to(torch.float32).unsqueeze(-1) * inv_freq  # [..., T, hd/2]
    emb = torch.cat([freqs, freqs], dim=-1).unsqueeze(-2)  # [..., T, 1, hd]
    cos, sin = emb.cos(), emb.sin()
    half = head_dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def repeat_kv(x, group):
    """[B, Hkv, N, hd] -> [B, Hkv * group, N, hd], each KV head repeated for its query heads
    (Llama's repeat_kv: expand + reshape; torch 1.13 exports repeat_interleave with dynamic
    sizes to a graph that repeats the wrong axis)."""
    if group == 1:
        return x
    b, kvh, n, hd = x.shape
    return x[:, :, None, :, :].expand(b, kvh, group, n, hd).reshape(b, kvh * group, n, hd)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d, h, kvh = c["d_model"], c["heads"], c["kv_heads"]
        self.hd = d // h
        self.kv_bf16 = False  # round the cache's K/V to bfloat16 (the engine's bf16 KV pool)
        llama = c["style"] == "llama"
        self.norm1 = RMSNorm(d) if llama else nn.LayerNorm(d)
        self.norm2 = RMSNorm(d) if llama else nn.LayerNorm(d)
        self.q = nn.Linear(d, h * self.hd, bias=not llama)
        self.k = nn.Linear(d, kvh * self.hd, bias=not llama)
        self.v = nn.Linear(d, kvh * self.hd, bias=not llama)
        self.o = nn.Linear(h * self.hd, d, bias=not llama)
        if llama:
            self.gate = nn.Linear(d, c["ffn"], bias=False)
            self.up = nn.Linear(d, c["ffn"], bias=False)
            self.down = nn.Linear(c["ffn"], d, bias=False)
        else:
            self.up = nn.Linear(d, c["ffn"])
            self.down = nn.Linear(c["ffn"], d)

    def qkv(self, x, pos):
        """x [..., T, d] -> q [..., T, H, hd], k, v [..., T, Hkv, hd] (RoPE applied for llama)."""
        c = self.c
        y = self.norm1(x)
        shape = y.shape[:-1]
        q = self.q(y).reshape(*shape, c["heads"], self.hd)
        k = self.k(y).reshape(*shape, c["kv_heads"], self.hd)
        v = self.v(y).reshape(*shape, c["kv_heads"], self.hd)
        if c["style"] == "llama":
            q, k = rope(q, pos, self.hd), rope(k, pos, self.hd)
        return q, k, v

    def post(self, x, attn):
        """Residual + output projection, then the MLP block."""
        x = x + self.o(attn)
        y = self.norm2(x)
        if self.c["style"] == "llama":
            y = self.down(F.silu(self.gate(y)) * self.up(y))
        else:
            y = self.down(F.gelu(self.up(y)))
        return x + y

    def forward(self, x, pos, mask, past_k, past_v):
        """Batched step. x [B, T, d]; mask [B, 1, T, P+T] additive; past [B, Hkv, P, hd]."""
        q, k, v = self.qkv(x, pos)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [B, heads, T, hd]
        if self.kv_bf16:  # as stored (round to nearest even) and read back; the math stays fp32
            k, v = k.to(torch.bfloat16).to(torch.float32), v.to(torch.bfloat16).to(torch.float32)
        k = torch.cat([past_k, k], dim=2)
        v = torch.cat([past_v, v], dim=2)
        group = self.c["heads"] // self.c["kv_heads"]
        kk, vv = repeat_kv(k, group), repeat_kv(v, group)
        scores = q @ kk.transpose(-1, -2) / math.sqrt(self.hd) + mask
        attn = (scores.softmax(-1) @ vv).transpose(1, 2)
        attn = attn.reshape(attn.shape[0], attn.shape[1], -1)
        return self.post(x, attn), k, v


class Decoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wte = nn.Embedding(c["vocab"], c["d_model"])
        if c["style"] == "gpt2":
            self.wpe = nn.Embedding(c["context"], c["d_model"])
        self.blocks = nn.ModuleList([Block(c) for _ in range(c["layers"])])
        self.norm = RMSNorm(c["d_model"]) if c["style"] == "llama" else nn.LayerNorm(c["d_model"])
        self.lm_head = nn.Linear(c["d_model"], c["vocab"], bias=False)
        if c["style"] == "gpt2":
            self.lm_head.weight = self.wte.weight  # tied, as GPT-2

    def embed(self, ids, pos):
        x = self.wte(ids)
        if self.c["style"] == "gpt2":
            x = x + self.wpe(pos)
        return x

    def head(self, x):
        return self.lm_head(self.norm(x))

    def forward(self, input_ids, attention_mask, position_ids, *past):
        """The past-key-values step: attention_mask [B, P+T] (1 keep, 0 padding)."""
        b, t = input_ids.shape
        total = attention_mask.shape[1]
        p = total - t
        causal = torch.ones(t, total, dtype=torch.bool).tril(diagonal=p)
        keep = causal.unsqueeze(0) & attention_mask.bool().unsqueeze(1)  # [B, T, P+T]
        mask = torch.zeros(b, 1, t, total).masked_fill(~keep.unsqueeze(1), -1e9)
        x = self.embed(input_ids, position_ids)
        presents = []
        for i, blk in enumerate(self.blocks):
            x, k, v = blk(x, position_ids, mask, past[2 * i], past[2 * i + 1])
            presents += [k, v]
        return (self.head(x), *presents)


def build(name, seed):
    torch.manual_seed(seed)
    c = dict(CONFIGS[name])
    model = Decoder(c).eval()
    # GPT-2's initialisation scale, so activations stay in a realistic range over many layers;
    # norms get random scales so their weights are exercised too.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02 if "wte" not in n else 0.1)
            elif "norm" in n and "weight" in n:
                p.uniform_(0.8, 1.2)
            else:
                p.normal_(0.0, 0.02)
    return model, c


class Seg(nn.Module):
    """Wraps a callable as a module for torch.onnx.export."""

    def __init__(self, fn, owner):
        super().__init__()
        self.fn, self.owner = fn, owner

    def forward(self, *args):
        return self.fn(*args)


def onnx_export(module, args, path, inputs, outputs, dynamic):
    torch.onnx.export(module, args, path, input_names=inputs, output_names=outputs,
                      dynamic_axes=dynamic, opset_version=14, do_constant_folding=True)


def export(name, out_dir, seed, past_kv=True, model=None):
    """Exports CONFIGS[name] with seeded random weights, or `model` (a Decoder, e.g. trained)."""
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)  # dynamic-axes notes for dropped inputs
    if model is None:
        model, c = build(name, seed)
    else:
        model, c = model.eval(), dict(model.c)
    os.makedirs(out_dir, exist_ok=True)
    d, h, kvh = c["d_model"], c["heads"], c["kv_heads"]
    hd = d // h
    t = 3
    ids = torch.arange(t, dtype=torch.int64) % c["vocab"]
    pos = torch.arange(t, dtype=torch.int64)
    x = torch.randn(t, d)
    tok = {"hidden": {0: "T"}, "input_ids": {0: "T"}, "position_ids": {0: "T"}, "q": {0: "T"}, "k": {0: "T"},
           "v": {0: "T"}, "attn": {0: "T"}, "hidden_out": {0: "T"}, "logits": {0: "T"}}
    files = {"embed": "embed.onnx", "head": "head.onnx", "layers": []}
    with torch.no_grad():
        # Unused inputs (gpt2's position_ids in pre, llama's in embed) are dropped by the
        # exporter; the engine feeds each segment only the inputs it declares.
        onnx_export(Seg(lambda i, p: model.embed(i, p), model), (ids, pos), os.path.join(out_dir, "embed.onnx"),
                    ["input_ids", "position_ids"], ["hidden"], tok)
        for li, blk in enumerate(model.blocks):
            pre, post = f"layer{li}.pre.onnx", f"layer{li}.post.onnx"
            onnx_export(Seg(lambda a, p, b=blk: b.qkv(a, p), blk), (x, pos), os.path.join(out_dir, pre),
                        ["hidden", "position_ids"], ["q", "k", "v"], tok)
            onnx_export(Seg(lambda a, y, b=blk: b.post(a, y), blk), (x, torch.randn(t, h * hd)),
                        os.path.join(out_dir, post), ["hidden", "attn"], ["hidden_out"], tok)
            files["layers"].append({"pre": pre, "post": post})
        onnx_export(Seg(lambda a: model.head(a), model), (x,), os.path.join(out_dir, "head.onnx"), ["hidden"],
                    ["logits"], tok)
        if past_kv:
            export_past_kv(model, c, os.path.join(out_dir, "decoder.onnx"))
            files["decoder"] = "decoder.onnx"
    # The inputs each segment kept (the exporter drops unused ones), so the engine knows
    # which to bind without compiling first.
    names = [files["embed"], files["head"]] + [f for layer in files["layers"] for f in layer.values()]
    files["inputs"] = {n: [i.name for i in onnx.load(os.path.join(out_dir, n)).graph.input] for n in names}
    config = dict(c, name=name, seed=seed, head_dim=hd, files=files,
                  parameters=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return model, c


def export_past_kv(model, c, path):
    b, t, p = 1, 2, 3
    hd = c["d_model"] // c["heads"]
    past = []
    names_in, names_out = ["input_ids", "attention_mask", "position_ids"], ["logits"]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            past.append(torch.randn(b, c["kv_heads"], p, hd))
            names_in.append(f"past_key_values.{i}.{kind}")
            names_out.append(f"present.{i}.{kind}")
            dyn[names_in[-1]] = {0: "batch", 2: "past"}
            dyn[names_out[-1]] = {0: "batch", 2: "total"}
    args = (torch.zeros(b, t, dtype=torch.int64), torch.ones(b, p + t, dtype=torch.int64),
            torch.arange(p, p + t).unsqueeze(0), *past)
    onnx_export(model, args, path, names_in, names_out, dyn)


def test_prompts(c, count, seed):
    """Prompts of varied lengths (1 to ~40 tokens), the same for every caller."""
    rng = np.random.RandomState(seed)
    return [rng.randint(0, c["vocab"], size=int(rng.randint(1, 40))).tolist() for _ in range(count)]


def greedy_reference(model, c, prompt, steps):
    """PyTorch's greedy decode with its own contiguous KV cache, batch 1."""
    hd = c["d_model"] // c["heads"]
    past = [torch.zeros(1, c["kv_heads"], 0, hd) for _ in range(2 * c["layers"])]
    ids = torch.tensor([prompt])
    tokens, logits_all = [], []
    n = 0
    with torch.no_grad():
        for _ in range(steps):
            t = ids.shape[1]
            out = model(ids, torch.ones(1, n + t, dtype=torch.int64), torch.arange(n, n + t).unsqueeze(0), *past)
            logits, past = out[0][0, -1], list(out[1:])
            n += t
            nxt = int(torch.argmax(logits))
            tokens.append(nxt)
            logits_all.append(logits.numpy())
            ids = torch.tensor([[nxt]])
    return tokens, np.stack(logits_all)


def write_reference(model, c, prompts, steps, out_dir, name):
    ref, logits = [], []
    for pr in prompts:
        toks, lg = greedy_reference(model, c, pr, steps)
        ref.append({"prompt": pr, "tokens": toks})
        logits.append(lg)
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump({"steps": steps, "sequences": ref}, f)
    np.save(os.path.join(out_dir, name + "_logits.npy"), np.stack(logits).astype(np.float32))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", choices=sorted(CONFIGS))
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-past-kv", action="store_true", help="skip decoder.onnx (the past-KV form)")
    ap.add_argument("--reference", type=int, default=0, metavar="N",
                    help="also write PyTorch's greedy decode of N test prompts (reference.json, reference_logits.npy)")
    ap.add_argument("--steps", type=int, default=16, help="greedy steps per reference prompt")
    ap.add_argument("--shared-prefix", type=int, default=0, metavar="P",
                    help="with --reference, also the greedy decode of 16 prompts that start with the same P "
                         "tokens (a system prompt) then a test prompt (reference_shared.json, "
                         "reference_shared_logits.npy)")
    ap.add_argument("--bf16-kv-reference", action="store_true",
                    help="with --reference, also the greedy decode of the test prompts with the torch module's "
                         "K/V rounded to bfloat16 as the engine's bf16 KV pool stores them "
                         "(reference_bf16kv.json, reference_bf16kv_logits.npy)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, c = export(args.config, args.out_dir, args.seed, past_kv=not args.no_past_kv)
    if args.reference:
        prompts = test_prompts(c, args.reference, args.seed + 1)
        write_reference(model, c, prompts, args.steps, args.out_dir, "reference")
        if args.shared_prefix:
            system = np.random.RandomState(args.seed + 2).randint(0, c["vocab"], size=args.shared_prefix).tolist()
            write_reference(model, c, [system + p for p in prompts[:16]], args.steps, args.out_dir, "reference_shared")
        if args.bf16_kv_reference:
            for blk in model.blocks:
                blk.kv_bf16 = True
            write_reference(model, c, prompts, args.steps, args.out_dir, "reference_bf16kv")
    print(f"{args.config}: {sum(p.numel() for p in model.parameters())} parameters -> {args.out_dir}")


if __name__ == "__main__":
    sys.exit(main())
