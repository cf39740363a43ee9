#!/usr/bin/python3
"""`kiln serve` under load (issue 30): throughput and latency of `kiln loadgen`'s closed-loop
clients (KServe v2 binary tensors, one keep-alive connection per client thread) for

  A. MobileNetV2, 1 logical device of 1 core vs 2 devices of 1 core each (dynamic scheduling);
  B. MobileNetV2, 2 devices: dynamic (shared queue, idle device takes the next request) vs
     static (requests assigned to devices round-robin on arrival);
  C. an uneven mix, half ResNet-50 and half MobileNetV2 requests, 2 devices, dynamic vs static;
  D. `kiln bench` on the same model and devices (no HTTP), for the server's overhead;
  E. MobileNetV2, 1 and 2 devices, `--prefetch on` (the default, in A) vs `off`: the input
     copy of the next batch overlapping the current execution must not cost throughput;
  F. MobileNetV2, 2 devices, open loop (requests sent at a fixed rate, whatever the answers)
     at 70% of A's 2-device throughput: p99 latency against p50 (issue 30: p99 <= 2x p50).

The models are the seeded PyTorch exports of tests/e2e/make_torch_models.py (random weights:
speed does not depend on them), compiled once with `kiln compile`. Responses are checked to be
200 with an output of the right size; correctness against references is tests/serve's job.

The client runs on the same machine: its threads take CPU time from the server's cores, so on a
2-core machine the absolute numbers are lower than a remote client would see; every row pays
that cost alike, and the table reports ratios measured in the same run.

usage: bench/serve/serve_bench.py [--kiln build/release/tools/kiln] [--duration 8] [--clients 4]
                                  [--rows all|prefetch]   (prefetch: A's rows and E only)
"""
import argparse
import json
import os
import re
import subprocess


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def models_dir(build, work):
    """Where ResNet-50 and MobileNetV2 ONNX files are: the e2e cache, else made here."""
    cache = os.path.join(build, "e2e", "models")
    if all(os.path.exists(os.path.join(cache, m, "model.onnx")) for m in ("resnet50", "mobilenet_v2")):
        return cache
    out = os.path.join(work, "models")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "e2e", "make_torch_models.py"), out,
                    "--models", "resnet50,mobilenet_v2"], check=True, stdout=subprocess.DEVNULL)
    return out


def make_repository(kiln, models, work):
    repo = os.path.join(work, "repo")
    for name in ("resnet50", "mobilenet_v2"):
        dst = os.path.join(repo, name, "1", "model.kiln")
        if not os.path.exists(dst):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            subprocess.run([kiln, "compile", os.path.join(models, name, "model.onnx"), "-o", dst, "-q"], check=True)
    return repo


