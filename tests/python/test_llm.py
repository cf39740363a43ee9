"""kiln.LlmEngine (python/src/llm.cc, docs/python.md) on a tiny GPT-2-style decoder exported by
bench/llm/export_decoder.py with PyTorch's own greedy decode as the reference: greedy tokens
streamed by a callback, by polling and by stream() equal PyTorch's, with and without chunked
prefill; logits within 1e-4 of PyTorch's relative to the row's largest magnitude; bad input
(ids out of range, a prompt longer than the context, bad options) is kiln.Error, and the
engine runs on. With kv_dtype='bf16' the tokens and logits are PyTorch's with its cache's K/V
rounded to bfloat16 (within 1e-4, docs/llm.md), and stats() carries the chunked-prefill
counters."""

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]
PROMPTS, STEPS = 6, 12


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """gpt2-tiny with PyTorch's greedy decode of PROMPTS prompts x STEPS tokens (a few seconds)."""
    out = tmp_path_factory.mktemp("llm") / "gpt2-tiny"
    subprocess.run([sys.executable, str(REPO / "bench" / "llm" / "export_decoder.py"), "gpt2-tiny", str(out),
                    "--no-past-kv", "--reference", str(PROMPTS), "--steps", str(STEPS), "--bf16-kv-reference"],
                   check=True, stdout=subprocess.DEVNULL)
    ref = json.loads((out / "reference.json").read_text())
    logits = np.load(out / "reference_logits.npy")
    return str(out), [s["prompt"] for s in ref["sequences"]], [s["tokens"] for s in ref["sequences"]], logits


@pytest.mark.parametrize("step_tokens", [0, 8])
def test_greedy_tokens_and_logits_equal_pytorch(decoder, step_tokens):
    path, prompts, want, ref_logits = decoder
    with kiln.LlmEngine(path, max_batch=4, step_tokens=step_tokens, record_logits=True, threads=1) as engine:
        assert engine.model_info["vocab"] == 512 and engine.model_info["style"] == "gpt2"
        streamed = {}
        last = []

        def on_token(request, token, is_last):
            streamed.setdefault(request, []).append(token)
            if is_last:
                last.append(request)

        engine.on_token(on_token)
        ids = [engine.add_request(p, max_new_tokens=STEPS) for p in prompts]
        polled = {i: [] for i in ids}
        while True:  # step by step, polling as a server would
            idle = engine.step()
            for i in ids:
                tokens, _ = engine.poll(i)
                polled[i] += tokens
            if idle:
                break
        for n, i in enumerate(ids):
            assert engine.status(i) == "finished"
            assert engine.tokens(i) == want[n][:STEPS], f"request {n}"
            assert streamed[i] == want[n][:STEPS] and polled[i] == want[n][:STEPS]
            for s in range(STEPS):
                got, expect = engine.logits(i, s), ref_logits[n, s]
                assert np.abs(got - expect).max() <= 1e-4 * np.abs(expect).max(), f"request {n} step {s}"
        assert sorted(last) == sorted(ids)
        stats = engine.stats()
        assert stats["finished"] == PROMPTS and stats["blocks_used"] == 0
        # The chunked-prefill counters: a budget bounds every pass and mixes prefill rows into
        # decode passes; whole prefills run a prompt in one pass and never mix.
        if step_tokens:
            assert 0 < stats["peak_step_tokens"] <= step_tokens and stats["mixed_steps"] > 0
        else:
            assert stats["peak_step_tokens"] >= max(len(p) for p in prompts) and stats["mixed_steps"] == 0
        engine.on_token(None)
        # The iterator steps the engine itself; closing it early cancels the request.
        assert list(engine.stream(prompts[1], max_new_tokens=5)) == want[1][:5]
        it = engine.stream(prompts[2], max_new_tokens=STEPS)
        assert next(it) == want[2][0]
        it.close()
        assert engine.stats()["running"] == 0 and engine.stats()["waiting"] == 0
        assert engine.generate(prompts[:3], max_new_tokens=4) == [w[:4] for w in want[:3]]


