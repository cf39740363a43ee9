#!/usr/bin/python3
"""Writes the LLM tests' data into OUT_DIR (a CTest fixture, tests/llm/CMakeLists.txt):

  gpt2-tiny/, llama-tiny/   exported by bench/llm/export_decoder.py with PyTorch's greedy
                            decode of the test prompts (reference.json, reference_logits.npy)
                            and of 16 prompts behind one shared 200-token system prompt
                            (reference_shared.json, reference_shared_logits.npy);
  attention/                a paged-attention case: a block pool, block tables in shuffled
                            order, queries, and the output NumPy computes from contiguous K/V.
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER = os.path.join(HERE, "..", "..", "bench", "llm", "export_decoder.py")
PROMPTS, STEPS, SHARED_PREFIX = 20, 48, 200


def attention_case(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(7)
    heads, kv_heads, hd, bs, blocks = 4, 2, 40, 4, 24  # hd 40: a SIMD tail on every width
    k_pool = rng.randn(blocks, bs, kv_heads, hd).astype(np.float32)
    v_pool = rng.randn(blocks, bs, kv_heads, hd).astype(np.float32)
    order = rng.permutation(blocks).astype(np.int32)
    # (start, count): a decode token deep in its sequence, a whole prompt, a chunk after a
    # cached prefix, and a sequence of one token.
    shapes = [(17, 1), (0, 9), (6, 5), (0, 1)]
    tables, seqs, rows, used = [], [], 0, 0
    for start, count in shapes:
        n_blocks = (start + count + bs - 1) // bs
        tables.append(order[used:used + n_blocks])
        used += n_blocks
        seqs.append((start, count, rows))
        rows += count
    q = rng.randn(rows, heads, hd).astype(np.float32)
    expected = np.zeros_like(q)
    group = heads // kv_heads
    for (start, count, row), table in zip(seqs, tables):
        keys = k_pool[table].reshape(-1, kv_heads, hd)  # contiguous K of the sequence
        values = v_pool[table].reshape(-1, kv_heads, hd)
        for i in range(count):
            n = start + i + 1
            for h in range(heads):
                g = h // group
                s = keys[:n, g, :].astype(np.float64) @ q[row + i, h].astype(np.float64) / np.sqrt(hd)
                p = np.exp(s - s.max())
                expected[row + i, h] = (p / p.sum()) @ values[:n, g, :].astype(np.float64)
    max_blocks = max(len(t) for t in tables)
    table_arr = np.full((len(tables), max_blocks), -1, dtype=np.int32)
    for i, t in enumerate(tables):
        table_arr[i, :len(t)] = t
    np.save(os.path.join(out, "k_pool.npy"), k_pool)
    np.save(os.path.join(out, "v_pool.npy"), v_pool)
    np.save(os.path.join(out, "tables.npy"), table_arr)
    np.save(os.path.join(out, "sequences.npy"), np.array(seqs, dtype=np.int64))
    np.save(os.path.join(out, "q.npy"), q)
    np.save(os.path.join(out, "expected.npy"), expected.astype(np.float32))
    with open(os.path.join(out, "shape.json"), "w") as f:
        json.dump({"heads": heads, "kv_heads": kv_heads, "head_dim": hd, "block_size": bs}, f)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    attention_case(os.path.join(out, "attention"))
    for name in ("gpt2-tiny", "llama-tiny"):
        subprocess.run([sys.executable, EXPORTER, name, os.path.join(out, name), "--no-past-kv",
                        "--reference", str(PROMPTS), "--steps", str(STEPS),
                        "--shared-prefix", str(SHARED_PREFIX)], check=True)


if __name__ == "__main__":
    main()
