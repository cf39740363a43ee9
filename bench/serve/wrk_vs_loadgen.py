#!/usr/bin/python3
"""Cross-check of `kiln loadgen` against `wrk` (Debian package wrk; issue 30): the same server
(MobileNetV2, 1 device of 1 thread), the same KServe v2 binary-tensor request body, the same
number of keep-alive connections, closed loop; loadgen and wrk run one after the other, each for
the same duration. Throughputs within a few percent of each other say that loadgen's numbers
are the server's, not the client's.

With --server-cores 0 --client-cores 1 the server runs under `taskset -c 0` and both clients on
core 1.

usage: bench/serve/wrk_vs_loadgen.py [--kiln build/release/tools/kiln] [--duration 10]
                                     [--connections 4] [--server-cores LIST --client-cores LIST]
"""
import argparse
import json
import os
import re
import shutil
import subprocess

import numpy as np

from serve_bench import ROOT, Server, make_repository, models_dir


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "tools", "kiln"))
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--server-cores")
    ap.add_argument("--client-cores")
    args = ap.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    kiln = os.path.abspath(args.kiln)
    build = os.path.dirname(os.path.dirname(kiln))
    work = os.path.join(build, "bench", "serve")
    os.makedirs(work, exist_ok=True)
    repo = make_repository(kiln, models_dir(build, work), work)
    # The body loadgen sends: a JSON header asking for binary outputs, then the raw input.
    x = np.random.default_rng(30).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    header = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": list(x.shape),
                                     "parameters": {"binary_data_size": x.nbytes}}],
                         "parameters": {"binary_data_output": True}}).encode()
    body_file = os.path.join(work, "wrk_body.bin")
    with open(body_file, "wb") as f:
        f.write(header + x.tobytes())
    np.save(os.path.join(work, "wrk_input.npy"), x)
    client = ["taskset", "-c", args.client_cores] if args.client_cores else []
    server = Server(kiln, repo, 1, "dynamic", prefix=("taskset", "-c", args.server_cores) if args.server_cores else ())
    try:
        url = f"http://127.0.0.1:{server.port}"
        warm = [*client, kiln, "loadgen", url, "--model", "mobilenet_v2", "--concurrency", str(args.connections),
                "--duration", "2", "--input", f"input={os.path.join(work, 'wrk_input.npy')}"]
        subprocess.run(warm, check=True, capture_output=True)
        lg = subprocess.run([*client, kiln, "loadgen", url, "--model", "mobilenet_v2", "--concurrency",
                             str(args.connections), "--duration", str(args.duration), "--input",
                             f"input={os.path.join(work, 'wrk_input.npy')}", "--json"],
                            check=True, capture_output=True, text=True)
        r = json.loads(lg.stdout)
        w = subprocess.run([*client, "wrk", "-t1", f"-c{args.connections}", f"-d{args.duration}s", "--latency",
                            "-s", os.path.join(ROOT, "bench", "serve", "wrk_infer.lua"), url, "--",
                            "mobilenet_v2", body_file, str(len(header))], check=True, capture_output=True, text=True)
    finally:
        server.stop()
    line = next(l for l in w.stdout.splitlines() if l.startswith("wrk:"))
    wrk_rate = float(re.search(r"([\d.]+) requests/s", line).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", w.stdout)
    print(f"server: MobileNetV2, 1 device x 1 thread, cores {args.server_cores or 'any'}; clients on cores "
          f"{args.client_cores or 'any'}, {args.connections} connections, {args.duration} s each")
    print(f"kiln loadgen: {r['ok']} requests, {r['throughput_per_s']:.1f} requests/s, p50 {r['latency_ms']['p50']:.1f} ms, "
          f"p99 {r['latency_ms']['p99']:.1f} ms, failed {r['failed']}")
    print(line + f", non-2xx {non2xx.group(1) if non2xx else 0}")
    print(f"loadgen / wrk throughput: {r['throughput_per_s'] / wrk_rate:.3f}")


if __name__ == "__main__":
    main()
