#!/usr/bin/python3
"""Where the CPU time of a `kiln serve` request goes (issue 30): serves MobileNetV2 (or another
model of the serve_bench repository), drives it with `kiln loadgen` closed loop, and reads the
CPU time (user + system, /proc/PID/task/TID/stat) of every server thread by its name
(kiln-worker: the scheduler's workers; kiln-http: the connection threads; the stream threads
that run the executions; ...) and of the loadgen process, before and after the timed run. Prints
the CPU milliseconds per answered request of each, against `kiln bench`'s CPU time per
inference on the same model and devices (the compute alone).

With --perf, the run is also sampled with `perf record -e cpu-clock -g` (software event: this
machine has no hardware counters) over the server and the loadgen processes; the report is
left in WORK/perf.data for `perf report`.

usage: bench/serve/cpu_split.py [--kiln build/release/tools/kiln] [--devices 2] [--clients 4]
                                [--duration 8] [--model mobilenet_v2] [--perf]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_bench  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid):
    """{thread name: CPU seconds} over the threads of `pid` alive now (plus the exited ones'
    time the process keeps, under '(exited)')."""
    out = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except FileNotFoundError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[name] += (int(fields[11]) + int(fields[12])) / TICK
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    total = (int(fields[11]) + int(fields[12])) / TICK
    out["(exited)"] = max(0.0, total - sum(out.values()))
    return out


def process_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default=os.path.join(serve_bench.ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--duration", type=float, default=8)
    ap.add_argument("--model", default="mobilenet_v2")
    ap.add_argument("--perf", action="store_true")
    args = ap.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.kiln)))
    work = os.path.join(build, "bench", "serve")
    os.makedirs(work, exist_ok=True)
    repo = serve_bench.make_repository(args.kiln, serve_bench.models_dir(build, work), work)
    print(f"load average {os.getloadavg()[0]:.1f}; {args.model}, {args.devices} device(s) x 1 thread, "
          f"{args.clients} closed-loop loadgen clients, {args.duration:g} s", flush=True)
    server = serve_bench.Server(args.kiln, repo, args.devices, "dynamic")
    try:
        url = f"http://127.0.0.1:{server.port}"
        loadgen = [args.kiln, "loadgen", url, "--model", args.model, "--concurrency", str(args.clients), "--json"]
        subprocess.run([*loadgen, "--duration", "1"], check=True, capture_output=True)  # warm-up
        before = thread_cpu(server.proc.pid)
        client = subprocess.Popen([*loadgen, "--duration", str(args.duration)], stdout=subprocess.PIPE, text=True)
        perf = None
        if args.perf:
            time.sleep(0.3)
            perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-g", "-o",
                                     os.path.join(work, "perf.data"), "-p", f"{server.proc.pid},{client.pid}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # The client's CPU time, read just before it exits (it is gone after communicate).
        client_cpu = 0.0
        while client.poll() is None:
            try:
                client_cpu = process_cpu(client.pid)
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.05)
        result = json.loads(client.communicate()[0])
        if perf:
            perf.send_signal(2)
            perf.wait()
        after = thread_cpu(server.proc.pid)
    finally:
        server.stop()
    n = result["ok"]
    print(f"{n} requests, {result['throughput_per_s']:.1f} req/s, p50 {result['latency_ms']['p50']:.1f} ms, "
          f"failed {result['failed']}; load average {os.getloadavg()[0]:.1f}")
    rows = [(name, (after[name] - before.get(name, 0)) * 1000 / n) for name in after]
    rows = [r for r in rows if r[1] > 0.005]
    rows.sort(key=lambda r: -r[1])
    server_ms = sum(ms for _, ms in rows)
    for name, ms in rows:
        print(f"  server {name:16s} {ms:7.3f} CPU ms/request")
    print(f"  server total           {server_ms:7.3f} CPU ms/request")
    print(f"  client (kiln loadgen)  {client_cpu * 1000 / n:7.3f} CPU ms/request (its whole run, connecting included)")
    # The compute alone: kiln bench on the same model and devices, CPU time per inference.
    loops = max(50, int(n / 2))
    model = os.path.join(repo, args.model, "1", "model.kiln")
    t0 = os.times()
    subprocess.run([args.kiln, "bench", model, "--devices", str(args.devices), "--threads", "1", "--loops", str(loops),
                    "--warmup", "2"], check=True, capture_output=True)
    t1 = os.times()
    bench_ms = (t1.children_user + t1.children_system - t0.children_user - t0.children_system) * 1000 / loops
    print(f"  kiln bench             {bench_ms:7.3f} CPU ms/inference ({loops} inferences, loading included)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
