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
