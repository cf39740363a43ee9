#!/usr/bin/env python3
"""`kiln llm-generate` as a user runs it, on the tests' gpt2-tiny decoder and SentencePiece
model (tests/llm/make_test_data.py): token ids in and out equal PyTorch's greedy decode (the
fixture's reference.json); a text prompt is encoded as SentencePiece's own Python binding
encodes it (with <s> in front), its greedy continuation equals PyTorch's on those ids (the
torch module rebuilt from the exporter's seed), and the printed text is what SentencePiece
decodes those ids to; bad input is a one-line error (exit 2 for usage, 1 otherwise).

usage: llm_generate_cli_test.py KILN_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "llm"))

KILN = DATA = None
ENV = dict({k: v for k, v in os.environ.items() if not k.startswith("KILN_")}, KILN_NUM_THREADS="1")
PROMPT = "And God said, Let there be light"


def generate(*args, code=0):
    r = subprocess.run([KILN, "llm-generate"] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=120, env=ENV)
    assert r.returncode == code, f"exit {r.returncode} (expected {code}): {r.stderr}"
    return r


def ids_of(out):
    return [int(t) for t in out.strip().split(",")]


class LlmGenerate(unittest.TestCase):
    def test_prompt_ids_continue_as_pytorch(self):
        for seq in ref_prompts()[:3]:
            r = generate(os.path.join(DATA, "gpt2-tiny"), "--prompt-ids", ",".join(map(str, seq["prompt"])),
                         "--max-tokens", 16, "--print-ids")
            self.assertEqual(ids_of(r.stdout), seq["tokens"][:16])

    def test_text_prompt_through_sentencepiece(self):
        import sentencepiece as spm
        import torch
        import export_decoder as ed
        tok = os.path.join(DATA, "tokenizer", "tokenizer.model")
        sp = spm.SentencePieceProcessor(model_file=tok)
        prompt = [sp.bos_id()] + sp.encode(PROMPT)
        torch.set_num_threads(1)
        model, c = ed.build("gpt2-tiny", 1234)  # the fixture exports gpt2-tiny with seed 1234
        expected, _ = ed.greedy_reference(model, c, prompt, 12)
        # The model's vocabulary (512) is larger than the tokenizer's (120): ids past the
        # tokenizer's cannot be printed as text, so the greedy ids are compared as ids.
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt", PROMPT, "--max-tokens", 12,
                     "--print-ids")
        got = ids_of(r.stdout)
        self.assertEqual(got, expected)
        # Text out: a prompt whose greedy continuation stays inside the tokenizer's vocabulary.
        printable = [p for p in ref_prompts() if all(t < sp.get_piece_size() for t in p["tokens"][:8])]
        self.assertTrue(printable, "no reference prompt continues inside the tokenizer's vocabulary")
        p = printable[0]
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt-ids",
                     ",".join(map(str, p["prompt"])), "--max-tokens", 8)
        self.assertEqual(r.stdout.rstrip("\n"), sp.decode(p["tokens"][:8]))

    def test_bad_input(self):
        model = os.path.join(DATA, "gpt2-tiny")
        r = generate(model, "--prompt", "no tokenizer here", code=2)
        self.assertIn("--prompt needs a tokenizer", r.stderr)
        r = generate(model, "--prompt-ids", "1,x,3", code=2)
        self.assertIn("'x' is not a token id", r.stderr)
        r = generate(model, "--tokenizer", os.path.join(model, "config.json"), "--prompt", "x", code=1)
        self.assertIn("is not a SentencePiece model", r.stderr)
        r = generate(os.path.join(DATA, "no-such-model"), "--prompt-ids", "1", code=1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = generate(model, "--prompt-ids", "1", "--max-tokens", 0, code=2)


def ref_prompts():
    with open(os.path.join(DATA, "gpt2-tiny", "reference.json")) as f:
        return json.load(f)["sequences"]


if __name__ == "__main__":
    KILN, DATA = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
