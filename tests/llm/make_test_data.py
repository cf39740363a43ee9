#!/usr/bin/python3
"""Writes the LLM tests' data into OUT_DIR (a CTest fixture, tests/llm/CMakeLists.txt):

  gpt2-tiny/, llama-tiny/   exported by bench/llm/export_decoder.py (the split segments and the
                            same weights as one past-KV decoder.onnx) with PyTorch's greedy
                            decode of the test prompts (reference.json, reference_logits.npy)
                            and of 16 prompts behind one shared 200-token system prompt
                            (reference_shared.json, reference_shared_logits.npy);
                            and, with K/V rounded to bfloat16 in the torch module's cache as the
                            engine's bf16 pool stores them, of the test prompts again
                            (reference_bf16kv.json, reference_bf16kv_logits.npy);
  attention/                a paged-attention case: a block pool, block tables in shuffled
                            order, queries, and the output NumPy computes from contiguous K/V;
                            and the same pool rounded to bfloat16 by NumPy (k_bf16.npy, v_bf16.npy:
                            the bits) with the output NumPy computes from those values
                            (expected_bf16.npy); attention_wide/ the same at wider sizes
                            (head_dim 64, 32-token blocks, 8 query heads on 2 KV heads);
  tokenizer/                a SentencePiece BPE model trained by python3-sentencepiece on the
                            text below (tokenizer.model), and that library's own encoding and
                            decoding of test strings (reference.json): Kiln's tokenizer must
                            give the same ids and text; tokenizer_bytes/ the same with byte
                            fallback and a character coverage that leaves accents and CJK out of
                            the vocabulary, so such characters come as several byte tokens (the
                            streaming decoder must not split them), with every prefix's decode;
                            its 512 pieces are the tiny decoders' vocabulary, so every id they
                            generate decodes (text in, text out through the engine). Both
                            also hold long_cases: 1200-id sequences with the binding's decode
                            (the streaming decoder over thousands of tokens).
  tokenizer_large/          the byte-fallback model with 700 pieces: more than the tiny
                            decoders' 512, so pairing it with them is refused.
"""
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
EXPORTER = os.path.join(HERE, "..", "..", "bench", "llm", "export_decoder.py")
PROMPTS, STEPS, SHARED_PREFIX = 20, 48, 200


def bf16_bits(x):
    """float32 -> bfloat16 bits, rounded to nearest, ties to even, worked out in float64 from the
    two neighbouring bfloat16 values (not by Kiln's bit trick). Finite inputs only."""
    x = np.asarray(x, dtype=np.float32)
    low = x.view(np.uint32) >> 16  # the bfloat16 toward zero
    down = (low << 16).view(np.float32).astype(np.float64)
    up = ((low + 1) << 16).view(np.float32).astype(np.float64)
    xd = x.astype(np.float64)
    d_down, d_up = np.abs(xd - down), np.abs(up - xd)
    take_up = (d_up < d_down) | ((d_up == d_down) & (low % 2 == 1))
    return np.where(take_up, low + 1, low).astype(np.uint16)


def bf16_values(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def attention_case(out, heads=4, kv_heads=2, hd=40, bs=4, blocks=24, shapes=((17, 1), (0, 9), (6, 5), (0, 1)),
                   seed=7):
    """hd 40 (the default): a SIMD tail on every width, and 4-token blocks: the kernel's plain
    loops. attention_wide/: head_dim 64 and 32-token blocks, whole vectors and chunks of a
    vector's width of keys (and the partial chunks at block and sequence ends): its vector loops."""
    os.makedirs(out, exist_ok=True)
    rng = np.random.RandomState(seed)
    k_pool = rng.randn(blocks, bs, kv_heads, hd).astype(np.float32)
    v_pool = rng.randn(blocks, bs, kv_heads, hd).astype(np.float32)
    order = rng.permutation(blocks).astype(np.int32)
    # shapes, (start, count): a decode token deep in its sequence, a whole prompt, a chunk after
    # a cached prefix, and a sequence of one token.
    tables, seqs, rows, used = [], [], 0, 0
    for start, count in shapes:
        n_blocks = (start + count + bs - 1) // bs
        tables.append(order[used:used + n_blocks])
        used += n_blocks
        seqs.append((start, count, rows))
        rows += count
    # Exact ties between two bfloat16 values (low 16 bits 0x8000), with an even and an odd
    # upper half: round to nearest even must keep the first and round the second up.
    k_pool.flat[:4] = (np.array([0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000], dtype=np.uint32)
                       .view(np.float32))
    q = rng.randn(rows, heads, hd).astype(np.float32)
    group = heads // kv_heads

    def attend(k_all, v_all):
        result = np.zeros_like(q)
        for (start, count, row), table in zip(seqs, tables):
            keys = k_all[table].reshape(-1, kv_heads, hd)  # contiguous K of the sequence
            values = v_all[table].reshape(-1, kv_heads, hd)
            for i in range(count):
                n = start + i + 1
                for h in range(heads):
                    g = h // group
                    s = keys[:n, g, :].astype(np.float64) @ q[row + i, h].astype(np.float64) / np.sqrt(hd)
                    p = np.exp(s - s.max())
                    result[row + i, h] = (p / p.sum()) @ values[:n, g, :].astype(np.float64)
        return result

    expected = attend(k_pool, v_pool)
    k_bf16, v_bf16 = bf16_bits(k_pool), bf16_bits(v_pool)
    expected_bf16 = attend(bf16_values(k_bf16), bf16_values(v_bf16))
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
    np.save(os.path.join(out, "k_bf16.npy"), k_bf16)
    np.save(os.path.join(out, "v_bf16.npy"), v_bf16)
    np.save(os.path.join(out, "expected_bf16.npy"), expected_bf16.astype(np.float32))
    with open(os.path.join(out, "shape.json"), "w") as f:
        json.dump({"heads": heads, "kv_heads": kv_heads, "head_dim": hd, "block_size": bs}, f)


TOKENIZER_TEXT = """In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep.
And God said, Let there be light: and there was light.
And God saw the light, that it was good: and God divided the light from the darkness.
And God called the light Day, and the darkness he called Night.
The tokenizer also sees numbers like 1234 and 56.78, punctuation (!?;:), and accents: café, naïve, Zürich.
"""

TOKENIZER_STRINGS = [
    "And God said, Let there be light.",
    "  leading and trailing spaces  ",
    "Words the model never saw: xylophone quartz jukebox.",
    "café naïve Zürich — 東京 ✓",
    "",
    "1234 + 56.78 = 1290.78",
]


def syllable_text(lines=600, seed=29):
    """Seeded made-up words: enough text for the 250 merges of a 512-piece byte-fallback model."""
    import random
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ya", "ze", "an", "el", "is", "or", "un", "ch",
                 "th", "st", "pr", "gl"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    return "".join(" ".join(rng.choice(words) for _ in range(12)) + rng.choice(".,!?") + "\n" for _ in range(lines))


def tokenizer_case(out, byte_fallback=False, vocab_size=None):
    import sentencepiece as spm
    os.makedirs(out, exist_ok=True)
    text = os.path.join(out, "text.txt")
    with open(text, "w") as f:
        f.write(TOKENIZER_TEXT * 3 + (syllable_text() if byte_fallback else ""))
    # Byte fallback needs the 256 byte pieces in the vocabulary; coverage 0.98 leaves the rare
    # characters (accents) to them.
    spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(out, "tokenizer"),
                                   vocab_size=vocab_size or (512 if byte_fallback else 120), model_type="bpe",
                                   character_coverage=0.98 if byte_fallback else 1.0, byte_fallback=byte_fallback,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "tokenizer.model"))
    cases = []
    for s in TOKENIZER_STRINGS:
        ids = sp.encode(s)
        cases.append({"text": s, "ids": ids, "decoded": sp.decode(ids),
                      "prefixes": [sp.decode(ids[:k]) for k in range(1, len(ids) + 1)]})
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"vocab_size": sp.get_piece_size(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(),
                   "cases": cases, "long_cases": long_streams(sp)}, f, ensure_ascii=False, indent=1)


