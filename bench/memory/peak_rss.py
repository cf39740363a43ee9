"""Peak memory of one model in use, Kiln beside ONNX Runtime (issue 33's memory acceptance).

For each model: `kiln compile` at fixed shapes (the compile report gives the weights the
`.kiln` carries and the planned activation arena), then `kiln run MODEL.kiln --loops 20` under
`/usr/bin/time -v` for its peak RSS, and ONNX Runtime 1.30 (onnxruntime-node, one session,
20 runs of the same input) under the same measure. Kiln's budget is weights + planned arena +
40 MiB, with the weights read two ways. "ONNX weights" are the model's weights as the ONNX model
has them. "packed" are the copies `kiln compile` stored in the layouts the kernels use, "cold" the
originals they replace, which the .kiln keeps in a cold tail that a load maps but does not read
(docs/model-format.md); ".kiln weights" = ONNX weights - cold + packed are the weights as the
.kiln holds them for a prepared model, the bytes it reads and keeps. The acceptance budget counts
the .kiln weights: they are what the process holds of weights (packed layouts may be larger:
Winograd-transformed 3x3 weights take 16/9 or 36/9 of the originals, which is what the issue asks
the file to store); the budget on ONNX weights is printed beside it, the stricter reading. "other" is
what Kiln's peak holds beyond what it reads of weights and the arena (runtime, code, libraries,
kernel workspaces, second copies of weights repacked at load). ORT's figure includes Node.js itself:
`node -e 0` is printed beside it for scale.

Models: resnet50, mobilenet_v2, bert (BERT-base, sequence 128) and ocr_det (PP-OCRv4 det at
640x640), found or generated as bench/ort_compare.sh does (tests/e2e/make_torch_models.py
with Debian's python3-torch; the OCR models from the npm package the README installs).

usage: bench/peak_rss.sh [--models a,b] [--loops N] [--threads N] [--work-dir DIR]
                         [--kiln PATH] [--check]
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "bench", "ort_compare"))
import driver as oc  # noqa: E402  (model location and export, shared with ort_compare)

MODELS = ("resnet50", "mobilenet_v2", "bert", "ocr_det")
BUDGET_OTHER_MIB = 40.0


def log(msg):
    print(f"[peak_rss] {msg}", file=sys.stderr, flush=True)


def mib(b):
    return b / (1024.0 * 1024.0)


def peak_rss_kib(cmd, stdin_text=None, what=""):
    """Runs cmd under /usr/bin/time -v; returns its maximum resident set size in KiB."""
    p = subprocess.run(["/usr/bin/time", "-v"] + cmd, input=stdin_text, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-8:])
        raise oc.BenchError(f"{what} failed (exit {p.returncode}):\n{tail}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if not m:
        raise oc.BenchError(f"{what}: /usr/bin/time printed no maximum resident set size")
    return int(m.group(1))


def measure(args, name):
    model = oc.locate_model(name, args)
    out = os.path.join(args.work_dir, "peak_rss", name)
    os.makedirs(out, exist_ok=True)
    kiln_model = os.path.join(out, "model.kiln")
    report = oc.kiln_compile(args, model, kiln_model)
    mem = report.get("memory", {})
    # The arena the .kiln carries and every execution lays out (kilnmdlQuerySize's work size);
    # the compiler's in-place arena for reports from before it.
    weights = mem.get("weights_bytes", 0)
    arena = mem.get("runtime_arena_bytes") or mem.get("arena_bytes", 0)
    cold, packed = mem.get("cold_weights_bytes", 0), mem.get("prepacked_bytes", 0)
    kiln_cmd = [args.kiln, "run", kiln_model, "--loops", str(args.loops), "--threads",
                str(args.threads)] + oc.kiln_input_args(model)
    kiln_kib = peak_rss_kib(kiln_cmd, what=f"kiln run of {name}")
    ort_cmd = [args.node, os.path.join(SRC, "bench", "ort_compare", "run_ort.js"), model.onnx,
               str(args.threads)] + [f"{k}={v}" for k, v in model.inputs.items()]
    ort_kib = peak_rss_kib(ort_cmd, stdin_text=f"time {args.loops} 0\nquit\n",
                           what=f"ONNX Runtime run of {name}")
    rss = kiln_kib * 1024
    read = weights - cold + packed  # what a prepared model reads
    row = {"model": model.label, "weights": weights, "packed": packed, "cold": cold, "kiln_weights": read,
           "arena": arena,
           "other": rss - read - arena, "kiln_rss": rss, "ort_rss": ort_kib * 1024,
           "budget": weights + arena + BUDGET_OTHER_MIB * 2**20,
           "budget_packed": read + arena + BUDGET_OTHER_MIB * 2**20}
    log(f"{model.label}: weights {mib(read):.1f} MiB in the .kiln ({mib(weights):.1f} in the ONNX model), "
        f"arena {mib(arena):.1f} MiB, Kiln peak RSS {mib(rss):.1f} MiB (budget {mib(row['budget_packed']):.1f}; "
        f"{mib(row['budget']):.1f} on ONNX weights), ORT {mib(row['ort_rss']):.1f} MiB")
    return row


def prepare(args):
    """Fills in the build and work folders and node, checks kiln, the models and the npm
    packages; returns the model names."""
    args.build_dir = os.path.dirname(os.path.dirname(os.path.abspath(args.kiln)))
    args.work_dir = args.work_dir or os.path.join(args.build_dir, "peak_rss_work")
    args.node = oc.check_node(os.environ.get("NODE", "node"))
    oc.check_kiln(args.kiln)
    names = [m for m in args.models.split(",") if m]
    for n in names:
        if n not in MODELS:
            raise oc.BenchError(f"unknown model '{n}' (one of {', '.join(MODELS)})")
    oc.ensure_packages(args.node, "ocr_det" in names)
    return names


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of "
                   + ",".join(MODELS))
    p.add_argument("--loops", type=int, default=20, help="executions per process (20)")
    p.add_argument("--threads", type=int, default=2, help="threads of both engines (2)")
    p.add_argument("--kiln", default=os.environ.get("KILN_BIN",
                   os.path.join(SRC, "build", "release", "tools", "kiln")))
    p.add_argument("--work-dir", help="models and results (default BUILD/peak_rss_work)")
    p.add_argument("--check", action="store_true", help="exit 3 when a model is over budget")
    args = p.parse_args()
    names = prepare(args)
    node_kib = peak_rss_kib([args.node, "-e", "0"], what="node -e 0")
    rows = [measure(args, n) for n in names]
    print()
    print("load: " + subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip())
    print(f"Peak RSS of `kiln run MODEL.kiln --loops {args.loops} --threads {args.threads}` "
          f"(/usr/bin/time -v) against weights + planned arena + {BUDGET_OTHER_MIB:g} MiB, and "
          f"ONNX Runtime's peak RSS for the same runs (its Node.js process; `node -e 0` alone: "
          f"{mib(node_kib * 1024):.1f} MiB). MiB.")
    head = ("model", "ONNX weights", "packed", "cold", ".kiln weights", "arena", "other", "Kiln RSS",
            "budget (.kiln weights)", "in it", "budget (ONNX weights)", "in it", "ORT RSS", "Kiln/ORT")
    lines = [(r["model"], f"{mib(r['weights']):.1f}", f"{mib(r['packed']):.1f}", f"{mib(r['cold']):.1f}",
              f"{mib(r['kiln_weights']):.1f}", f"{mib(r['arena']):.1f}", f"{mib(r['other']):.1f}",
              f"{mib(r['kiln_rss']):.1f}",
              f"{mib(r['budget_packed']):.1f}", "yes" if r["kiln_rss"] <= r["budget_packed"] else "NO",
              f"{mib(r['budget']):.1f}", "yes" if r["kiln_rss"] <= r["budget"] else "NO",
              f"{mib(r['ort_rss']):.1f}", f"{r['kiln_rss'] / r['ort_rss']:.2f}") for r in rows]
    oc.print_markdown_table(head, lines)
    within = sum(r["kiln_rss"] <= r["budget"] for r in rows)
    within_packed = sum(r["kiln_rss"] <= r["budget_packed"] for r in rows)
    print(f"Within the budget (.kiln weights, the acceptance's): {within_packed}/{len(rows)}; within the "
          f"budget on ONNX weights: {within}/{len(rows)}")
    with open(os.path.join(args.work_dir, "peak_rss.json"), "w") as f:
        json.dump({"rows": rows, "node_alone": node_kib * 1024}, f, indent=1)
    return 3 if args.check and within_packed < len(rows) else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except oc.BenchError as e:
        log(f"error: {e}")
        sys.exit(1)
