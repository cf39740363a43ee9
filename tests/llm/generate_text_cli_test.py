#!/usr/bin/env python3
"""`kiln generate` with text, as a user runs it, on the tests' gpt2-tiny decoder and
SentencePiece model (tests/llm/make_test_data.py): a --prompt is encoded as SentencePiece's
own Python binding encodes it (with <s> in front) and continued as PyTorch's greedy decode
continues those ids (the torch module rebuilt from the exporter's seed); the printed text is
what the binding decodes the generated ids to, streamed for one request and per request for
several; --stop sequences end the text before them as OpenAI's semantics give it from those
ids; a tokenizer larger than the model's vocabulary is refused naming both sizes; bad input is a
one-line error (exit 2 for usage, 1 otherwise).

usage: generate_text_cli_test.py KILN_BINARY DATA_DIR
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
    r = subprocess.run([KILN, "generate"] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=120, env=ENV)
    assert r.returncode == code, f"exit {r.returncode} (expected {code}): {r.stderr}"
    return r


def requests_of(out):
    """{request index: the text after "request I: "} from generate's output."""
    found = {}
    for line in out.splitlines():
        if line.startswith("request "):
            head, _, rest = line.partition(": ")
            found[int(head.split()[1].rstrip(":"))] = rest
    return found


def ids_of(out, request=0):
    return [int(t) for t in requests_of(out)[request].split()]


class GenerateText(unittest.TestCase):
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
        expected = until_eos(expected, sp.eos_id(), keep=True)  # </s> ends a request (ids mode prints it)
        # The model's vocabulary (512) is larger than the tokenizer's (120): ids past the
        # tokenizer's cannot be printed as text, so the greedy ids are compared as ids.
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt", PROMPT, "--max-new-tokens", 12,
                     "--print-ids")
        self.assertEqual(ids_of(r.stdout), expected)
        # Text out: a prompt whose greedy continuation stays inside the tokenizer's vocabulary.
        printable = [p for p in ref_prompts() if all(t < sp.get_piece_size() for t in p["tokens"][:8])]
        self.assertTrue(printable, "no reference prompt continues inside the tokenizer's vocabulary")
        p = printable[0]
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt-ids",
                     ",".join(map(str, p["prompt"])), "--max-new-tokens", 8)
        self.assertEqual(requests_of(r.stdout)[0], sp.decode(until_eos(p["tokens"][:8], sp.eos_id())))  # streamed
        # Two requests: each one's text on its line after the run.
        q = printable[1] if len(printable) > 1 else printable[0]
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt-ids",
                     ",".join(map(str, p["prompt"])), "--prompt-ids", ",".join(map(str, q["prompt"])),
                     "--max-new-tokens", 8)
        texts = requests_of(r.stdout)
        self.assertEqual(texts[0], sp.decode(until_eos(p["tokens"][:8], sp.eos_id())))
        self.assertEqual(texts[1], sp.decode(until_eos(q["tokens"][:8], sp.eos_id())))

    def test_stop_sequences_end_the_text_before_them(self):
        # llama-tiny (whose random weights write varied text; gpt2-tiny's repeat one piece) with the
        # 512-piece byte-fallback tokenizer (its vocabulary, so every id decodes):
        # PyTorch's greedy ids up to </s>, the binding's text of each prefix, and stop strings cut
        # from that text across token boundaries; the printed text stops before the earliest one
        # and generation ends at the token that completes it (--print-ids).
        import sentencepiece as spm
        import torch
        import export_decoder as ed
        tok = os.path.join(DATA, "tokenizer_bytes", "tokenizer.model")
        sp = spm.SentencePieceProcessor(model_file=tok)
        torch.set_num_threads(1)
        model, c = ed.build("llama-tiny", 1234)  # the fixture exports llama-tiny with seed 1234
        for prompt in (PROMPT, "1234 + 56.78", "In the beginning", "Zürich"):
            ids = until_eos(ed.greedy_reference(model, c, [sp.bos_id()] + sp.encode(prompt), 24)[0], sp.eos_id())
            whole = sp.decode(ids)
            if len(ids) >= 12 and len(set(whole)) >= 6:
                break
        self.assertTrue(len(ids) >= 12 and len(set(whole)) >= 6, "no prompt continues in varied text for 12 tokens")
        prefix = [sp.decode(ids[:k]) for k in range(len(ids) + 1)]
        mid = len(prefix[6])
        stops = [whole[mid - 2:mid + 3], whole[len(prefix[9]):len(prefix[9]) + 2]]
        cut = min(whole.find(s) for s in stops)
        k = next(k for k in range(len(ids) + 1) if any(s in prefix[k] for s in stops))
        self.assertGreater(cut, 0, (stops, whole))
        args = [os.path.join(DATA, "llama-tiny"), "--tokenizer", tok, "--prompt", prompt, "--max-new-tokens", 24,
                "--stop", stops[1], "--stop", stops[0]]
        self.assertEqual(requests_of(generate(*args).stdout)[0], whole[:cut])  # streamed
        self.assertEqual(ids_of(generate(*args, "--print-ids").stdout), ids[:k])
        # Two requests (printed after the run): each stops on its own.
        texts = requests_of(generate(*args, "--prompt", prompt).stdout)
        self.assertEqual((texts[0], texts[1]), (whole[:cut], whole[:cut]))
        # A stop string that never comes: the whole text.
        self.assertEqual(requests_of(generate(*args[:-4], "--stop", "never in it").stdout)[0], whole)
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--prompt-ids", "1,2", "--stop", "x", code=2)
        self.assertIn("--stop needs a tokenizer", r.stderr)
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", tok, "--prompt", "x", "--stop", "", code=2)
        self.assertIn("must not be empty", r.stderr)

    def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(self):
        r = generate(os.path.join(DATA, "gpt2-tiny"), "--tokenizer", os.path.join(DATA, "tokenizer_large", "tokenizer.model"),
                     "--prompt", "x", code=1)
        self.assertIn("the tokenizer's vocabulary (700) is larger than the model's (512)", r.stderr)

    def test_bad_input(self):
        model = os.path.join(DATA, "gpt2-tiny")
        r = generate(model, "--prompt", "no tokenizer here", code=2)
        self.assertIn("--prompt needs a tokenizer", r.stderr)
        r = generate(model, "--prompt-ids", "1,x,3", code=2)
        self.assertIn("expected comma-separated token ids", r.stderr)
        r = generate(model, "--tokenizer", os.path.join(model, "config.json"), "--prompt", "x", code=1)
        self.assertIn("is not a SentencePiece model", r.stderr)
        r = generate(model, "--tokenizer", os.path.join(DATA, "tokenizer", "no-such.model"), "--prompt", "x", code=1)
        self.assertIn("no-such.model: no such file", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)


def until_eos(tokens, eos, keep=False):
    """The tokens up to the first </s> (with it when `keep`)."""
    return tokens[:tokens.index(eos) + (1 if keep else 0)] if eos in tokens else tokens


def ref_prompts():
    with open(os.path.join(DATA, "gpt2-tiny", "reference.json")) as f:
        return json.load(f)["sequences"]


if __name__ == "__main__":
    KILN, DATA = sys.argv[1], sys.argv[2]
    unittest.main(argv=sys.argv[:1], verbosity=2)
