#!/usr/bin/env python3
"""kiln.Tokenizer (the C API's kilnllmTokenize / kilnllmDetokenize over the SentencePiece shim)
against SentencePiece's own Python binding on the same model, alternated in one process:
decode of N random ids and encode of the text they decode to, median microseconds per call
over ROUNDS rounds of CALLS calls each, and kiln/sentencepiece.

usage: PYTHONPATH=build/release/python tokenizer_compare.py TOKENIZER.model [--ids 100,1000]
"""
import argparse
import random
import time

import sentencepiece as spm

import kiln


def per_call_us(fn, arg, calls):
    t = time.perf_counter()
    for _ in range(calls):
        fn(arg)
    return (time.perf_counter() - t) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ids", default="100,1000")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=100)
    a = ap.parse_args()
    tok, sp = kiln.Tokenizer(a.model), spm.SentencePieceProcessor(model_file=a.model)
    rng = random.Random(1)
    # Ids past the control pieces, and no byte piece for NUL (its text could not be encoded back).
    usable = [i for i in range(sp.get_piece_size()) if not sp.is_control(i) and sp.id_to_piece(i) != "<0x00>"]
    for n in map(int, a.ids.split(",")):
        ids = [rng.choice(usable) for _ in range(n)]
        text = sp.decode(ids)
        for what, kiln_fn, sp_fn, arg in (("decode", tok.decode, sp.decode, ids),
                                          ("encode", lambda t: tok.encode(t, add_bos=False), sp.encode, text)):
            assert kiln_fn(arg) == sp_fn(arg), what
            times = {"kiln": [], "sp": []}
            for _ in range(a.rounds):  # alternated
                times["kiln"].append(per_call_us(kiln_fn, arg, a.calls))
                times["sp"].append(per_call_us(sp_fn, arg, a.calls))
            k, s = (sorted(v)[len(v) // 2] for v in (times["kiln"], times["sp"]))
            print(f"{what} {n:5d} ids: kiln {k:8.1f} us  sentencepiece {s:8.1f} us  kiln/sentencepiece {k / s:.2f}")


if __name__ == "__main__":
    main()
