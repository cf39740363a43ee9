#!/usr/bin/env python3
"""`kiln serve`'s OpenAI-style POST /v1/completions on decoder models (config.json "backend":
"llm"): the tiny GPT-2 and Llama decoders the LLM tests export (their fixture), greedy tokens
streamed as server-sent events and answered as JSON equal PyTorch's own greedy decode
(reference.json) and `kiln generate` on the same prompts, concurrent streams are batched and
each gets its own tokens, stop tokens, a client that goes away mid-stream, and malformed
requests answered 4xx with an OpenAI error object while the server keeps serving; a model whose
config.json sets llm.max_step_tokens and llm.kv_dtype "bf16" runs the engine with them (its
/metrics: no pass above the budget, prefill and decode rows mixed, twice the blocks in the same
memory) and still gives PyTorch's tokens (with a bf16 KV cache: reference_bf16kv.json).

usage: completions_test.py KILN_BINARY LLM_DATA_DIR WORK_DIR
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import serve_test

KILN = DATA = WORK = None
ENV = serve_test.ENV


def reference(model, name="reference"):
    with open(os.path.join(DATA, model, name + ".json")) as f:
        return json.load(f)["sequences"]


def make_repository(root):
    shutil.rmtree(root, ignore_errors=True)
    for name, src in (("gpt2", "gpt2-tiny"), ("llama", "llama-tiny")):
        os.makedirs(os.path.join(root, name))
        os.symlink(os.path.join(DATA, src), os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.json"), "w") as f:
            json.dump({"backend": "llm", "llm": {"max_batch": 8, "kv_cache_mib": 8}, "max_queue_size": 64}, f)
    # gpt2-tiny again, with chunked prefill under 8 rows per step and a bf16 KV pool.
    os.makedirs(os.path.join(root, "gpt2-chunked"))
    os.symlink(os.path.join(DATA, "gpt2-tiny"), os.path.join(root, "gpt2-chunked", "1"))
    with open(os.path.join(root, "gpt2-chunked", "config.json"), "w") as f:
        json.dump({"backend": "llm", "llm": {"max_batch": 4, "kv_cache_mib": 8, "max_step_tokens": 8,
                                             "kv_dtype": "bf16"}}, f)
    # A tensor model beside them: /v1/completions refuses it, and it refuses /v1's requests.
    w = np.ones((4, 2), np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "lin",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                          [numpy_helper.from_array(w, "w")])
    os.makedirs(os.path.join(root, "linear", "1"))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(root, "linear", "1", "model.onnx"))


class Server(serve_test.Server):
    """serve_test.py's `kiln serve` process, with the calls of this test."""

    def post(self, path, body):
        return self.request("POST", path, body if isinstance(body, (str, bytes)) else json.dumps(body),
                            {"Content-Type": "application/json"})

    def get(self, path):
        status, _, data = self.request("GET", path)
        return status, data


def sse_events(data):
    """The `data:` payloads of a server-sent-event body, in order."""
    events = []
    for block in data.decode().split("\n\n"):
        if block.strip():
            assert block.startswith("data: "), block
            events.append(block[len("data: "):])
    return events


def streamed_tokens(events, choices=1):
    """Per choice: the tokens and the finish reason; checks the event envelope."""
    assert events[-1] == "[DONE]", events[-3:]
    tokens, reasons = [[] for _ in range(choices)], [None] * choices
    for e in events[:-1]:
        j = json.loads(e)
        assert j["object"] == "text_completion" and j["id"].startswith("cmpl-"), j
        (c,) = j["choices"]
        assert reasons[c["index"]] is None, "a token after the choice finished"
        tokens[c["index"]] += c["token_ids"]
        if c["finish_reason"] is not None:
            reasons[c["index"]] = c["finish_reason"]
    return tokens, reasons


def kiln_generate(model, prompts, max_new):
    """The engine's own greedy tokens through the `kiln generate` CLI."""
    args = [KILN, "generate", os.path.join(DATA, model), "--max-new-tokens", str(max_new), "--threads", "1"]
    for p in prompts:
        args += ["--prompt-ids", ",".join(map(str, p))]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, env=ENV)
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r"request (\d+): (.*)", line)
        if m:
            out[int(m.group(1))] = [int(t) for t in m.group(2).split()]
    return [out[i] for i in range(len(prompts))]


class CompletionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = os.path.join(WORK, "repo")
        make_repository(cls.repo)
        cls.server = Server(cls.repo, "--threads", "1")

    @classmethod
    def tearDownClass(cls):
        code, out, err = cls.server.stop()
        assert code == 0, (code, out, err)

    def complete(self, body):
        status, headers, data = self.server.post("/v1/completions", body)
        self.assertEqual(status, 200, data)
        return headers, data

    def test_startup_line_names_the_decoder(self):
        self.assertIn("loaded decoder model 'gpt2' version 1 (gpt2, 4 layers, vocab 512", "".join(self.server.lines))

    def test_streamed_greedy_tokens_equal_pytorch_and_kiln_generate(self):
        for model, ref in (("gpt2", reference("gpt2-tiny")[0]), ("llama", reference("llama-tiny")[1])):
            with self.subTest(model=model):
                n = 20
                headers, data = self.complete({"model": model, "prompt": ref["prompt"], "max_tokens": n,
                                               "temperature": 0, "stream": True})
                self.assertTrue(headers["Content-Type"].startswith("text/event-stream"), headers)
                (tokens,), (reason,) = streamed_tokens(sse_events(data))
                self.assertEqual(tokens, ref["tokens"][:n])
                self.assertEqual(tokens, kiln_generate(model + "-tiny", [ref["prompt"]], n)[0])
                self.assertEqual(reason, "length")

    def test_json_answer_with_two_prompts_and_usage(self):
        refs = reference("llama-tiny")[2:4]
        headers, data = self.complete({"model": "llama", "prompt": [r["prompt"] for r in refs], "max_tokens": 12,
                                       "temperature": 0.0})
        out = json.loads(data)
        self.assertEqual(out["model"], "llama")
        self.assertEqual(len(out["choices"]), 2)
        for i, (c, r) in enumerate(zip(out["choices"], refs)):
            self.assertEqual((c["index"], c["finish_reason"], c["text"]), (i, "length", ""))
            self.assertEqual(c["token_ids"], r["tokens"][:12])
        prompt_tokens = sum(len(r["prompt"]) for r in refs)
        self.assertEqual(out["usage"], {"prompt_tokens": prompt_tokens, "completion_tokens": 24,
                                        "total_tokens": prompt_tokens + 24})

    def test_concurrent_streams_are_batched_and_each_gets_its_tokens(self):
        refs = reference("llama-tiny")[:6]
        lengths = [40, 9, 33, 48, 17, 25]  # they leave the batch at different steps
        before = self.server.get("/metrics")[1].decode()
        results = [None] * len(refs)

        def client(i):
            results[i] = self.server.post("/v1/completions", {"model": "llama", "prompt": refs[i]["prompt"],
                                                              "max_tokens": lengths[i], "temperature": 0,
                                                              "stream": True})

        threads = [threading.Thread(target=client, args=(i,)) for i in range(len(refs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for i, (status, _, data) in enumerate(results):
            self.assertEqual(status, 200, data)
            (tokens,), (reason,) = streamed_tokens(sse_events(data))
            self.assertEqual(tokens, refs[i]["tokens"][:lengths[i]], i)
            self.assertEqual(reason, "length")
        after = self.server.get("/metrics")[1].decode()

        def value(text, name):
            m = re.search(rf'^{name}{{model="llama"}} (\S+)$', text, re.M)
            return float(m.group(1)) if m else 0.0

        self.assertEqual(value(after, "kiln_llm_generated_tokens_total") -
                         value(before, "kiln_llm_generated_tokens_total"), sum(lengths))
        self.assertEqual(value(after, "kiln_inference_requests_total") -
                         value(before, "kiln_inference_requests_total"), len(refs))

    def test_a_stop_token_ends_the_choice_and_is_not_returned(self):
        ref = reference("llama-tiny")[0]
        stop = ref["tokens"][5]
        cut = ref["tokens"].index(stop)
        _, data = self.complete({"model": "llama", "prompt": ref["prompt"], "max_tokens": 30, "temperature": 0,
                                 "stop": [stop, 511]})
        (c,) = json.loads(data)["choices"]
        self.assertEqual((c["token_ids"], c["finish_reason"]), (ref["tokens"][:cut], "stop"))
        _, data = self.complete({"model": "llama", "prompt": ref["prompt"], "max_tokens": 30, "temperature": 0,
                                 "stop": stop, "stream": True})
        (tokens,), (reason,) = streamed_tokens(sse_events(data))
        self.assertEqual((tokens, reason), (ref["tokens"][:cut], "stop"))

    def test_sampling_with_a_seed_repeats(self):
        body = {"model": "gpt2", "prompt": [1, 2, 3], "max_tokens": 10, "temperature": 1.5, "seed": 7}
        a = json.loads(self.complete(body)[1])["choices"][0]["token_ids"]
        b = json.loads(self.complete(body)[1])["choices"][0]["token_ids"]
        self.assertEqual(a, b)
        self.assertEqual(len(a), 10)

    def gauge(self, name, model="gpt2"):
        m = re.search(rf'^{name}{{model="{model}"}} (\S+)$', self.server.get("/metrics")[1].decode(), re.M)
        return float(m.group(1)) if m else None

    def test_a_client_that_goes_away_mid_stream_frees_its_place(self):
        generated_before = self.gauge("kiln_llm_generated_tokens_total") or 0
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=30)
        conn.request("POST", "/v1/completions", body=json.dumps({"model": "gpt2", "prompt": [5, 6], "max_tokens": 500,
                                                                 "temperature": 0, "stream": True}))
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        r.read(64)
        conn.close()
        # The engine stops it: the server's next write after the close sees the client gone
        # (the socket has its end: a peek reads nothing) and cancels the completion. Its
        # sequence leaves and its blocks go back. (The gauges are published after each engine
        # step, so one read may precede the first.)
        deadline = time.time() + 20
        names = ("kiln_llm_sequences_running", "kiln_llm_sequences_waiting", "kiln_llm_kv_blocks_used")
        while True:
            text = self.server.get("/metrics")[1].decode()
            values = [float(re.search(rf'^{n}{{model="gpt2"}} (\S+)$', text, re.M).group(1)) for n in names]
            if values == [0, 0, 0]:
                break
            self.assertLess(time.time(), deadline, f"the abandoned completion still holds {values}")
            time.sleep(0.02)
        # Stopped early: far fewer than its 500 tokens were generated (a few while the close
        # travelled; the tiny model makes about one per millisecond here).
        generated = self.gauge("kiln_llm_generated_tokens_total") - generated_before
        self.assertLess(generated, 250, "the abandoned completion was not stopped")
        # The pool: config.json's 8 MiB in whole blocks.
        total, size = self.gauge("kiln_llm_kv_blocks_total"), self.gauge("kiln_llm_kv_cache_bytes")
        self.assertGreater(total, 0)
        self.assertEqual(size % total, 0)
        self.assertLessEqual(size, 8 << 20)
        self.assertGreater(size + size / total, 8 << 20)
        # The server keeps answering, correctly.
        ref = reference("gpt2-tiny")[1]
        _, data = self.complete({"model": "gpt2", "prompt": ref["prompt"], "max_tokens": 8, "temperature": 0})
        self.assertEqual(json.loads(data)["choices"][0]["token_ids"], ref["tokens"][:8])

    def test_models_list(self):
        status, data = self.server.get("/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(sorted(m["id"] for m in json.loads(data)["data"]), ["gpt2", "gpt2-chunked", "llama"])

    def test_step_token_budget_and_bf16_kv_reach_the_engine(self):
        model = "gpt2-chunked"
        self.assertEqual(self.gauge("kiln_llm_max_step_tokens", model), 8)
        self.assertEqual(self.gauge("kiln_llm_max_step_tokens"), 0)  # gpt2: whole prefills
        # Two prompts of 20+ tokens in one completion: admitted together, each prefilled 8 rows
        # a step at most, the second's chunks beside the first's decode rows.
        refs = [r for r in reference("gpt2-tiny", "reference_bf16kv") if len(r["prompt"]) > 20][:2]
        self.assertEqual(len(refs), 2)
        _, data = self.complete({"model": model, "prompt": [r["prompt"] for r in refs], "max_tokens": 12,
                                 "temperature": 0})
        for c, r in zip(json.loads(data)["choices"], refs):
            self.assertEqual(c["token_ids"], r["tokens"][:12])
        peak = self.gauge("kiln_llm_peak_step_tokens", model)
        self.assertTrue(0 < peak <= 8, peak)  # whole prefills would have run 20+ rows at once
        self.assertGreater(self.gauge("kiln_llm_mixed_steps_total", model), 0)
        self.assertEqual(self.gauge("kiln_llm_mixed_steps_total"), 0)
        # bf16 blocks are half the bytes: twice gpt2's blocks in the same 8 MiB.
        self.assertEqual(self.gauge("kiln_llm_kv_blocks_total", model), 2 * self.gauge("kiln_llm_kv_blocks_total"))
        self.assertLessEqual(self.gauge("kiln_llm_kv_cache_bytes", model), 8 << 20)

    def test_malformed_requests_get_4xx_with_an_openai_error(self):
        ok = {"model": "gpt2", "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0}
        cases = [
            ("{\"model\": \"gpt2\", \"prompt\": [1,", 400, "not valid JSON"),
            ("[1, 2]", 400, "not a JSON object"),
            ({"prompt": [1, 2]}, 400, "no 'model'"),
            ({"model": "gpt2"}, 400, "no 'prompt'"),
            ({**ok, "prompt": "Hello"}, 400, "model 'gpt2' has no tokenizer"),
            ({**ok, "prompt": []}, 400, "non-empty array"),
            ({**ok, "prompt": [1, 2.5]}, 400, "'prompt'[1]"),
            ({**ok, "prompt": [1, 512]}, 400, "outside the vocabulary"),
            ({**ok, "max_tokens": 0}, 400, "max_tokens"),
            ({**ok, "max_tokens": 600}, 400, "context"),
            ({**ok, "temperature": -1}, 400, "temperature"),
            ({**ok, "stream": "yes"}, 400, "stream"),
            ({**ok, "stop": "END"}, 400, "has no tokenizer"),
            ({**ok, "n": 2}, 400, "only 1"),
            ({**ok, "frequency_penalty": 1}, 400, "unknown field 'frequency_penalty'"),
            ({**ok, "model": "linear"}, 400, "not a decoder"),
            ({**ok, "model": "nope"}, 404, "unknown model 'nope'"),
        ]
        for body, code, words in cases:
            with self.subTest(words=words):
                status, headers, data = self.server.post("/v1/completions", body)
                self.assertEqual(status, code, data)
                err = json.loads(data)["error"]
                self.assertIn(words, err["message"])
                self.assertIn(err["type"], ("invalid_request_error", "not_found_error"))
        # The KServe endpoint of a decoder says where it is served.
        status, _, data = self.server.post("/v2/models/gpt2/infer", {"inputs": []})
        self.assertEqual(status, 400, data)
        self.assertIn("/v1/completions", json.loads(data)["error"])
        # Still serving, correctly.
        self.test_streamed_greedy_tokens_equal_pytorch_and_kiln_generate()


class RepositoryTest(unittest.TestCase):
    def test_llm_config_errors_stop_the_start(self):
        repo = os.path.join(WORK, "repo_bad")
        for config, words in (({"backend": "llm", "max_batch_size": 4}, "does not apply to backend"),
                              ({"backend": "llm", "llm": {"blocks": 3}}, "unknown field 'llm.blocks'"),
                              ({"backend": "llm", "llm": {"max_batch": 8, "max_step_tokens": 4}},
                               "max step tokens 4"),
                              ({"backend": "llm", "llm": {"max_step_tokens": -1}}, "llm.max_step_tokens"),
                              ({"backend": "llm", "llm": {"kv_dtype": "fp16"}}, "'llm.kv_dtype' is \"fp16\""),
                              ({"llm": {"max_batch": 3}}, "needs \"backend\": \"llm\""),
                              ({"backend": "tensorrt"}, "'backend'")):
            with self.subTest(config=config):
                shutil.rmtree(repo, ignore_errors=True)
                os.makedirs(os.path.join(repo, "m"))
                os.symlink(os.path.join(DATA, "gpt2-tiny"), os.path.join(repo, "m", "1"))
                with open(os.path.join(repo, "m", "config.json"), "w") as f:
                    json.dump(config, f)
                r = subprocess.run([KILN, "serve", "--model-repository", repo, "--http-port", "0"],
                                   capture_output=True, text=True, timeout=60, env=ENV)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn(words, r.stderr)


if __name__ == "__main__":
    KILN, DATA, WORK = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
    serve_test.KILN = KILN
    os.makedirs(WORK, exist_ok=True)
    unittest.main(argv=sys.argv[:1], verbosity=2)