class Server:
    def __init__(self, kiln, repo, devices, scheduling, *options, prefix=()):
        # prefix: a command the server runs under, such as taskset -c 0.
        self.proc = subprocess.Popen([*prefix, kiln, "serve", "--model-repository", repo, "--http-port", "0", "--devices",
                                      f"cpu:{devices}", "--threads", "1", "--scheduling", scheduling, *options],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stdout:
            m = re.search(r"listening on http://[\d.]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                return
        raise RuntimeError("kiln serve did not start: " + self.proc.stderr.read())

    def stop(self):
        self.proc.terminate()
        self.proc.communicate(timeout=60)


def load(kiln, port, models, clients, duration, rate=None):
    """Closed loop with `kiln loadgen` (open loop at `rate` requests/s over all models when
    given): clients split evenly over `models`, one loadgen process per model, all at once.
    Returns (requests per second, p50 ms, p99 ms, per-model counts); the percentiles are the
    worst model's."""
    open_loop = ["--rate", str(rate / len(models))] if rate else []
    procs = [subprocess.Popen([kiln, "loadgen", f"http://127.0.0.1:{port}", "--model", m, "--concurrency",
                               str(clients // len(models)), "--duration", str(duration), "--json", *open_loop],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for m in models]
    results = []
    for m, p in zip(models, procs):
        out, err = p.communicate(timeout=duration + 120)
        if p.returncode != 0:
            raise RuntimeError(f"kiln loadgen {m} failed: {err}")
        r = json.loads(out)
        if r["failed"]:
            raise RuntimeError(f"failed requests: {r['failed']}")
        results.append(r)
    return (sum(r["throughput_per_s"] for r in results), max(r["latency_ms"]["p50"] for r in results),
            max(r["latency_ms"]["p99"] for r in results), {m: r["ok"] for m, r in zip(models, results)})


def kiln_bench(kiln, model, devices, duration):
    r = subprocess.run([kiln, "bench", model, "--devices", str(devices), "--threads", "1", "--duration", str(duration),
                        "--json"], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["throughput_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--duration", type=float, default=8)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rows", choices=["all", "prefetch"], default="all")
    args = ap.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.kiln)))
    work = os.path.join(build, "bench", "serve")
    os.makedirs(work, exist_ok=True)
    repo = make_repository(args.kiln, models_dir(build, work), work)
    rows = {}

    def run(label, devices, scheduling, models, *options, rate=None, clients=args.clients):
        server = Server(args.kiln, repo, devices, scheduling, *options)
        try:
            load(args.kiln, server.port, models, clients, 1.0, rate)  # warm-up
            rows[label] = load(args.kiln, server.port, models, clients, args.duration, rate)
        finally:
            server.stop()
        tput, p50, p99, counts = rows[label]
        print(f"{label:34s} {tput:8.1f} req/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   {counts}", flush=True)

    mnv2 = ["mobilenet_v2"]
    mix = ["resnet50", "mobilenet_v2"]
    print(f"{args.clients} closed-loop clients, {args.duration:g} s per row, 1 thread per device")
    # Prefetch on and off one after the other, so that both see the same machine load.
    run("mobilenet_v2 1 device", 1, "dynamic", mnv2)
    run("mobilenet_v2 1 device prefetch off", 1, "dynamic", mnv2, "--prefetch", "off")
    run("mobilenet_v2 2 devices dynamic", 2, "dynamic", mnv2)
    run("mobilenet_v2 2 devices prefetch off", 2, "dynamic", mnv2, "--prefetch", "off")
    t = {k: v[0] for k, v in rows.items()}
    prefetch_rows = [
        f"| MobileNetV2 1 device, prefetch on / off | {t['mobilenet_v2 1 device'] / t['mobilenet_v2 1 device prefetch off']:.2f}x | >= 1 (no cost) |",
        f"| MobileNetV2 2 devices, prefetch on / off | {t['mobilenet_v2 2 devices dynamic'] / t['mobilenet_v2 2 devices prefetch off']:.2f}x | >= 1 (no cost) |"]
    if args.rows == "prefetch":
        print("\n| ratio | value | goal |\n|---|---|---|\n" + "\n".join(prefetch_rows))
        return
    # F: an open loop at 70% of the closed loop's throughput; twice the clients, so that a
    # slow answer does not hold back the next request (loadgen sends on schedule while a
    # client is free).
    rate70 = 0.7 * t["mobilenet_v2 2 devices dynamic"]
    run("mobilenet_v2 2 devices at 70% load", 2, "dynamic", mnv2, rate=rate70, clients=2 * args.clients)
    run("mobilenet_v2 2 devices static", 2, "static", mnv2)
    run("mix 2 devices dynamic", 2, "dynamic", mix)
    run("mix 2 devices static", 2, "static", mix)
    kiln_model = os.path.join(repo, "mobilenet_v2", "1", "model.kiln")
    bench1 = kiln_bench(args.kiln, kiln_model, 1, args.duration)
    bench2 = kiln_bench(args.kiln, kiln_model, 2, args.duration)
    print(f"{'kiln bench mobilenet_v2 1 device':34s} {bench1:8.1f} inferences/s")
    print(f"{'kiln bench mobilenet_v2 2 devices':34s} {bench2:8.1f} inferences/s")
    t = {k: v[0] for k, v in rows.items()}
    print()
    print("| ratio | value | issue 30 goal |")
    print("|---|---|---|")
    print(f"| MobileNetV2 2 devices / 1 device (dynamic) | {t['mobilenet_v2 2 devices dynamic'] / t['mobilenet_v2 1 device']:.2f}x | >= 1.85x |")
    print(f"| MobileNetV2 2 devices dynamic / static | {t['mobilenet_v2 2 devices dynamic'] / t['mobilenet_v2 2 devices static']:.2f}x | - |")
    print(f"| mix ResNet-50 + MobileNetV2 dynamic / static | {t['mix 2 devices dynamic'] / t['mix 2 devices static']:.2f}x | >= 1.15x |")
    print(f"| server / kiln bench, 1 device | {t['mobilenet_v2 1 device'] / bench1:.2f} | >= 0.90 |")
    print(f"| server / kiln bench, 2 devices | {t['mobilenet_v2 2 devices dynamic'] / bench2:.2f} | >= 0.90 |")
    _, p50, p99, _ = rows["mobilenet_v2 2 devices at 70% load"]
    print(f"| MobileNetV2 2 devices at 70% load ({rate70:.0f} req/s): p99 / p50 | {p99 / p50:.2f} ({p99:.1f} / {p50:.1f} ms) | <= 2 |")
    print("\n".join(prefetch_rows))


if __name__ == "__main__":
    main()
