#!/usr/bin/env python3
"""`kiln llm-bench` as a user runs it, on the tests' gpt2-tiny decoder (tests/llm/make_test_data.py)
with a small workload (seconds): the JSON output is well-formed, every configuration (fixed
baseline, buckets, paged with and without buckets) generates the same greedy tokens and the
requested count, the sessions that fit in --kv-memory and the prefill rows match what this
script computes from the model's config.json and the printed request lengths, the table form
prints every configuration and the ratios; with --arrival-rate the same requests arrive over
time and TTFT/TPOT percentiles are reported; --kv-dtype both adds paged-bf16kv with the sessions
of half-size blocks; bad options exit 2, a missing model or a KV memory
too small for one fixed-mode session exit 1 with a one-line error.

usage: llm_bench_cli_test.py KILN_BINARY DATA_DIR
"""
import json
import os
import subprocess
import sys
import unittest

KILN = None
MODEL = None
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
SMALL = ["--requests", "6", "--prompt-min", "8", "--prompt-max", "300", "--output-min", "4", "--output-max", "24",
         "--kv-memory", "24", "--threads", "1"]


def bench(*args, code=EXIT_OK):
    r = subprocess.run([KILN, "llm-bench"] + [str(a) for a in args], capture_output=True, timeout=120, env=BASE_ENV,
                       text=True)
    if code is not None and r.returncode != code:
        raise AssertionError(f"kiln llm-bench {' '.join(map(str, args))} exited {r.returncode}, expected {code}:\n"
                             f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def kv_block_bytes(c, tokens, element_bytes=4):
    return 2 * c["layers"] * tokens * c["kv_heads"] * c["head_dim"] * element_bytes


def sessions_fit(lengths, blocks, block_size):
    """Sessions of the workload, cycled, that fit in `blocks` at their final length."""
    n, used = 0, 0
    while True:
        p, o = lengths[n % len(lengths)]
        need = -(-(p + o - 1) // block_size)
        if used + need > blocks:
            return n
        used += need
        n += 1


class LlmBench(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(MODEL, "config.json")) as f:
            cls.config = json.load(f)

    def test_json_is_well_formed_and_modes_agree(self):
        r = json.loads(bench(MODEL, *SMALL, "--json").stdout)
        self.assertTrue(r["same_tokens"])
        self.assertEqual([c["name"] for c in r["configs"]], ["fixed", "fixed-buckets", "paged-nobuckets", "paged"])
        lengths = r["lengths"]
        self.assertEqual(len(lengths), 6)
        for p, o in lengths:
            self.assertTrue(8 <= p <= 300 and 4 <= o <= 24, (p, o))
        self.assertEqual(r["prompt_tokens"], sum(p for p, _ in lengths))
        mib = 24 << 20
        fixed_sessions = mib // kv_block_bytes(self.config, 2048)
        paged_sessions = sessions_fit(lengths, mib // kv_block_bytes(self.config, 16), 16)
        for c in r["configs"]:
            self.assertEqual(c["generated"], sum(o for _, o in lengths), c["name"])  # no stop tokens: every budget
            self.assertGreater(c["tokens_per_s"], 0)
            self.assertEqual(c["prefill_rows"], r["prompt_tokens"])
            self.assertEqual(c["preemptions"], 0)
            self.assertTrue(0 <= c["fragmentation"] < 1)
            paged = c["name"].startswith("paged")
            self.assertEqual(c["sessions_fit"], paged_sessions if paged else fixed_sessions, c["name"])
            self.assertEqual(c["peak_sessions"], 6 if paged else 1, c["name"])
        by = {c["name"]: c for c in r["configs"]}
        # Unbucketed prefill pads each request (fixed) or each packed pass (paged) to 2048 rows.
        self.assertEqual(by["fixed"]["prefill_padded_rows"], 6 * 2048)
        self.assertEqual(by["paged-nobuckets"]["prefill_padded_rows"] % 2048, 0)
        self.assertLess(by["fixed-buckets"]["prefill_padded_rows"], by["fixed"]["prefill_padded_rows"])
        self.assertGreater(by["fixed"]["fragmentation"], by["paged"]["fragmentation"])

    def test_one_mode_and_the_table(self):
        r = json.loads(bench(MODEL, *SMALL, "--json", "--mode", "paged").stdout)
        self.assertEqual([c["name"] for c in r["configs"]], ["paged-nobuckets", "paged"])
        out = bench(MODEL, *SMALL, "--repeat", "2").stdout
        for name in ("fixed ", "fixed-buckets", "paged-nobuckets", "paged "):
            self.assertIn(name, out)
        self.assertIn("buckets alone (fixed-buckets / fixed) tokens/s:", out)
        self.assertIn("sessions in 24 MiB", out)
        self.assertIn("greedy tokens: identical in every configuration", out)

    def test_arrival_rate_and_latency_percentiles(self):
        closed = json.loads(bench(MODEL, *SMALL, "--json", "--mode", "paged").stdout)
        r = json.loads(bench(MODEL, *SMALL, "--json", "--mode", "paged", "--arrival-rate", "40").stdout)
        self.assertEqual(r["arrival_rate"], 40)
        self.assertEqual(closed["arrival_rate"], 0)
        self.assertTrue(r["same_tokens"])
        self.assertEqual(r["lengths"], closed["lengths"])  # a rate changes the arrivals only
        for c in r["configs"] + closed["configs"]:
            self.assertEqual(c["generated"], sum(o for _, o in r["lengths"]), c["name"])
            self.assertGreater(c["ttft_p50_ms"], 0, c["name"])
            self.assertGreaterEqual(c["ttft_p99_ms"], c["ttft_p50_ms"], c["name"])
            self.assertGreater(c["tpot_p50_ms"], 0, c["name"])
            self.assertGreaterEqual(c["tpot_p99_ms"], c["tpot_p50_ms"], c["name"])
            self.assertGreater(c["itl_p50_ms"], 0, c["name"])
            self.assertGreaterEqual(c["itl_p99_ms"], c["itl_p50_ms"], c["name"])
        out = bench(MODEL, *SMALL, "--mode", "paged", "--arrival-rate", "40").stdout
        self.assertIn("Poisson arrivals at 40 requests/s", out)
        self.assertIn("TTFT p50", out)

    def test_step_tokens_adds_the_chunked_configuration(self):
        r = json.loads(bench(MODEL, *SMALL, "--json", "--mode", "paged", "--arrival-rate", "40", "--batch", "4",
                             "--step-tokens", "32").stdout)
        self.assertEqual(r["step_tokens"], 32)
        self.assertEqual([c["name"] for c in r["configs"]], ["paged-nobuckets", "paged", "paged-chunked"])
        self.assertTrue(r["same_tokens"])  # chunked prefill generates the same greedy tokens
        by = {c["name"]: c for c in r["configs"]}
        self.assertEqual(by["paged-chunked"]["prefill_rows"], r["prompt_tokens"])
        self.assertLessEqual(by["paged-chunked"]["peak_sessions"], 4)
        out = bench(MODEL, *SMALL, "--mode", "paged", "--batch", "4", "--step-tokens", "32").stdout
        self.assertIn("paged-chunked (32 rows per step) / paged: ITL p50", out)

    def test_kv_dtype_both_adds_the_bf16_configuration(self):
        r = json.loads(bench(MODEL, *SMALL, "--json", "--mode", "paged", "--kv-dtype", "both").stdout)
        self.assertEqual(r["kv_dtype"], "both")
        self.assertEqual([c["name"] for c in r["configs"]], ["paged-nobuckets", "paged", "paged-bf16kv"])
        self.assertTrue(r["same_tokens"])  # the fp32 configurations agree among themselves
        by = {c["name"]: c for c in r["configs"]}
        lengths, mib = r["lengths"], 24 << 20
        # A bf16 block is half the bytes: the sessions that fit at twice the blocks.
        self.assertEqual(by["paged"]["sessions_fit"], sessions_fit(lengths, mib // kv_block_bytes(self.config, 16), 16))
        self.assertEqual(by["paged-bf16kv"]["sessions_fit"],
                         sessions_fit(lengths, mib // kv_block_bytes(self.config, 16, 2), 16))
        self.assertGreater(by["paged-bf16kv"]["sessions_fit"], by["paged"]["sessions_fit"])
        self.assertEqual(by["paged-bf16kv"]["generated"], sum(o for _, o in lengths))
        self.assertTrue(0 <= r["bf16kv_same_requests"] <= 6)
        out = bench(MODEL, *SMALL, "--mode", "paged", "--kv-dtype", "both").stdout
        self.assertIn("paged-bf16kv / paged: tokens/s", out)
        # --kv-dtype bf16: every configuration on a bf16 pool, the fixed one's sessions too.
        r = json.loads(bench(MODEL, *SMALL, "--json", "--kv-dtype", "bf16").stdout)
        self.assertTrue(r["same_tokens"])
        by = {c["name"]: c for c in r["configs"]}
        self.assertEqual(by["fixed"]["sessions_fit"], mib // kv_block_bytes(self.config, 2048, 2))

    def test_bad_options_are_usage_errors(self):
        for bad in (["--mode", "static"], ["--requests", "0"], ["--prompt-min", "0"], ["--prompt-min", "50",
                    "--prompt-max", "10"], ["--output-min", "0"], ["--output-max", "2", "--output-min", "3"],
                    ["--kv-memory", "0"], ["--batch", "0"], ["--block-size", "0"], ["--block-size", "5000"],
                    ["--repeat", "0"], ["--threads", "0"], ["--arrival-rate", "-1"], ["--step-tokens", "8"],
                    ["--step-tokens", "-1"], ["--kv-dtype", "fp16"]):
            r = bench(MODEL, *bad, code=EXIT_USAGE)
            self.assertIn("kiln llm-bench: error:", r.stderr, bad)
        # CLI11's own parse errors (its message, the same exit code).
        for bad in (["--requests", "x"], ["--no-such-option"], []):
            r = bench(*([MODEL] if bad else []), *bad, code=EXIT_USAGE)
            self.assertTrue(r.stderr.strip(), bad)

    def test_run_errors_exit_1_with_one_line(self):
        r = bench(os.path.join(MODEL, "no-such-dir"), code=EXIT_ERROR)
        self.assertIn("kiln llm-bench: error:", r.stderr)
        self.assertIn("not a Kiln decoder directory", r.stderr)
        # 4 MiB: the paged pool fits, one 2048-token fixed session (8 MiB here) does not.
        r = bench(MODEL, *SMALL[:-4], "--kv-memory", "4", code=EXIT_ERROR)
        self.assertIn("holds no fixed-mode session", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1)


if __name__ == "__main__":
    KILN, data = sys.argv[1], sys.argv[2]
    MODEL = os.path.join(data, "gpt2-tiny")
    unittest.main(argv=sys.argv[:1], verbosity=2)