def test_bf16_kv_equals_pytorch_with_a_bf16_cache(decoder):
    path, prompts, _, _ = decoder
    ref = json.loads((pathlib.Path(path) / "reference_bf16kv.json").read_text())
    ref_logits = np.load(pathlib.Path(path) / "reference_bf16kv_logits.npy")
    with kiln.LlmEngine(path, max_batch=4, kv_cache_mib=4, kv_dtype="bf16", record_logits=True, threads=1) as engine:
        ids = [engine.add_request(p, max_new_tokens=STEPS) for p in prompts]
        engine.run()
        for n, i in enumerate(ids):
            assert engine.tokens(i) == ref["sequences"][n]["tokens"][:STEPS], f"request {n}"
            for s in range(STEPS):
                got, expect = engine.logits(i, s), ref_logits[n, s]
                assert np.abs(got - expect).max() <= 1e-4 * np.abs(expect).max(), f"request {n} step {s}"
        bf16_blocks = engine.stats()["blocks_total"]
    with kiln.LlmEngine(path, kv_cache_mib=4, threads=1) as engine:
        assert bf16_blocks == 2 * engine.stats()["blocks_total"]  # half the bytes per block
    with pytest.raises(kiln.Error, match="kv_dtype 'fp16'") as e:
        kiln.LlmEngine(path, kv_dtype="fp16")
    assert e.value.code == kiln.ERROR_INVALID_PARAM


def test_callback_exception_cancels_its_request_and_is_raised(decoder):
    path, prompts, want, _ = decoder
    with kiln.LlmEngine(path, threads=1) as engine:
        bad = engine.add_request(prompts[0], max_new_tokens=8)
        good = engine.add_request(prompts[1], max_new_tokens=8)

        def on_token(request, token, is_last):
            if request == bad:
                raise ValueError("from the callback")
            return False

        engine.on_token(on_token)
        with pytest.raises(ValueError, match="from the callback"):
            engine.run()
        engine.run()
        assert engine.status(bad) == "cancelled"
        assert engine.tokens(good) == want[1][:8]


def test_bad_input_is_a_kiln_error_and_the_engine_runs_on(decoder):
    path, prompts, want, _ = decoder
    with kiln.LlmEngine(path, threads=1) as engine:
        with pytest.raises(kiln.Error, match="outside the vocabulary") as e:
            engine.add_request([1, 512, 3])
        assert e.value.code == kiln.ERROR_INVALID_PARAM
        with pytest.raises(kiln.Error, match="outside the vocabulary"):
            engine.add_request([-1])
        with pytest.raises(kiln.Error, match="context"):
            engine.add_request([7] * 600)
        with pytest.raises(kiln.Error, match="context"):
            engine.add_request([7] * 500, max_new_tokens=100)
        with pytest.raises(kiln.Error):
            engine.add_request([])
        with pytest.raises(kiln.Error):
            engine.add_request([1], temperature=1.0, top_p=0.0)
        with pytest.raises(TypeError):
            engine.add_request(["a"])
        with pytest.raises(kiln.Error):
            engine.cancel(99)
        with pytest.raises(kiln.Error):
            engine.tokens(99)
        ok = engine.add_request(prompts[0], max_new_tokens=4)
        engine.run()
        assert engine.tokens(ok) == want[0][:4]
        with pytest.raises(kiln.Error):
            engine.logits(ok, 0)  # made without record_logits
    with pytest.raises(kiln.Error, match="closed"):
        engine.step()
    with pytest.raises(kiln.Error, match="max step tokens"):
        kiln.LlmEngine(path, max_batch=8, step_tokens=4)
    with pytest.raises(kiln.Error, match="not a Kiln decoder directory"):
        kiln.LlmEngine(str(REPO / "no-such-decoder"))


# ---- Text in, text out: kiln.Tokenizer and LlmEngine's text prompts ----------------------------

TEXTS = ["And God said, Let there be light.", "café naïve Zürich — 東京 ✓", "  spaces around  ", "1234 + 56.78"]


@pytest.fixture(scope="module")
def tokenizer_model(tmp_path_factory):
    """A 512-piece byte-fallback SentencePiece model trained by the SentencePiece library itself
    (tests/llm/make_test_data.py's tokenizer_bytes): gpt2-tiny's vocabulary, so every id it
    generates decodes; accents and CJK come as byte tokens."""
    sys.path.insert(0, str(REPO / "tests" / "llm"))
    import make_test_data
    out = tmp_path_factory.mktemp("tokenizer")
    make_test_data.tokenizer_case(str(out), byte_fallback=True)
    return str(out / "tokenizer.model")


def test_tokenizer_encodes_and_decodes_as_sentencepiece(tokenizer_model):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=tokenizer_model)
    with kiln.Tokenizer(tokenizer_model) as tok:
        assert (tok.vocab_size, tok.bos_id, tok.eos_id) == (sp.get_piece_size(), sp.bos_id(), sp.eos_id()) == (512, 1, 2)
        for text in TEXTS + ["", "Words never seen: xylophone"]:
            ids = sp.encode(text)
            assert tok.encode(text, add_bos=False) == ids, text
            assert tok.encode(text) == [sp.bos_id()] + ids, text
            assert tok.encode(text.encode()) == [sp.bos_id()] + ids, text  # UTF-8 bytes too
            assert tok.decode(ids) == sp.decode(ids), text
            assert tok.decode([sp.bos_id()] + ids + [sp.eos_id()]) == sp.decode(ids), text
        assert tok.decode([]) == ""
        # NFKC makes 3 bytes 12 ("株式会社"), 12 byte tokens: past the first buffer, the call is repeated.
        assert tok.encode("\u337f", add_bos=False) == sp.encode("\u337f") and len(sp.encode("\u337f")) > 5


