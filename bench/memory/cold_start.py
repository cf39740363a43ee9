"""Model open + first inference, cold process, page cache warm (issue 33's cold-start goal).

For each model, two Kilns side by side: the baseline (`--baseline PATH`, a kiln binary of
another build, e.g. the last release; without it, this build with the weights stored as the
ONNX model has them: `kiln compile --no-prepack` and `KILN_MODEL_LOAD=read-all`, which is
how a load worked before pre-packed weights) and this build as it is. Each compiles the
model itself, then `kiln run MODEL.kiln --loops 1 --warmup 0 --json` runs in a fresh
process, alternated between the two, --rounds times (after one untimed run each, which
warms the page cache): `load_ms` (open, validate, prepare every kernel) plus `first_run_ms`
(the first execution), medians. The file sizes are printed too. With --warm-loops N each of
those processes then runs N more executions, and the median of their medians is the warm
latency: pre-packed weights must not make the steady state slower (issue 33 part 1).

Models: resnet50 and bert (BERT-base, sequence 128) by default; mobilenet_v2 and ocr_det as
well, found or generated as bench/ort_compare.sh does.

usage: bench/cold_start.sh [--models a,b] [--rounds N] [--threads N] [--warm-loops N]
                           [--baseline PATH] [--kiln PATH] [--work-dir DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bench", "ort_compare"))
import driver as oc  # noqa: E402  (model location and export, shared with ort_compare)
import peak_rss  # noqa: E402  (argument checks and models, shared with the peak-memory bench)

MODELS = peak_rss.MODELS


def log(msg):
    print(f"[cold_start] {msg}", file=sys.stderr, flush=True)


def compile_model(kiln, model, out, extra):
    cmd = [kiln, "compile", model.onnx, "-o", out, "-q"] + extra
    if model.shapes:
        cmd += ["--input-shape", oc.shape_spec(model.shapes)]
    oc.run(cmd, f"kiln compile of {model.name}")


def one_run(kiln, kiln_model, model, threads, env, warm_loops):
    # --warmup 1: the first execution is reported apart (first_run_ms), latency_ms covers the
    # warm loops only.
    loops, warmup = (warm_loops, 1) if warm_loops > 0 else (1, 0)
    cmd = [kiln, "run", kiln_model, "--loops", str(loops), "--warmup", str(warmup), "--threads", str(threads),
           "--json"] + oc.kiln_input_args(model)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env={**os.environ, **env})
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        raise oc.BenchError(f"kiln run of {kiln_model} failed (exit {p.returncode}):\n{tail}")
    d = json.loads(p.stdout)
    warm = d["latency_ms"]["median"] if warm_loops > 0 else float("nan")
    return d["load_ms"], d["first_run_ms"], warm


def measure(args, name, engines):
    model = oc.locate_model(name, args)
    out = os.path.join(args.work_dir, "cold_start", name)
    os.makedirs(out, exist_ok=True)
    files = {}
    for e in engines:
        files[e["label"]] = os.path.join(out, e["file"])
        compile_model(e["kiln"], model, files[e["label"]], e["compile"])
    times = {e["label"]: [] for e in engines}
    for r in range(args.rounds + 1):
        for e in (engines if r % 2 == 0 else engines[::-1]):
            t = one_run(e["kiln"], files[e["label"]], model, args.threads, e["env"], args.warm_loops)
            if r > 0:
                times[e["label"]].append(t)
    row = {"model": model.label}
    for e in engines:
        ts = times[e["label"]]
        row[e["label"]] = {"load_ms": statistics.median(t[0] for t in ts),
                           "first_run_ms": statistics.median(t[1] for t in ts),
                           "total_ms": statistics.median(t[0] + t[1] for t in ts),
                           "warm_ms": statistics.median(t[2] for t in ts),
                           "file_bytes": os.path.getsize(files[e["label"]]), "runs": ts}
    b, n = row[engines[0]["label"]], row[engines[1]["label"]]
    log(f"{model.label}: baseline {b['total_ms']:.0f} ms, this build {n['total_ms']:.0f} ms "
        f"({b['total_ms'] / n['total_ms']:.2f}x)" +
        (f"; warm {b['warm_ms']:.2f} vs {n['warm_ms']:.2f} ms" if args.warm_loops > 0 else ""))
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet50,bert", help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--rounds", type=int, default=7, help="timed runs per engine and model (7)")
    p.add_argument("--threads", type=int, default=2, help="threads (2)")
    p.add_argument("--warm-loops", type=int, default=0,
                   help="executions after the first in each process, for the warm latency (0: none)")
    p.add_argument("--baseline", help="kiln binary to compare with (default: this build, --no-prepack, "
                   "KILN_MODEL_LOAD=read-all)")
    p.add_argument("--kiln", default=os.environ.get("KILN_BIN",
                   os.path.join(SRC, "build", "release", "tools", "kiln")))
    p.add_argument("--work-dir", help="models and results (default BUILD/peak_rss_work)")
    args = p.parse_args()
    names = peak_rss.prepare(args)
    if args.baseline:
        oc.check_kiln(args.baseline)
        base = {"label": "baseline", "kiln": args.baseline, "file": "baseline.kiln", "compile": [], "env": {}}
        base_text = f"`{args.baseline}`"
    else:
        base = {"label": "baseline", "kiln": args.kiln, "file": "baseline.kiln", "compile": ["--no-prepack"],
                "env": {"KILN_MODEL_LOAD": "read-all"}}
        base_text = "this build, --no-prepack, KILN_MODEL_LOAD=read-all"
    engines = [base, {"label": "this", "kiln": args.kiln, "file": "model.kiln", "compile": [], "env": {}}]
    rows = [measure(args, n, engines) for n in names]
    print()
    run_args = f"--loops {args.warm_loops} --warmup 1" if args.warm_loops > 0 else "--loops 1 --warmup 0"
    print(f"Model open + first inference (`kiln run MODEL.kiln {run_args} --threads {args.threads}`, "
          f"a fresh process each, page cache warm), medians of {args.rounds} alternated runs; baseline: "
          f"{base_text}. ms, file MB.")
    head = ("model", "base open", "base 1st run", "base total", "open", "1st run", "total", "speed-up",
            "base file", "file")
    if args.warm_loops > 0:
        head += ("base warm", "warm", "warm this/base")
    lines = []
    for r in rows:
        b, n = r["baseline"], r["this"]
        lines.append((r["model"], f"{b['load_ms']:.1f}", f"{b['first_run_ms']:.1f}", f"{b['total_ms']:.1f}",
                      f"{n['load_ms']:.1f}", f"{n['first_run_ms']:.1f}", f"{n['total_ms']:.1f}",
                      f"{b['total_ms'] / n['total_ms']:.2f}x", f"{b['file_bytes'] / 1e6:.1f}",
                      f"{n['file_bytes'] / 1e6:.1f}") +
                     ((f"{b['warm_ms']:.2f}", f"{n['warm_ms']:.2f}", f"{n['warm_ms'] / b['warm_ms']:.3f}")
                      if args.warm_loops > 0 else ()))
    oc.print_markdown_table(head, lines)
    with open(os.path.join(args.work_dir, "cold_start.json"), "w") as f:
        json.dump({"rows": rows, "baseline": base_text}, f, indent=1)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except oc.BenchError as e:
        print(f"cold_start: {e}", file=sys.stderr)
        sys.exit(1)
