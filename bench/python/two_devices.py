#!/usr/bin/python3
"""Throughput of Python threads each running a model on its own logical device.

Usage: PYTHONPATH=build/release/python bench/python/two_devices.py MODEL.onnx|.kiln [--runs N]
           [--threads N]

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
    parser.add_argument("--threads", type=int, help="intra-op threads per device (default: its cores)")
    args = parser.parse_args()
    if "KILN_DEVICES" not in os.environ:
        os.environ["KILN_DEVICES"] = "cpu:2"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    import kiln

    # threads: by default each device's share of the cores, which the runtime gives it.
    sessions = [kiln.InferenceSession(args.model, device=d, threads=args.threads) for d in (0, 1)]
    rng = np.random.default_rng(0)
    feed = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(i.dtype)
            for i in sessions[0].get_inputs()}

    def throughput(active):
        # Each session runs on a thread of its own, warmed up there first: Kiln binds a
        # thread to the device it runs on, so one thread alternating devices would measure
        # that instead.
        ready = threading.Barrier(len(active) + 1)

        def work(sess):
            for _ in range(3):
                sess.run(None, feed)
            ready.wait()
            for _ in range(args.runs):
                sess.run(None, feed)

        threads = [threading.Thread(target=work, args=(s,)) for s in active]
        for th in threads:
            th.start()
        ready.wait()
        t = time.perf_counter()
        for th in threads:
            th.join()
        return len(active) * args.runs / (time.perf_counter() - t)

    one = throughput(sessions[:1])
    two = throughput(sessions)
    print(f"{os.environ['KILN_DEVICES']}: 1 thread {one:.1f}/s, 2 threads on 2 devices {two:.1f}/s: {two / one:.2f}x")


if __name__ == "__main__":
    main()
