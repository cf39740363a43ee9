#!/usr/bin/python3
"""kiln.dsl kernels called from Python against NumPy doing the same work, side by side.

Usage: PYTHONPATH=build/release/python bench/python/dsl_call.py [--rounds N] [--calls N]

Per case, in alternated rounds (median over --rounds of each round's fastest of --calls
calls): the DSL kernel written in Python with Kiln's default schedule (auto_schedule), called
on NumPy arrays in place, and NumPy's expression of the same operator (float32, `out=` where
NumPy has it). The tiny case ([1, 16] element-wise add) is the cost of a call through the
binding (argument checks, binding the dims, releasing the GIL) against a NumPy ufunc call.
Outputs are checked against each other first. Print the load next to the figures: the machine
is shared.
"""

import argparse
import os
import statistics
import time

import numpy as np

from kiln import dsl as te


def add_kernel():
    n, m = te.var("n"), te.var("m")
    x = te.placeholder((n, m), name="X")
    y = te.placeholder((n, m), name="B")
    z = te.compute((n, m), lambda i, j: x[i, j] + y[i, j], name="Y")
    return te.build(te.auto_schedule(te.create_schedule(z)), [x, y, z], name="add")


def softmax_kernel():
    rows, cols = te.var("rows"), te.var("cols")
    x = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis(cols, name="k")
    mx = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="rowmax")
    e = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - mx[i]), name="expd")
    k2 = te.reduce_axis(cols, name="k2")
    total = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    y = te.compute((rows, cols), lambda i, j: e[i, j] / total[i], name="Y")
    return te.build(te.auto_schedule(te.create_schedule(y)), [x, y], name="softmax")


def layernorm_kernel():
    rows, cols = te.var("rows"), te.var("cols")
    x = te.placeholder((rows, cols), name="X")
    gamma = te.placeholder((cols,), name="gamma")
    beta = te.placeholder((cols,), name="beta")
    k = te.reduce_axis(cols, name="k")
    total = te.compute((rows,), lambda i: te.sum(x[i, k], axis=k), name="total")  # a reduction is a whole body
    mean = te.compute((rows,), lambda i: total[i] / te.cast(cols, "float32"), name="mean")
    k2 = te.reduce_axis(cols, name="k2")
    sqdev = te.compute((rows,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2), name="sqdev")
    y = te.compute((rows, cols), lambda i, j: (x[i, j] - mean[i]) / te.sqrt(sqdev[i] / te.cast(cols, "float32") + 1e-5)
                   * gamma[j] + beta[j], name="Y")
    return te.build(te.auto_schedule(te.create_schedule(y)), [x, gamma, beta, y], name="layernorm")


def numpy_softmax(x, out):
    np.subtract(x, x.max(axis=1, keepdims=True), out=out)
    np.exp(out, out=out)
    out /= out.sum(axis=1, keepdims=True)


def numpy_layernorm(x, gamma, beta, out):
    mean = x.mean(axis=1, keepdims=True)
    np.subtract(x, mean, out=out)
    var = np.mean(out * out, axis=1, keepdims=True)
    out /= np.sqrt(var + 1e-5)
    out *= gamma
    out += beta


def fastest(fn, calls):
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    add, softmax, layernorm = add_kernel(), softmax_kernel(), layernorm_kernel()

    cases = []
    a, b = rng.standard_normal((1, 16), np.float32), rng.standard_normal((1, 16), np.float32)
    za, zn = np.empty_like(a), np.empty_like(a)
    cases.append(("add [1, 16] (call cost)", lambda: add(a, b, za), lambda: np.add(a, b, out=zn), za, zn))
    x = rng.standard_normal((1536, 128), np.float32)
    sa, sn = np.empty_like(x), np.empty_like(x)
    cases.append(("softmax [1536, 128]", lambda: softmax(x, sa), lambda: numpy_softmax(x, sn), sa, sn))
    xl = rng.standard_normal((128, 768), np.float32)
    g, bt = rng.standard_normal(768, np.float32), rng.standard_normal(768, np.float32)
    la, ln = np.empty_like(xl), np.empty_like(xl)
    cases.append(("layernorm [128, 768]", lambda: layernorm(xl, g, bt, la), lambda: numpy_layernorm(xl, g, bt, ln),
                  la, ln))

    print(f"load average at start: {os.getloadavg()}")
    for name, dsl_call, numpy_call, dsl_out, numpy_out in cases:
        dsl_call()
        numpy_call()
        np.testing.assert_allclose(dsl_out, numpy_out, rtol=1e-4, atol=1e-5)
        dsl_times, numpy_times = [], []
        for _ in range(args.rounds):
            dsl_times.append(fastest(dsl_call, args.calls))
            numpy_times.append(fastest(numpy_call, args.calls))
        d, n = statistics.median(dsl_times), statistics.median(numpy_times)
        print(f"{name:26s} kiln.dsl {d:10.2f} us   numpy {n:10.2f} us   dsl/numpy {d / n:6.2f}x")
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
