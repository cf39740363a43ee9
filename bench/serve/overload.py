#!/usr/bin/python3
"""Overload acceptance of `kiln serve` (issue 30): measure the server's capacity, then offer 3x
that rate for 60 s (open loop: request k is sent at start + k / rate, whether or not the
earlier ones were answered) with 1000 malformed requests interleaved, and count

  accepted   200, each output checked against `kiln run` on the same input (bit for bit, and
             within 1e-5 relative),
  rejected   503 (or 429) with a Retry-After header,
  lost       no answer, a broken connection, any other status, or a wrong output: must be 0;

and the malformed ones: bad JSON, a wrong shape, a wrong datatype, a body over --max-body-mb,
each must get its 4xx (400 or 413) and the valid requests around them must stay correct. The
server's RSS (VmRSS, and the peak VmHWM) is printed before and after.

Model: ResNet-50 (tests/e2e/make_torch_models.py's seeded export, compiled once), no batching,
2 devices of 1 thread, max_queue_size 16 so that an overload is refused at once instead of
waiting in a long queue. Client: Python threads on the same machine.

With --server-cores 0 --client-cores 1 the server runs under `taskset -c 0` (one device of one
core) and this script, its client threads and `kiln loadgen` on core 1, so that the capacity is
measured, and the overload offered, by a client that does not take the server's core.

usage: bench/serve/overload.py [--kiln build/release/tools/kiln] [--duration 60] [--factor 3]
                               [--malformed 1000] [--devices 2] [--server-cores LIST --client-cores LIST]
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import subprocess
import threading
import time

import numpy as np

from infer_vs_run import NUMPY
from serve_bench import ROOT, Server, load, make_repository, models_dir

INPUTS = 4  # distinct inputs, each with its kiln run reference


def rss_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def binary_body(x):
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + x.tobytes(), {"Inference-Header-Content-Length": str(len(header)),
                                  "Content-Type": "application/octet-stream"}


def malformed_bodies(x):
    """(kind, body, headers, expected statuses), cycled through."""
    good, headers = binary_body(x)
    n = int(headers["Inference-Header-Content-Length"])
    wrong_shape = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 224, 223],
                                          "parameters": {"binary_data_size": 3 * 224 * 223 * 4}}]}).encode()
    wrong_dtype = json.dumps({"inputs": [{"name": "input", "datatype": "INT32", "shape": [1, 3, 224, 224],
                                          "parameters": {"binary_data_size": x.nbytes}}]}).encode()
    json_headers = {"Content-Type": "application/json"}
    return [
        ("bad JSON", b'{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3', json_headers, (400,)),
        ("wrong shape", wrong_shape + good[n:n + 3 * 224 * 223 * 4],
         {**headers, "Inference-Header-Content-Length": str(len(wrong_shape))}, (400,)),
        ("wrong datatype", wrong_dtype + good[n:], {**headers, "Inference-Header-Content-Length": str(len(wrong_dtype))},
         (400,)),
        ("oversized body", good + b"\0" * (1 << 20), headers, (413,)),
    ]


class Client:
    """Thread-local keep-alive connections; one request at a time per thread."""

    def __init__(self, port):
        self.port = port
        self.local = threading.local()

    def post(self, body, headers):
        conn = getattr(self.local, "conn", None)
        for attempt in (0, 1):
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                self.local.conn = conn
            try:
                conn.request("POST", "/v2/models/resnet50/infer", body=body, headers=headers)
                r = conn.getresponse()
                return r.status, dict(r.getheaders()), r.read()
            except (ConnectionError, http.client.HTTPException, OSError):
                # The server closes a connection after an error it cannot read past (413): a
                # fresh connection for the next request. A request that fails twice is lost.
                conn.close()
                conn = self.local.conn = None
                if attempt == 1:
                    raise


def output_of(headers, data):
    n = int(headers["Inference-Header-Content-Length"])
    (o,) = json.loads(data[:n])["outputs"]
    return np.frombuffer(data[n:], dtype=NUMPY[o["datatype"]]).reshape(o["shape"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--factor", type=float, default=3)
    ap.add_argument("--malformed", type=int, default=1000)
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--server-cores", help="taskset core list of the server (e.g. 0)")
    ap.add_argument("--client-cores", help="core list of this client and kiln loadgen (e.g. 1)")
    args = ap.parse_args()
    if args.client_cores:
        cores = set()
        for piece in args.client_cores.split(","):
            first, _, last = piece.partition("-")
            cores.update(range(int(first), int(last or first) + 1))
        os.sched_setaffinity(0, cores)  # kiln loadgen, started later, inherits it
    kiln = os.path.abspath(args.kiln)
    build = os.path.dirname(os.path.dirname(kiln))
    work = os.path.join(build, "bench", "serve_overload")
    os.makedirs(work, exist_ok=True)
    repo = make_repository(kiln, models_dir(build, work), work)
    with open(os.path.join(repo, "resnet50", "config.json"), "w") as f:
        json.dump({"max_queue_size": 16}, f)
    # The references: kiln run on each input.
    rng = np.random.default_rng(30)
    xs, refs = [], []
    for i in range(INPUTS):
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        path = os.path.join(work, f"input_{i}.npy")
        np.save(path, x)
        out = os.path.join(work, f"run_{i}")
        subprocess.run([kiln, "run", os.path.join(repo, "resnet50", "1", "model.kiln"), "--input", f"input={path}",
                        "--output-dir", out, "--threads", "1"], check=True, stdout=subprocess.DEVNULL)
        xs.append(x)
        refs.append(np.load(os.path.join(out, "logits.npy")))
    # --max-body-mb 1: the oversized bodies; enough HTTP threads for the open loop's connections.
    prefix = ("taskset", "-c", args.server_cores) if args.server_cores else ()
    server = Server(kiln, repo, args.devices, "dynamic", "--max-body-mb", "1", "--http-threads", "256", prefix=prefix)
    print(f"server: {args.devices} device(s) of 1 thread, cores {args.server_cores or 'any'}; client cores "
          f"{args.client_cores or 'any'}")
    try:
        load(kiln, server.port, ["resnet50"], 4, 2.0)  # warm-up
        capacity = load(kiln, server.port, ["resnet50"], 4, 8.0)[0]
        rate = args.factor * capacity
        rss_before = rss_kib(server.proc.pid)
        print(f"capacity (kiln loadgen, 4 closed-loop clients, 8 s): {capacity:.1f} requests/s")
        print(f"offered: {rate:.1f} requests/s for {args.duration:g} s, open loop, plus {args.malformed} malformed")
        print(f"server RSS before: {rss_before[0] / 1024:.1f} MiB (peak so far {rss_before[1] / 1024:.1f} MiB)",
              flush=True)

        client = Client(server.port)
        bodies = [binary_body(x) for x in xs]
        bad = malformed_bodies(xs[0])
        lock = threading.Lock()
        counts = {"accepted": 0, "rejected": 0, "lost": 0, "wrong": 0, "bitwise": 0, "no_retry_after": 0}
        bad_counts = {kind: {} for kind, *_ in bad}
        bad_wrong = []
        latencies = []
        max_rel = [0.0]

        def valid(i, due):
            try:
                status, headers, data = client.post(*bodies[i % INPUTS])
            except Exception as e:  # noqa: BLE001 - any failure to get an answer is a lost request
                with lock:
                    counts["lost"] += 1
                return
            latency = time.perf_counter() - due
            with lock:
                if status == 200:
                    y, ref = output_of(headers, data), refs[i % INPUTS]
                    rel = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
                    max_rel[0] = max(max_rel[0], rel)
                    if y.shape == ref.shape and rel <= 1e-5:
                        counts["accepted"] += 1
                        counts["bitwise"] += int(np.array_equal(y, ref))
                        latencies.append(latency)
                    else:
                        counts["wrong"] += 1
                elif status in (503, 429):
                    counts["rejected"] += 1
                    counts["no_retry_after"] += "Retry-After" not in headers
                else:
                    counts["lost"] += 1

        def malformed(j):
            kind, body, headers, expected = bad[j % len(bad)]
            try:
                status = client.post(body, headers)[0]
            except Exception:  # noqa: BLE001
                status = "no answer"
            with lock:
                bad_counts[kind][status] = bad_counts[kind].get(status, 0) + 1
                if status not in expected:
                    bad_wrong.append((kind, status))

        total = int(rate * args.duration)
        every = max(1, total // max(1, args.malformed))
        start = time.perf_counter()
        sent_bad = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=192) as pool:
            for k in range(total):
                due = start + k / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(valid, k, due)
                if k % every == 0 and sent_bad < args.malformed:
                    pool.submit(malformed, sent_bad)
                    sent_bad += 1
            while sent_bad < args.malformed:
                pool.submit(malformed, sent_bad)
                sent_bad += 1
            sending = time.perf_counter() - start
        elapsed = time.perf_counter() - start
        rss_after = rss_kib(server.proc.pid)
        metrics = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        metrics.request("GET", "/metrics")
        text = metrics.getresponse().read().decode()
    finally:
        server.stop()
    lat = np.array(latencies) * 1000 if latencies else np.zeros(1)
    print(f"\nsent {total} valid requests and {sent_bad} malformed in {sending:.1f} s ({total / sending:.1f} valid/s "
          f"offered); the last answered {elapsed:.1f} s after the start")
    print(f"accepted {counts['accepted']} (all checked against kiln run: {counts['bitwise']} bit for bit, max "
          f"relative difference {max_rel[0]:.2g}; {counts['accepted'] / elapsed:.1f}/s), rejected {counts['rejected']} "
          f"(503/429; {counts['no_retry_after']} without Retry-After), lost {counts['lost']}, wrong outputs "
          f"{counts['wrong']}")
    print(f"accepted latency from the scheduled send: p50 {np.percentile(lat, 50):.0f} ms, p99 "
          f"{np.percentile(lat, 99):.0f} ms, max {lat.max():.0f} ms")
    for kind, by_status in bad_counts.items():
        print(f"malformed {kind:15s} {by_status}")
    print(f"malformed answered otherwise than their 4xx: {len(bad_wrong)} {bad_wrong[:5]}")
    print(f"server RSS after: {rss_after[0] / 1024:.1f} MiB (before {rss_before[0] / 1024:.1f} MiB, "
          f"{(rss_after[0] - rss_before[0]) / 1024:+.1f} MiB; peak {rss_after[1] / 1024:.1f} MiB)")
    for line in text.splitlines():
        if line.startswith(("kiln_inference_requests_total", "kiln_inference_failures_total",
                            "kiln_inference_rejected_total", "kiln_http_responses_total",
                            "kiln_device_memory_in_use_bytes", "kiln_device_memory_peak_bytes")):
            print("  /metrics:", line)
    ok = counts["lost"] == 0 and counts["wrong"] == 0 and not bad_wrong and counts["no_retry_after"] == 0
    print("PASS" if ok else "FAIL", "(lost 0, wrong 0, every malformed request its 4xx, every 503 with Retry-After)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
