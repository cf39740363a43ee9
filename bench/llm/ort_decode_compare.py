#!/usr/bin/python3
"""Decode latency at batch 1: Kiln's LLM engine against ONNX Runtime on the same model, side by
side in one run (issue 29's acceptance: GPT-2-small at 512 tokens of context <= 0.8x ONNX
Runtime 1.30 running the same past-KV ONNX model).

  kiln  build/release/bench/llm_bench --mode latency: the engine (paged KV cache, batch 1) on
        the decoder split bench/llm/export_decoder.py writes;
  ort   bench/llm/ort_decode.js: onnxruntime-node running the exporter's decoder.onnx (the
        same weights in the common past-key-values form), presents fed back as the next
        step's past, graph optimisation 'all'; and the same last step re-run fetching only
        the logits (ORT's session cost without copying the presents out to JavaScript).

Both processes stay up for the whole run, one thread each by default. For every context length
P and round, each decodes the same random prompt of P tokens greedily and times K single-token
steps at contexts P+2..P+K+1 (the step right after the prefill is left out on both sides); the
two alternate, the order swapping every time. A warm-up round runs first, untimed. Prints the
median per-token latency per context, the ratios, and whether both produced the same tokens.

  bench/llm/ort_decode_compare.py [--config gpt2-124m] [--contexts 128,256,512,1000]
      [--steps 16] [--rounds 3] [--threads 1] [--work DIR] [--json FILE]

onnxruntime-node 1.30.0 is installed with `npm install --ignore-scripts` into WORK/ort-node
unless --ort-dir names a directory whose node_modules has it.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
ORT_PACKAGE = "onnxruntime-node@1.30.0"


def log(msg):
    print(f"[ort_decode_compare] {msg}", file=sys.stderr, flush=True)


class Peer:
    """A long-lived process answering one JSON line per command line."""

    def __init__(self, name, cmd, env=None):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"ort_decode_compare: {self.name} exited (status {self.proc.wait()}) without answering")
        reply = json.loads(line)
        if "error" in reply:
            sys.exit(f"ort_decode_compare: {self.name}: {reply['error']}")
        return reply

    def decode(self, prompt, steps):
        self.proc.stdin.write(f"decode {steps} {','.join(map(str, prompt))}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        self.proc.wait(timeout=60)


def ensure_ort(args, work):
    """The directory whose node_modules holds onnxruntime-node, installed there if missing."""
    prefix = args.ort_dir or os.path.join(work, "ort-node")
    if not os.path.isdir(os.path.join(prefix, "node_modules", "onnxruntime-node")):
        npm = shutil.which("npm")
        if not npm:
            sys.exit(f"ort_decode_compare: npm not found; run `npm install --ignore-scripts --prefix {prefix} "
                     f"{ORT_PACKAGE}`")
        os.makedirs(prefix, exist_ok=True)
        log(f"installing {ORT_PACKAGE} into {prefix} (npm install --ignore-scripts)")
        subprocess.run([npm, "install", "--ignore-scripts", "--no-save", "--no-audit", "--no-fund", "--prefix",
                        prefix, ORT_PACKAGE], check=True, stdout=subprocess.DEVNULL)
    return prefix


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="gpt2-124m", help="an export_decoder.py configuration (default gpt2-124m)")
    ap.add_argument("--contexts", default="128,256,512,1000", help="prompt lengths P (default 128,256,512,1000)")
    ap.add_argument("--steps", type=int, default=16, help="timed decode steps per context and round (default 16)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds, alternated (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    ap.add_argument("--threads", type=int, default=1, help="threads of each engine (default 1)")
    ap.add_argument("--seed", type=int, default=1234, help="the model's weights (default 1234)")
    ap.add_argument("--work", default=os.path.join(SRC, "build", "release", "bench", "llm_ort"),
                    help="where the exported model and onnxruntime-node go (default build/release/bench/llm_ort)")
    ap.add_argument("--ort-dir", help="a directory whose node_modules has onnxruntime-node (else installed in WORK)")
    ap.add_argument("--bench-binary", default=os.path.join(SRC, "build", "release", "bench", "llm_bench"))
    ap.add_argument("--node", default=os.environ.get("NODE", "node"))
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    if args.steps < 1 or args.rounds < 1 or args.threads < 1 or min(contexts) < 1:
        ap.error("--steps, --rounds, --threads and every context must be positive")
    if not os.path.exists(args.bench_binary):
        sys.exit(f"ort_decode_compare: {args.bench_binary} not found (build the llm_bench target)")
    node = shutil.which(args.node)
    if not node:
        sys.exit(f"ort_decode_compare: node ('{args.node}') not found; ONNX Runtime runs under Node.js")

    work = os.path.abspath(args.work)
    model_dir = os.path.join(work, f"{args.config}-seed{args.seed}")
    if not os.path.exists(os.path.join(model_dir, "decoder.onnx")):
        log(f"exporting {args.config} (seed {args.seed}) into {model_dir}")
        sys.path.insert(0, HERE)
        import export_decoder  # noqa: E402  (torch: only when exporting)
        export_decoder.export(args.config, model_dir, args.seed)
    with open(os.path.join(model_dir, "config.json")) as f:
        c = json.load(f)
    too_long = [p for p in contexts if p + args.steps + 1 > c["context"]]
    if too_long:
        sys.exit(f"ort_decode_compare: contexts {too_long} + {args.steps + 1} steps exceed {args.config}'s "
                 f"{c['context']} tokens")
    ort_prefix = ensure_ort(args, work)

    load_start = os.getloadavg()
    kiln = Peer("kiln", [args.bench_binary, model_dir, "--mode", "latency"],
                env=dict(os.environ, KILN_NUM_THREADS=str(args.threads)))
    ort = Peer("onnxruntime", [node, os.path.join(HERE, "ort_decode.js"), os.path.join(model_dir, "decoder.onnx"),
                               str(args.threads), str(c["kv_heads"]), str(c["head_dim"])],
               env=dict(os.environ, NODE_PATH=os.path.join(ort_prefix, "node_modules")))
    log(f"onnxruntime-node {ort.ready['version']} loaded in {ort.ready['load_ms']:.0f} ms")

    times = {p: {"kiln": [], "ort": [], "ort_logits": []} for p in contexts}
    agree = {p: 0 for p in contexts}
    turn = 0
    for rnd in range(args.warmup + args.rounds):
        timed = rnd >= args.warmup
        for p in contexts:
            prompt = np.random.RandomState(1000 * rnd + p).randint(0, c["vocab"], size=p).tolist()
            order = [kiln, ort] if turn % 2 == 0 else [ort, kiln]
            turn += 1
            replies = {peer.name: peer.decode(prompt, args.steps) for peer in order}
            k, o = replies["kiln"], replies["onnxruntime"]
            if len(k["step_ms"]) != args.steps or len(o["step_ms"]) != args.steps:
                sys.exit(f"ort_decode_compare: expected {args.steps} timed steps, got {len(k['step_ms'])} (kiln) "
                         f"and {len(o['step_ms'])} (onnxruntime)")
            if not timed:
                continue
            times[p]["kiln"] += k["step_ms"]
            times[p]["ort"] += o["step_ms"]
            times[p]["ort_logits"] += o["logits_only_ms"]
            agree[p] += k["tokens"] == o["tokens"]
            log(f"round {rnd - args.warmup + 1}/{args.rounds} context {p}: kiln "
                f"{statistics.median(k['step_ms']):.2f} ms, onnxruntime {statistics.median(o['step_ms']):.2f} ms "
                f"(logits only {statistics.median(o['logits_only_ms']):.2f} ms)")
    kiln.close()
    ort.close()
    load_end = os.getloadavg()

    rows = []
    for p in contexts:
        k = statistics.median(times[p]["kiln"])
        o = statistics.median(times[p]["ort"])
        ol = statistics.median(times[p]["ort_logits"])
        rows.append({"context": p, "kiln_ms": k, "ort_ms": o, "ort_logits_only_ms": ol, "kiln_over_ort": k / o,
                     "kiln_over_ort_logits_only": k / ol, "tokens_equal": agree[p], "rounds": args.rounds})
    print(f"{args.config} (seed {args.seed}), batch 1, {args.threads} thread(s) each, greedy; per-token decode "
          f"latency, median of {args.rounds} rounds x {args.steps} steps at contexts P+2..P+{args.steps + 1}, "
          f"alternated; onnxruntime-node {ort.ready['version']}")
    print(f"load average at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    print(f"{'context':>8} {'kiln ms':>9} {'ort ms':>9} {'ort logits-only ms':>19} {'kiln/ort':>9} "
          f"{'kiln/ort-logits':>16} {'same tokens':>12}")
    for r in rows:
        print(f"{r['context']:>8} {r['kiln_ms']:>9.2f} {r['ort_ms']:>9.2f} {r['ort_logits_only_ms']:>19.2f} "
              f"{r['kiln_over_ort']:>9.2f} {r['kiln_over_ort_logits_only']:>16.2f} "
              f"{r['tokens_equal']:>6}/{r['rounds']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "seed": args.seed, "threads": args.threads, "steps": args.steps,
                       "ort_version": ort.ready["version"], "load_start": load_start, "load_end": load_end,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