def test_tokenizer_bad_input_is_an_error(tokenizer_model, tmp_path):
    with pytest.raises(kiln.Error, match="no-such.model: no such file") as e:
        kiln.Tokenizer(str(tmp_path / "no-such.model"))
    assert e.value.code == kiln.ERROR_INVALID_FILE
    cut = tmp_path / "cut.model"
    cut.write_bytes(pathlib.Path(tokenizer_model).read_bytes()[:300])
    with pytest.raises(kiln.Error, match="cut.model is not a SentencePiece model"):
        kiln.Tokenizer(str(cut))
    tok = kiln.Tokenizer(tokenizer_model)
    with pytest.raises(kiln.Error, match="not valid UTF-8: byte 0xff at offset 2") as e:
        tok.encode(b"ab\xffc")
    assert e.value.code == kiln.ERROR_INVALID_PARAM
    with pytest.raises(kiln.Error, match="not valid UTF-8: byte 0xed at offset 1"):
        tok.encode("x\udc80")  # a lone surrogate: no UTF-8 for it
    with pytest.raises(kiln.Error, match="NUL"):
        tok.encode("a\0b")
    with pytest.raises(kiln.Error, match="token id 512 is outside the tokenizer's vocabulary of 512"):
        tok.decode([5, 512])
    with pytest.raises(kiln.Error, match="token id -1 is outside"):
        tok.decode([-1])
    with pytest.raises(TypeError):
        tok.encode(5)
    with pytest.raises(TypeError):
        tok.decode(["a"])
    tok.close()
    with pytest.raises(kiln.Error, match="closed"):
        tok.encode("x")


def test_text_generation_equals_pytorch_on_the_tokenizers_ids(decoder, tokenizer_model):
    """A text prompt is <s> + SentencePiece's ids; the engine continues them as PyTorch's greedy
    decode does until </s> or the budget; the text is the binding's decode of those ids, streamed
    in whole characters, and the token-id path gives the same ids."""
    import sentencepiece as spm
    import torch
    sys.path.insert(0, str(REPO / "bench" / "llm"))
    import export_decoder as ed
    sp = spm.SentencePieceProcessor(model_file=tokenizer_model)
    torch.set_num_threads(1)
    model, c = ed.build("gpt2-tiny", 1234)  # the fixture exports gpt2-tiny with seed 1234
    steps = 12
    want = []
    for text in TEXTS:
        ids, _ = ed.greedy_reference(model, c, [sp.bos_id()] + sp.encode(text), steps)
        want.append(ids[:ids.index(sp.eos_id()) + 1] if sp.eos_id() in ids else ids)
    path = decoder[0]
    tok = kiln.Tokenizer(tokenizer_model)
    with kiln.LlmEngine(path, max_batch=4, threads=1) as engine:
        assert engine.generate(TEXTS[0], tokenizer=tok, max_new_tokens=steps) == sp.decode(want[0])
        texts = engine.generate(TEXTS, tokenizer=tok, max_new_tokens=steps)
        assert texts == [sp.decode(w) for w in want]
        ids = [engine.add_text_request(t, tok, max_new_tokens=steps) for t in TEXTS]
        engine.run()
        assert [engine.tokens(i) for i in ids] == want
        # The token-id path, with </s> as a stop token, generates the same ids.
        prompts = [[sp.bos_id()] + sp.encode(t) for t in TEXTS]
        assert engine.generate(prompts, max_new_tokens=steps, stop_tokens=[sp.eos_id()]) == want
        # Text and ids mixed: each comes back as it went in.
        assert engine.generate([TEXTS[1], prompts[1]], tokenizer=tok, max_new_tokens=steps) == [
            sp.decode(want[1]), want[1]]
        for text, w in zip(TEXTS, want):
            pieces = list(engine.stream(text, tokenizer=tok, max_new_tokens=steps))
            assert "".join(pieces) == sp.decode(w)
            # Only the end may hold U+FFFD at its end: bytes no later token completed (a random
            # model's byte tokens need not form UTF-8).
            assert all(p and not p.endswith("\ufffd") for p in pieces[:-1]), pieces
        with pytest.raises(ValueError, match="needs tokenizer"):
            engine.generate("no tokenizer")
        with pytest.raises(kiln.Error, match="not valid UTF-8"):
            engine.add_text_request(b"\xc3(", tok)
        # The engine still runs the next text request exactly.
        assert engine.generate(TEXTS[2], tokenizer=tok, max_new_tokens=steps) == sp.decode(want[2])


