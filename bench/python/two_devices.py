#!/usr/bin/python3
"""Throughput of Python threads each running a model on its own logical device.

Usage: PYTHONPATH=build/release/python bench/python/two_devices.py MODEL.onnx|.kiln [--runs N]

Re-executes itself with KILN_DEVICES=cpu:2 (read when Kiln initializes) unless set, loads
the model once per device, and prints inferences per second with one thread on device 0
and with two threads, one per device, and the ratio (issue 27: >= 1.8x for MobileNetV2).
Inputs are random, of the model's shapes (open dims: 1).
"""

import argparse
import os
import sys
import threading
import time

import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    if "KILN_DEVICES" not in os.environ:
        os.environ["KILN_DEVICES"] = "cpu:2"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import kiln

    sessions = [kiln.InferenceSession(args.model, device=d) for d in (0, 1)]
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(i.dtype)
            for i in sessions[0].get_inputs()}

    def work(sess, n):
        for _ in range(n):
            sess.run(None, feed)

    for s in sessions:
        work(s, 3)
    t = time.perf_counter()
    work(sessions[0], args.runs)
    one = args.runs / (time.perf_counter() - t)
    threads = [threading.Thread(target=work, args=(s, args.runs)) for s in sessions]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    two = 2 * args.runs / (time.perf_counter() - t)
    print(f"{os.environ['KILN_DEVICES']}: 1 thread {one:.1f}/s, 2 threads on 2 devices {two:.1f}/s: {two / one:.2f}x")


if __name__ == "__main__":
    main()