def long_streams(sp, count=3, length=1200, every=37):
    """Seeded sequences of 1200+ ids for the streaming decoder: the ids of test strings (multi-byte
    characters, leading and doubled spaces), lone "▁" pieces, byte pieces (whole characters and
    stray bytes), control ids and any id, mixed; with the binding's decode of the whole sequence
    and of every 37th prefix."""
    import random
    rng = random.Random(1029)
    vocab = sp.get_piece_size()
    space = sp.piece_to_id("\u2581")
    # The NUL byte piece too (<0x00>): a NUL inside the text must not end it.
    nul = sp.piece_to_id("<0x00>")
    byte_ids = [i for i in range(vocab) if sp.is_byte(i)]
    texts = TOKENIZER_STRINGS + [" 東京", "  naïve ✓", "Zürich — café", " light"]
    cases = []
    for _ in range(count):
        ids = []
        while len(ids) < length:
            kind = rng.random()
            if kind < 0.45:
                ids += sp.encode(rng.choice(texts))
            elif kind < 0.55 and space != sp.unk_id():
                ids += [space] * rng.randint(1, 3)
            elif kind < 0.7 and byte_ids:
                ids += [sp.piece_to_id("<0x%02X>" % b) for b in rng.choice(["東".encode(), "é".encode(), "🔥".encode()])]
            elif kind < 0.75 and byte_ids:
                ids += [rng.choice(byte_ids) for _ in range(rng.randint(1, 3))]
            elif kind < 0.8:
                ids.append(rng.choice([sp.bos_id(), sp.eos_id(), sp.unk_id()]))
            elif kind < 0.82 and nul != sp.unk_id():
                ids.append(nul)
            else:
                ids.append(rng.randrange(vocab))
        cases.append({"ids": ids, "decoded": sp.decode(ids),
                      "checkpoints": {str(k): sp.decode(ids[:k]) for k in range(every, len(ids), every)}})
    return cases


def main():
    import argparse
    ap = argparse.ArgumentParser(description="Writes the LLM tests' data (see the module's doc).")
    ap.add_argument("out_dir")
    ap.add_argument("--steps", type=int, default=STEPS,
                    help=f"greedy tokens per reference prompt (default {STEPS}; the acceptance's scale is 256)")
    args = ap.parse_args()
    out, steps = args.out_dir, args.steps
    tokenizer_case(os.path.join(out, "tokenizer"))
    tokenizer_case(os.path.join(out, "tokenizer_bytes"), byte_fallback=True)
    # More pieces than the tiny decoders' 512: not their tokenizer (refused at load).
    tokenizer_case(os.path.join(out, "tokenizer_large"), byte_fallback=True, vocab_size=700)
    os.makedirs(out, exist_ok=True)
    attention_case(os.path.join(out, "attention"))
    attention_case(os.path.join(out, "attention_wide"), heads=8, kv_heads=2, hd=64, bs=32, blocks=12,
                   shapes=((70, 1), (0, 40), (33, 20), (0, 1)), seed=11)
    for name in ("gpt2-tiny", "llama-tiny"):
        subprocess.run([sys.executable, EXPORTER, name, os.path.join(out, name),
                        "--reference", str(PROMPTS), "--steps", str(steps),
                        "--shared-prefix", str(SHARED_PREFIX), "--bf16-kv-reference"], check=True)


if __name__ == "__main__":
    main()
