#!/usr/bin/python3
"""Soak of `kiln serve` (issue 32 part 4; bench/soak.sh is the entry point): a server with two
small models on 2 logical devices, under load for DURATION seconds, its RSS, open file
descriptors and threads sampled from /proc every window, and at the end a steady-state check.

Each window (--window seconds) runs, all at once:
  - `kiln loadgen` closed loop on each model (--clients connections in all),
  - a checking client: random inputs of random batch sizes, every output compared with NumPy
    (wrong outputs are counted, and must be 0),
  - clients that hang up mid-request (a cancelled request: the body half sent, or the
    connection closed before the answer), and malformed requests (each must get its 4xx).
A request not answered within 30 s counts as a hang (must be 0).

Injected task failures: the server runs with KILN_FAULT_INJECT (--fault-inject, default
kernel:every:500,alloc:p:0.01,copy:p:0.001,seed:32; "" for none), so some executions fail inside
the runtime. A checked request whose answer is a 5xx naming the injected fault counts as
"injected" (not wrong, not an error); the run then needs at least one, and every other
checked answer must still be right: the server keeps working after each failure.

Steady state: the samples of the first 20% of the run are the warm-up; the drift is the
median of the last third of the samples against the median of the third after the warm-up.
The run passes when RSS drifts by at most 2% (or 4 MiB, whichever is larger: a small server's
allocator moves by a few pages), file descriptors and threads by 0, wrong outputs and hangs
are 0 and every malformed request got a 4xx.

usage: bench/soak.py [--kiln build/release/tools/kiln] [--duration 600] [--window 10]
                     [--clients 4] [--fault-inject SPEC]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_repository(repo):
    """add: z = x + y, float[B, 16], max_batch_size 8; mlp: y = relu(x W + b), float[B, 64]."""
    g = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 16])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", 16])])
    rng = np.random.default_rng(0)
    w = rng.standard_normal((64, 64)).astype(np.float32) * 0.1
    b = rng.standard_normal(64).astype(np.float32) * 0.1
    m = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
                           helper.make_node("Relu", ["a"], ["y"])], "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 64])],
                          [helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.flatten()),
                           helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    for name, graph in (("add", g), ("mlp", m)):
        os.makedirs(os.path.join(repo, name, "1"))
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                  os.path.join(repo, name, "1", "model.onnx"))
        with open(os.path.join(repo, name, "config.json"), "w") as f:
            json.dump({"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_microseconds": 500}}, f)
    return {"add": lambda x, y: x + y, "mlp": lambda x: np.maximum(x @ w + b, 0)}


def proc_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {"rss_kib": int(fields["VmRSS"].split()[0]), "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {"checked": 0, "wrong": 0, "hangs": 0, "cancelled": 0, "malformed": 0, "malformed_not_4xx": 0,
                  "errors": 0, "injected": 0}

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n


def post(port, path, body, headers, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def checking_client(port, refs, until, counts, seed):
    rng = np.random.default_rng(seed)
    while time.time() < until:
        batch = int(rng.integers(1, 9))
        model = "add" if rng.random() < 0.5 else "mlp"
        if model == "add":
            ins = {"x": rng.standard_normal((batch, 16)).astype(np.float32),
                   "y": rng.standard_normal((batch, 16)).astype(np.float32)}
            want = refs["add"](ins["x"], ins["y"])
        else:
            ins = {"x": rng.standard_normal((batch, 64)).astype(np.float32)}
            want = refs["mlp"](ins["x"])
        body = json.dumps({"inputs": [{"name": k, "datatype": "FP32", "shape": list(v.shape),
                                       "data": v.flatten().tolist()} for k, v in ins.items()]})
        try:
            status, data = post(port, f"/v2/models/{model}/infer", body, {"Content-Type": "application/json"})
        except socket.timeout:
            counts.add("hangs")
            continue
        except OSError:
            counts.add("errors")
            continue
        counts.add("checked")
        if status != 200:
            counts.add("injected" if status >= 500 and b"injected fault" in data else "errors")
            continue
        out = json.loads(data)["outputs"][0]
        got = np.array(out["data"], dtype=np.float32).reshape(out["shape"])
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-4, atol=1e-5):
            counts.add("wrong")


def hostile_client(port, until, counts, seed):
    """Cancelled requests (a body half sent, or a hang-up before the answer) and malformed ones."""
    rnd = random.Random(seed)
    good = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 64], "data": [0.5] * 64}]})
    malformed = [b'{"inputs": [', b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 63], "data": []}]}',
                 b'{"inputs": [{"name": "q", "datatype": "FP32", "shape": [1, 64], "data": []}]}', b"\xff\xfe"]
    while time.time() < until:
        kind = rnd.randrange(3)
        try:
            if kind < 2:  # cancelled
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                head = (f"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {len(good)}\r\n\r\n"
                        ).encode()
                s.sendall(head + (good[:len(good) // 2].encode() if kind == 0 else good.encode()))
                time.sleep(rnd.random() * 0.01)
                s.close()
                counts.add("cancelled")
            else:
                status, _ = post(port, "/v2/models/mlp/infer", rnd.choice(malformed), {"Content-Type": "application/json"})
                counts.add("malformed")
                if not 400 <= status < 500:
                    counts.add("malformed_not_4xx")
        except socket.timeout:
            counts.add("hangs")
        except OSError:
            counts.add("errors")
        time.sleep(0.005)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build/release/tools/kiln"))
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--fault-inject", default="kernel:every:500,alloc:p:0.01,copy:p:0.001,seed:32",
                    help="KILN_FAULT_INJECT of the server ('' for none)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kiln_soak_")
    # A copy of the command: a rebuild of the tree during the run (a shared machine) would
    # otherwise replace it under the server and the load generators.
    kiln = os.path.join(work, "kiln")
    shutil.copy2(a.kiln, kiln)
    a.kiln = kiln
    refs = make_repository(os.path.join(work, "repo"))
    server = subprocess.Popen([a.kiln, "serve", "--model-repository", os.path.join(work, "repo"), "--http-port", "0",
                               "--devices", "cpu:2", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=dict(os.environ, KILN_FAULT_INJECT=a.fault_inject))
    port = None
    for line in server.stdout:
        m = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        sys.exit("soak: kiln serve did not start")
    threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()

    counts = Counts()
    samples = []
    executions = 0
    start = time.time()
    print(f"soak: kiln serve pid {server.pid}, 2 models, {a.clients} loadgen clients, {a.duration:.0f} s "
          f"in windows of {a.window:.0f} s, KILN_FAULT_INJECT={a.fault_inject or '(none)'}")
    print(f"{'t_s':>6} {'rss_mib':>8} {'fds':>4} {'threads':>7} {'loadgen_req':>11} {'checked':>7} {'wrong':>5} "
          f"{'cancelled':>9} {'malformed':>9} {'injected':>8} {'hangs':>5}")
    window = 0
    while time.time() - start < a.duration:
        until = time.time() + a.window
        gens = [subprocess.Popen([a.kiln, "loadgen", f"http://127.0.0.1:{port}", "--model", m, "--concurrency",
                                  str(max(1, a.clients // 2)), "--duration", str(a.window), "--json"],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for m in ("add", "mlp")]
        threads = [threading.Thread(target=checking_client, args=(port, refs, until, counts, window)),
                   threading.Thread(target=hostile_client, args=(port, until, counts, window))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for g in gens:
            out, _ = g.communicate(timeout=a.window + 60)
            try:
                j = json.loads(out)
                executions += int(j["ok"])
                counts.add("errors", sum(int(n) for n in j["failed"].values()))
            except (ValueError, KeyError, TypeError, AttributeError):
                counts.add("errors")
        window += 1
        s = proc_sample(server.pid)
        s["t"] = time.time() - start
        samples.append(s)
        c = counts.c
        print(f"{s['t']:6.0f} {s['rss_kib'] / 1024:8.1f} {s['fds']:4d} {s['threads']:7d} {executions:11d} "
              f"{c['checked']:7d} {c['wrong']:5d} {c['cancelled']:9d} {c['malformed']:9d} {c['injected']:8d} "
              f"{c['hangs']:5d}", flush=True)

    server.terminate()
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        counts.add("hangs")
    subprocess.run(["rm", "-rf", work])

    warm = [s for s in samples if s["t"] > 0.2 * a.duration] or samples
    third = max(1, len(warm) // 3)
    early, late = warm[:third], warm[-third:]
    med = lambda xs, k: statistics.median(x[k] for x in xs)
    rss_drift = med(late, "rss_kib") - med(early, "rss_kib")
    rss_pct = 100.0 * rss_drift / med(early, "rss_kib")
    fd_drift = med(late, "fds") - med(early, "fds")
    thr_drift = med(late, "threads") - med(early, "threads")
    c = counts.c
    ok = ((abs(rss_pct) <= 2 or abs(rss_drift) <= 4096) and fd_drift == 0 and thr_drift == 0 and c["wrong"] == 0
          and c["hangs"] == 0 and c["malformed_not_4xx"] == 0 and (c["injected"] > 0 or not a.fault_inject))
    print(f"soak: {a.duration:.0f} s, loadgen requests {executions}, checked {c['checked']}, wrong {c['wrong']}, "
          f"hangs {c['hangs']}, cancelled {c['cancelled']}, malformed {c['malformed']} "
          f"(not 4xx: {c['malformed_not_4xx']}), injected failures seen {c['injected']}, other errors {c['errors']} "
          f"(loadgen's failed requests, injected ones among them, and checked answers not 200)")
    print(f"soak: RSS drift {rss_drift / 1024:+.1f} MiB ({rss_pct:+.2f}%), fds {fd_drift:+.0f}, threads "
          f"{thr_drift:+.0f} (medians of the last third vs the third after the warm-up): "
          f"{'steady' if ok else 'NOT STEADY or errors'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
