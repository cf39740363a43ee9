#!/usr/bin/env python3
"""`kiln serve`'s /v1/completions with text (config.json "llm": {"tokenizer": ...}): on the LLM
tests' tiny decoders and the fixture's 512-piece byte-fallback SentencePiece model
(tests/llm/make_test_data.py's tokenizer_bytes), a text prompt (and a list of them) is
<s> + SentencePiece's own ids and continued as PyTorch's greedy decode continues them, up to
</s> (finish_reason "stop", </s> not returned) or max_tokens; `text` is what the binding decodes
from the returned ids, streamed in pieces that never split a character and join to it; token-id
prompts give the same; `kiln generate --prompt` the same ids. A model without a tokenizer
answers a text prompt 400 naming the missing tokenizer; text stop sequences end a choice before
them (text, token ids and finish_reason as OpenAI's semantics give them from PyTorch's ids and
the binding's text, streamed without ever sending part of a stop string); a missing or corrupt tokenizer stops the
start naming it; a generated id past a smaller tokenizer's vocabulary is a 500 naming it.

usage: completions_text_test.py KILN_BINARY LLM_DATA_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

import completions_test as ct
import serve_test

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "llm"))

KILN = DATA = WORK = None
TEXTS = ["And God said, Let there be light.", "café naïve Zürich — 東京 ✓", "1234 + 56.78"]
STEPS = 12


def version_dir(root, name, decoder, tokenizer=None, config=None):
    """A model whose version directory holds the decoder's files and, when given, a tokenizer."""
    version = os.path.join(root, name, "1")
    os.makedirs(version)
    for f in os.listdir(os.path.join(DATA, decoder)):
        os.symlink(os.path.join(DATA, decoder, f), os.path.join(version, f))
    llm = {"max_batch": 8, "kv_cache_mib": 8}
    if tokenizer:
        shutil.copy(tokenizer, os.path.join(version, "tokenizer.model"))
        llm["tokenizer"] = "tokenizer.model"
    with open(os.path.join(root, name, "config.json"), "w") as f:
        json.dump(config or {"backend": "llm", "llm": llm}, f)


def sp_model(name="tokenizer_bytes"):
    return os.path.join(DATA, name, "tokenizer.model")


def write_garbage(version):
    with open(os.path.join(version, "no-such.model"), "wb") as f:
        f.write(b"\x08\x01garbage")


def pytorch_greedy(style, prompt, steps):
    import torch
    import export_decoder as ed
    torch.set_num_threads(1)
    model, c = ed.build(style, 1234)  # the fixture exports the tiny decoders with seed 1234
    return ed.greedy_reference(model, c, prompt, steps)[0]


class CompletionsTextTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        import sentencepiece as spm
        cls.sp = spm.SentencePieceProcessor(model_file=sp_model())
        cls.repo = os.path.join(WORK, "repo")
        shutil.rmtree(cls.repo, ignore_errors=True)
        version_dir(cls.repo, "gpt2-text", "gpt2-tiny", sp_model())
        version_dir(cls.repo, "llama-text", "llama-tiny", sp_model())
        version_dir(cls.repo, "gpt2-ids", "gpt2-tiny")
        version_dir(cls.repo, "gpt2-small-tok", "gpt2-tiny", sp_model("tokenizer"))  # 120 pieces
        cls.server = ct.Server(cls.repo, "--threads", "1")
        sp = cls.sp
        cls.want = {}  # (style, text) -> PyTorch's greedy ids, cut after </s>
        for style in ("gpt2-tiny", "llama-tiny"):
            for text in TEXTS:
                ids = pytorch_greedy(style, [sp.bos_id()] + sp.encode(text), STEPS)
                cls.want[style, text] = ids[:ids.index(sp.eos_id()) + 1] if sp.eos_id() in ids else ids

    @classmethod
    def tearDownClass(cls):
        code, out, err = cls.server.stop()
        assert code == 0, (code, out, err)

    def complete(self, body, status=200):
        code, _, data = self.server.post("/v1/completions", body)
        self.assertEqual(code, status, data)
        return data

    def expected_choice(self, style, text):
        """token_ids (without </s>), text and finish_reason of PyTorch's continuation."""
        ids = self.want[style, text]
        stopped = ids[-1] == self.sp.eos_id()
        body = ids[:-1] if stopped else ids
        return body, self.sp.decode(body), "stop" if stopped else "length"

    def test_text_prompts_answer_pytorchs_ids_and_the_bindings_text(self):
        for model, style in (("gpt2-text", "gpt2-tiny"), ("llama-text", "llama-tiny")):
            with self.subTest(model=model):
                out = json.loads(self.complete({"model": model, "prompt": TEXTS, "max_tokens": STEPS,
                                                "temperature": 0}))
                self.assertEqual(len(out["choices"]), len(TEXTS))
                for c, text in zip(out["choices"], TEXTS):
                    ids, decoded, reason = self.expected_choice(style, text)
                    self.assertEqual((c["token_ids"], c["text"], c["finish_reason"]), (ids, decoded, reason), text)
                prompt_tokens = sum(1 + len(self.sp.encode(t)) for t in TEXTS)  # <s> counts
                self.assertEqual(out["usage"]["prompt_tokens"], prompt_tokens)
                # One text; and its ids as a token-id prompt (which also stops at </s>).
                ids, decoded, reason = self.expected_choice(style, TEXTS[1])
                for prompt in (TEXTS[1], [self.sp.bos_id()] + self.sp.encode(TEXTS[1])):
                    (c,) = json.loads(self.complete({"model": model, "prompt": prompt, "max_tokens": STEPS,
                                                     "temperature": 0}))["choices"]
                    self.assertEqual((c["token_ids"], c["text"], c["finish_reason"]), (ids, decoded, reason))

    def test_streamed_text_joins_to_the_bindings_text_in_whole_characters(self):
        for text in TEXTS:
            with self.subTest(text=text):
                data = self.complete({"model": "gpt2-text", "prompt": text, "max_tokens": STEPS, "temperature": 0,
                                      "stream": True})
                events = ct.sse_events(data)
                (tokens,), (reason,) = ct.streamed_tokens(events)
                pieces = [json.loads(e)["choices"][0]["text"] for e in events[:-1]]
                ids, decoded, want_reason = self.expected_choice("gpt2-tiny", text)
                self.assertEqual((tokens, reason), (ids, want_reason))
                self.assertEqual("".join(pieces), decoded)
                # A piece ends in U+FFFD only at the end: bytes no later token completed.
                for p in pieces[:-1]:
                    self.assertFalse(p.endswith("\ufffd"), pieces)

    def test_ignore_eos_runs_to_max_tokens(self):
        ids = pytorch_greedy("gpt2-tiny", [self.sp.bos_id()] + self.sp.encode(TEXTS[0]), 24)
        (c,) = json.loads(self.complete({"model": "gpt2-text", "prompt": TEXTS[0], "max_tokens": 24,
                                         "temperature": 0, "ignore_eos": True}))["choices"]
        self.assertEqual((c["token_ids"], c["finish_reason"], c["text"]), (ids, "length", self.sp.decode(ids)))

    def test_text_stop_sequences_end_the_choice_before_them(self):
        # PyTorch's 24 greedy ids (</s> not a stop: ignore_eos) and the binding's text of each prefix;
        # stop strings cut from that text across token boundaries (OpenAI's semantics: the text
        # before the earliest stop string, finish_reason "stop", generation ends at the token that
        # completes it).
        # llama-tiny: its random weights write varied text (gpt2-tiny's repeat one piece).
        for prompt in TEXTS:
            ids = pytorch_greedy("llama-tiny", [self.sp.bos_id()] + self.sp.encode(prompt), 24)
            whole = self.sp.decode(ids)
            if len(set(whole)) >= 6:
                break
        prefix = [self.sp.decode(ids[:k]) for k in range(len(ids) + 1)]
        mid = len(prefix[6])
        spanning = whole[mid - 2:mid + 3]  # ends inside a later token than it starts in
        self.assertGreaterEqual(len(spanning.strip()), 2, whole)
        self.assertGreater(whole.find(spanning), 0, whole)
        cases = [(spanning, [spanning]),
                 (whole[len(prefix[9]):len(prefix[9]) + 3], ["never in it", whole[len(prefix[9]):len(prefix[9]) + 3],
                                                               spanning[1:]]),
                 (None, ["never in it"])]
        for first, stop in cases:
            with self.subTest(stop=stop):
                if first is None:
                    want_text, want_ids, want_reason = whole, ids, "length"
                else:
                    cut = min(whole.find(s) for s in stop if s in whole)
                    k = next(k for k in range(len(ids) + 1) if any(s in prefix[k] for s in stop))
                    want_text, want_ids, want_reason = whole[:cut], ids[:k], "stop"
                body = {"model": "llama-text", "prompt": prompt, "max_tokens": 24, "temperature": 0,
                        "ignore_eos": True, "stop": stop if len(stop) > 1 else stop[0]}
                (c,) = json.loads(self.complete(body))["choices"]
                self.assertEqual((c["text"], c["token_ids"], c["finish_reason"]), (want_text, want_ids, want_reason))
                events = ct.sse_events(self.complete({**body, "stream": True}))
                (tokens,), (reason,) = ct.streamed_tokens(events)
                self.assertEqual((tokens, reason), (want_ids, want_reason))
                joined = ""
                for e in events[:-1]:
                    joined += json.loads(e)["choices"][0]["text"]
                    # Never text that later turns out to be part of a stop string.
                    self.assertTrue(want_text.startswith(joined), (joined, want_text))
                self.assertEqual(joined, want_text)
        # Stop strings need the model's tokenizer; more than 4, or an empty one, are refused.
        err = json.loads(self.complete({"model": "gpt2-ids", "prompt": [1, 2], "stop": "x"}, 400))["error"]
        self.assertIn("'stop' is text, but model 'gpt2-ids' has no tokenizer", err["message"])
        self.assertIn("llm", err["message"])
        err = json.loads(self.complete({"model": "gpt2-text", "prompt": "a", "stop": list("abcde")}, 400))["error"]
        self.assertIn("at most 4", err["message"])
        self.complete({"model": "gpt2-text", "prompt": "a", "stop": ""}, 400)

    def test_kiln_generate_gives_the_same_ids(self):
        r = subprocess.run([KILN, "generate", os.path.join(DATA, "gpt2-tiny"), "--tokenizer", sp_model(), "--prompt",
                            TEXTS[1], "--max-new-tokens", str(STEPS), "--print-ids", "--threads", "1"],
                           capture_output=True, text=True, timeout=120, env=serve_test.ENV)
        self.assertEqual(r.returncode, 0, r.stderr)
        line = next(l for l in r.stdout.splitlines() if l.startswith("request 0:"))
        self.assertEqual([int(t) for t in line.split(":")[1].split()], self.want["gpt2-tiny", TEXTS[1]])

    def test_bad_text_and_missing_tokenizers_are_400(self):
        data = self.complete({"model": "gpt2-ids", "prompt": "Hello", "max_tokens": 4}, 400)
        err = json.loads(data)["error"]
        self.assertIn("model 'gpt2-ids' has no tokenizer", err["message"])
        self.assertIn("llm", err["message"])
        self.assertEqual(err["type"], "invalid_request_error")
        self.complete({"model": "gpt2-ids", "prompt": ["a", "b"]}, 400)
        # Bytes that are not UTF-8, and a lone surrogate escape: the body is not JSON.
        for body in (b'{"model": "gpt2-text", "prompt": "ab\xff"}', b'{"model": "gpt2-text", "prompt": "\\ud800"}'):
            self.assertIn("not valid JSON", json.loads(self.complete(body, 400))["error"]["message"])
        err = json.loads(self.complete({"model": "gpt2-text", "prompt": ["a", 3]}, 400))["error"]
        self.assertIn("'prompt'[1]", err["message"])
        # Still serving.
        ids, decoded, _ = self.expected_choice("gpt2-tiny", TEXTS[0])
        (c,) = json.loads(self.complete({"model": "gpt2-text", "prompt": TEXTS[0], "max_tokens": STEPS,
                                         "temperature": 0}))["choices"]
        self.assertEqual((c["token_ids"], c["text"]), (ids, decoded))

    def test_an_id_past_the_tokenizers_vocabulary_is_a_500_naming_it(self):
        # A token-id prompt of the LLM tests (ids anywhere in the model's 512) continued by
        # PyTorch past the 120 pieces of the small tokenizer: the text cannot be made.
        import sentencepiece as spm
        small = spm.SentencePieceProcessor(model_file=sp_model("tokenizer"))
        ref = next(r for r in ct.reference("gpt2-tiny")
                   if any(t >= small.get_piece_size() for t in r["tokens"][:STEPS]) and small.eos_id() not in
                   r["tokens"][:STEPS])
        past = [t for t in ref["tokens"][:STEPS] if t >= small.get_piece_size()]
        body = {"model": "gpt2-small-tok", "prompt": ref["prompt"], "max_tokens": STEPS, "temperature": 0}
        err = json.loads(self.complete(body, 500))["error"]
        self.assertIn(f"token id {past[0]} is outside the tokenizer's vocabulary of 120", err["message"])
        events = ct.sse_events(self.complete({**body, "stream": True}))
        self.assertEqual(events[-1], "[DONE]")
        self.assertIn(f"token id {past[0]} is outside", json.loads(events[-2])["error"]["message"])

    def test_a_missing_or_corrupt_tokenizer_stops_the_start(self):
        root = os.path.join(WORK, "bad")
        for name, setup, words in (
                ("missing", lambda v: None, "no-such.model: no such file"),
                ("corrupt", write_garbage, "is not a SentencePiece model")):
            with self.subTest(name=name):
                shutil.rmtree(root, ignore_errors=True)
                version_dir(root, "m", "gpt2-tiny", config={"backend": "llm", "llm": {"tokenizer": "no-such.model"}})
                setup(os.path.join(root, "m", "1"))
                r = subprocess.run([KILN, "serve", "--model-repository", root, "--http-port", "0"],
                                   capture_output=True, text=True, timeout=120, env=serve_test.ENV)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn(words, r.stderr)
                self.assertIn("llm.tokenizer", r.stderr)


if __name__ == "__main__":
    KILN, DATA, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
    ct.KILN, ct.DATA, ct.WORK = KILN, DATA, WORK
    serve_test.KILN = KILN
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