@pytest.fixture(scope="module")
def llama_decoder(tmp_path_factory):
    """llama-tiny (seed 1234): its random weights write varied text, where gpt2-tiny's repeat one piece."""
    out = tmp_path_factory.mktemp("llm") / "llama-tiny"
    subprocess.run([sys.executable, str(REPO / "bench" / "llm" / "export_decoder.py"), "llama-tiny", str(out),
                    "--no-past-kv"], check=True, stdout=subprocess.DEVNULL)
    return str(out)


def test_stop_strings_end_the_text_before_them(llama_decoder, tokenizer_model):
    """stop= (OpenAI's stop sequences, through llm::TextStream): PyTorch's greedy ids of a text prompt
    and the binding's text of each prefix give the expected cut: the text before the earliest stop
    string, generation ended at the token that completes it; stream() never yields text that turns
    out to be part of a stop string; a stop string that never comes changes nothing."""
    import sentencepiece as spm
    import torch
    sys.path.insert(0, str(REPO / "bench" / "llm"))
    import export_decoder as ed
    sp = spm.SentencePieceProcessor(model_file=tokenizer_model)
    torch.set_num_threads(1)
    model, c = ed.build("llama-tiny", 1234)
    steps = 24
    for text in TEXTS:
        ids, _ = ed.greedy_reference(model, c, [sp.bos_id()] + sp.encode(text), steps)
        ids = ids[:ids.index(sp.eos_id())] if sp.eos_id() in ids else ids
        whole = sp.decode(ids)
        if len(ids) >= 12 and len(set(whole)) >= 6:
            break
    assert len(ids) >= 12 and len(set(whole)) >= 6, "no test prompt continues in varied text for 12 tokens"
    prefix = [sp.decode(ids[:k]) for k in range(len(ids) + 1)]
    mid = len(prefix[6])
    stops = [whole[len(prefix[9]):len(prefix[9]) + 2], whole[mid - 2:mid + 3]]
    cut = min(whole.find(s) for s in stops)
    assert cut > 0, (stops, whole)
    k = next(k for k in range(len(ids) + 1) if any(s in prefix[k] for s in stops))
    tok = kiln.Tokenizer(tokenizer_model)
    with kiln.LlmEngine(llama_decoder, max_batch=4, threads=1) as engine:
        assert engine.generate(text, tokenizer=tok, stop=stops, max_new_tokens=steps) == whole[:cut]
        # Batched with a request that has no stop in its text: each ends on its own.
        other = TEXTS[(TEXTS.index(text) + 1) % len(TEXTS)]
        out = engine.generate([text, other], tokenizer=tok, stop=stops, max_new_tokens=steps)
        other_ids, _ = ed.greedy_reference(model, c, [sp.bos_id()] + sp.encode(other), steps)
        other_ids = other_ids[:other_ids.index(sp.eos_id())] if sp.eos_id() in other_ids else other_ids
        other_text = sp.decode(other_ids)
        other_cut = min([other_text.find(s) for s in stops if s in other_text] or [len(other_text)])
        assert out == [whole[:cut], other_text[:other_cut]]
        pieces = list(engine.stream(text, tokenizer=tok, stop=stops, max_new_tokens=steps))
        joined = ""
        for p in pieces:
            joined += p
            assert whole[:cut].startswith(joined), (pieces, whole[:cut])
        assert joined == whole[:cut]
        # Generation ended at the token that completed the stop string (the request is cancelled
        # after the step that made it, which may have made one more).
        delivered = []
        engine.on_token(lambda request, token, is_last: delivered.append(token))
        assert engine.generate(text, tokenizer=tok, stop=stops, max_new_tokens=steps) == whole[:cut]
        assert k <= len(delivered) <= k + 1 < steps and delivered[:k] == ids[:k], (delivered, k)
        engine.on_token(None)
        assert engine.generate(text, tokenizer=tok, stop="never in it", max_new_tokens=steps) == whole
        with pytest.raises(kiln.Error, match="empty"):
            engine.generate(text, tokenizer=tok, stop=["x", ""])
        with pytest.raises(ValueError, match="text prompts"):
            engine.generate([[1, 2]], tokenizer=tok, stop="x")
        with pytest.raises(ValueError, match="needs? tokenizer"):
            engine.generate(text, stop="x")
        # The engine still runs exactly afterwards (nothing left queued by the refusals).
        assert engine.generate(text, tokenizer=tok, max_new_tokens=steps) == whole
