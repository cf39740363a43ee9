#!/usr/bin/env python3
"""Streaming detokenization, per token, as a stream grows: Kiln's llm::StreamingDecoder (through
kiln._kiln._TextStream, the object LlmEngine.stream() uses: a window of recent ids decoded per
token) against what it did before (the whole sequence decoded again at every token, here
kiln.Tokenizer.decode of the prefix: the same decode call through the same shim), alternated in
one process on the same seeded ids. Prints microseconds per token: the mean over all N tokens,
the mean over the last 100 and the median token (a process preempted on a loaded machine turns
single tokens into milliseconds), each the median of ROUNDS rounds, and the ratios; and checks
both give the same text.

usage: PYTHONPATH=build/release/python streaming_decode.py TOKENIZER.model [--tokens 1000,4000]
"""
import argparse
import os
import random
import statistics
import time

import sentencepiece as spm

import kiln
from kiln import _kiln


def whole_redecode(tok, ids):
    """The previous StreamingDecoder: decode ids[:k] at every token, let out what follows the text out."""
    out, per = "", []
    for k in range(1, len(ids) + 1):
        t = time.perf_counter()
        text = tok.decode(ids[:k]).rstrip("\ufffd")
        if len(text) > len(out):
            out = text
        per.append(time.perf_counter() - t)
    return tok.decode(ids), per


def windowed(tok, ids):
    stream, per, out = _kiln._TextStream(tok), [], ""
    for token in ids:
        t = time.perf_counter()
        out += stream.push(token)[0]
        per.append(time.perf_counter() - t)
    return out + stream.finish(), per


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", default="1000,4000")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    tok = kiln.Tokenizer(a.model)
    print(f"load average at start: {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f}")
    rng = random.Random(29)
    # Past <unk>, <s>, </s> (text, bytes, spaces), without the NUL byte piece: Kiln's decoded
    # text is a C string through the SentencePiece shim, cut at a NUL (tokenizer_compare.py too).
    nul = spm.SentencePieceProcessor(model_file=a.model).piece_to_id("<0x00>")
    usable = [i for i in range(3, tok.vocab_size) if i != nul]
    for n in map(int, a.tokens.split(",")):
        ids = [rng.choice(usable) for _ in range(n)]
        rows = {"whole sequence each token": [], "window (now)": []}
        texts = set()
        for _ in range(a.rounds):  # alternated: each round runs both
            for name, fn in (("whole sequence each token", whole_redecode), ("window (now)", windowed)):
                text, per = fn(tok, ids)
                texts.add(text)
                rows[name].append((sum(per) / n * 1e6, sum(per[-100:]) / 100 * 1e6, statistics.median(per) * 1e6))
        assert len(texts) == 1, "the two ways gave different text"
        print(f"{n} tokens, {tok.vocab_size}-piece model, median of {a.rounds} rounds:")
        med = {}
        for name, r in rows.items():
            med[name] = tuple(statistics.median(row[i] for row in r) for i in range(3))
            print(f"  {name:28s} {med[name][0]:9.2f} us/token over all {n}, {med[name][1]:9.2f} over the last 100, "
                  f"{med[name][2]:9.2f} the median token")
        old, new = med["whole sequence each token"], med["window (now)"]
        print(f"  window / whole: {new[0] / old[0]:.3f}x over all, {new[1] / old[1]:.3f}x over the last 100")
    print(f"load average at end: {os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    main()
