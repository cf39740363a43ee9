"""kiln.dsl (docs/dsl.md, "The DSL in Python"): kernels written in Python, lowered, built by
the system compiler and run on NumPy arrays in place, checked against NumPy in float64; bad
input (an axis that is not the stage's, illegal schedules, wrong indices, array shapes and
dtypes that do not match) raises kiln.Error naming the mistake."""

import math

import numpy as np
import pytest

import kiln
from kiln import dsl as te

RNG = np.random.default_rng(31)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def erf(x):
    return np.vectorize(math.erf)(x)


def test_elementwise_math_with_symbolic_dims_matches_numpy():
    n = te.var("n")
    x = te.placeholder((n, 37), name="X")
    b = te.placeholder((37,), name="B")

    def body(i, j):
        v = x[i, j] + b[j]
        pos = v * 2 - 1.5 / (1 + v * v)
        neg = te.exp(v) - 1
        return (te.select(v > 0, pos, neg) + te.sqrt(te.abs(v)) * te.tanh(-v) + te.erf(v) * 0.5
                + te.log(te.abs(v) + 1) + te.max(v, 0.25) - te.min(v, -0.25) + te.sigmoid(v)
                + te.cast(j, "float32") * 0.01)

    y = te.compute((n, 37), body, name="Y")
    s = te.auto_schedule(te.create_schedule(y))
    kernel = te.build(s, [x, b, y], name="elementwise")
    assert kernel.dims == ["n"]
    for rows in (1, 5, 64):
        xa, ba = rand(rows, 37), rand(37)
        ya = np.full((rows, 37), np.nan, np.float32)
        kernel(xa, ba, ya)  # y written in place
        v = xa.astype(np.float64) + ba
        ref = (np.where(v > 0, v * 2 - 1.5 / (1 + v * v), np.exp(v) - 1) + np.sqrt(np.abs(v)) * np.tanh(-v)
               + erf(v) * 0.5 + np.log(np.abs(v) + 1) + np.maximum(v, 0.25) - np.minimum(v, -0.25)
               + 1 / (1 + np.exp(-v)) + np.arange(37) * 0.01)
        np.testing.assert_allclose(ya, ref, rtol=1e-5, atol=1e-5)


def row_softmax():
    rows, cols = te.var("rows"), te.var("cols")
    x = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis((0, cols), name="k")
    mx = te.compute((rows,), lambda i: te.max(x[i, k], axis=k), name="rowmax")
    e = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - mx[i]), name="expd")
    k2 = te.reduce_axis(cols, name="k2")
    total = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    y = te.compute((rows, cols), lambda i, j: e[i, j] / total[i], name="Y")
    return x, y


def test_row_softmax_reduction_matches_numpy():
    x, y = row_softmax()
    s = te.auto_schedule(te.create_schedule(y))
    kernel = te.build(s, [x, y], name="softmax")
    assert kernel.dims == ["rows", "cols"]
    for shape in ((1, 1), (3, 17), (12, 128)):
        xa = rand(*shape) * 4
        ya = np.empty_like(xa)
        kernel(xa, ya)
        xd = xa.astype(np.float64)
        ref = np.exp(xd - xd.max(axis=1, keepdims=True))
        ref /= ref.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(ya, ref, rtol=1e-5, atol=1e-7)


def test_layernorm_with_compute_at_schedule_matches_numpy():
    rows, cols = te.var("rows"), 96
    x = te.placeholder((rows, cols), name="X")
    gamma = te.placeholder((cols,), name="gamma")
    beta = te.placeholder((cols,), name="beta")
    k = te.reduce_axis(cols, name="k")
    total = te.compute((rows,), lambda i: te.sum(x[i, k], axis=k), name="total")
    mean = te.compute((rows,), lambda i: total[i] / cols, name="mean")
    k2 = te.reduce_axis(cols, name="k2")
    sqdev = te.compute((rows,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2), name="sqdev")
    rstd = te.compute((rows,), lambda i: 1.0 / te.sqrt(sqdev[i] / cols + 1e-5), name="rstd")
    y = te.compute((rows, cols), lambda i, j: (x[i, j] - mean[i]) * rstd[i] * gamma[j] + beta[j], name="Y")

    s = te.create_schedule(y)
    row, col = y.op.axis
    s[y].parallel(row)
    s[y].vectorize(col)
    for t in (total, mean, sqdev, rstd):
        s[t].compute_at(s[y], row)
    s[total].reduce_lanes(16)
    s[sqdev].reduce_lanes(16)
    lowered = te.lower(s, [x, gamma, beta, y], name="layernorm")
    text = str(lowered)
    # One parallel row loop holding the reductions (compute_at), the column loop vectorized.
    assert text.count("parallel for") == 1, text
    assert "vectorized for (j, 0, 96)" in text, text
    kernel = te.build(lowered)
    for n in (1, 7, 33):
        xa, ga, ba = rand(n, cols) * 3 + 1, rand(cols), rand(cols)
        ya = np.empty_like(xa)
        kernel(xa, ga, ba, ya)
        xd = xa.astype(np.float64)
        mu = xd.mean(axis=1, keepdims=True)
        ref = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * ga + ba
        np.testing.assert_allclose(ya, ref, rtol=1e-4, atol=1e-5)


def test_matmul_with_tile_reorder_unroll_and_fuse_matches_numpy():
    m, n, kk = 37, 50, 23  # tiles of 8 x 16 with tails
    a = te.placeholder((m, kk), name="A")
    b = te.placeholder((kk, n), name="B")
    k = te.reduce_axis((0, kk), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    s = te.create_schedule(c)
    i, j = c.op.axis
    assert [ax.name for ax in c.op.reduce_axis] == ["k"]
    io, jo, ii, ji = s[c].tile(i, j, 8, 16)
    s[c].reorder(io, jo, k, ii, ji)
    outer = s[c].fuse(io, jo)
    s[c].parallel(outer)
    s[c].unroll(ii)
    s[c].vectorize(ji)
    assert [ax.name for ax in s[c].leaf_iter_vars][1:] == ["k", ii.name, ji.name]
    text = str(te.lower(s, [a, b, c], name="matmul"))
    assert "parallel for" in text and "unrolled for" in text and "vectorized for" in text, text
    kernel = te.build(s, [a, b, c], name="matmul")
    aa, ba = rand(m, kk), rand(kk, n)
    ca = np.zeros((m, n), np.float32)
    kernel(aa, ba, ca)
    np.testing.assert_allclose(ca, aa.astype(np.float64) @ ba.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_matmul_tile_accumulated_with_cache_write_matches_numpy():
    n = te.var("n")
    a = te.placeholder((n, 64), name="A")
    b = te.placeholder((64, 48), name="B")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((n, 48), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    s = te.create_schedule(c)
    cl = s.cache_write(c, "local")
    io, jo, ii, ji = s[c].tile(c.op.axis[0], c.op.axis[1], 4, 16)
    s[c].parallel(io)
    s[c].vectorize(ji)
    s[cl].compute_at(s[c], jo)
    x, y = cl.op.axis
    s[cl].reorder(cl.op.reduce_axis[0], x, y)  # k outermost: the 4 x 16 tile updated in place
    s[cl].vectorize(y)
    text = str(te.lower(s, [a, b, c], name="matmul_tile"))
    assert "allocate local C.local[float32 * 64]  // [4, 16]" in text, text
    assert "= C.local[i.inner, j.inner]" in text, text
    kernel = te.build(s, [a, b, c], name="matmul_tile")
    for rows in (1, 4, 10):  # 10: a tail of 2 rows
        aa, ba = rand(rows, 64), rand(64, 48)
        ca = np.full((rows, 48), np.nan, np.float32)
        kernel(aa, ba, ca)
        np.testing.assert_allclose(ca, aa.astype(np.float64) @ ba.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_stencil_with_cache_read_of_its_input_tile_matches_numpy():
    n, m = te.var("n"), te.var("m")
    x = te.placeholder((n + 2, m + 2), name="X")
    w = te.placeholder((3, 3), name="W")
    di, dj = te.reduce_axis(3, name="di"), te.reduce_axis(3, name="dj")
    y = te.compute((n, m), lambda i, j: te.sum(x[i + di, j + dj] * w[di, dj], axis=[di, dj]), name="Y")
    s = te.create_schedule(y)
    xl = s.cache_read(x, "local", [y])
    io, jo, ii, ji = s[y].tile(y.op.axis[0], y.op.axis[1], 8, 8)
    s[y].parallel(io)
    s[xl].compute_at(s[y], jo)
    text = str(te.lower(s, [x, w, y], name="stencil"))
    assert "allocate local X.local[float32 * 100]  // [10, 10]" in text, text  # 8 x 8 outputs + the halo
    kernel = te.build(s, [x, w, y], name="stencil")
    for rows, cols in ((1, 1), (8, 8), (13, 21)):
        xa, wa = rand(rows + 2, cols + 2), rand(3, 3)
        ya = np.full((rows, cols), np.nan, np.float32)
        kernel(xa, wa, ya)
        xd, wd = xa.astype(np.float64), wa.astype(np.float64)
        want = sum(xd[a:a + rows, b:b + cols] * wd[a, b] for a in range(3) for b in range(3))
        np.testing.assert_allclose(ya, want, rtol=1e-5, atol=1e-5)


def test_cache_misuse_raises_where_it_is_written():
    x, y = simple()
    s = te.create_schedule(y)
    with pytest.raises(kiln.Error, match="cache_write\\('X'\\): a placeholder is an input"):
        s.cache_write(x, "local")
    _, other = simple()
    s = te.create_schedule(y)
    with pytest.raises(kiln.Error, match="reader 'Y' is not a compute of this schedule"):
        s.cache_read(x, "local", [other])
    s = te.create_schedule(y)
    with pytest.raises(kiln.Error, match="scope 'shared'"):
        s.cache_read(x, "shared", [y])
    with pytest.raises(kiln.Error, match="readers must be a Tensor or a list"):
        s.cache_read(x, "local", 3)
    s = te.create_schedule(y)
    s[y].parallel(y.op.axis[0])
    with pytest.raises(kiln.Error, match="'Y' is scheduled already"):
        s.cache_write(y, "local")
    s = te.create_schedule(y)
    xl = s.cache_read(x, "local", y)
    s[xl].compute_at(s[y], y.op.axis[0])  # one row of X per row of Y
    assert "allocate local X.local[float32 * 8]  // [1, 8]" in str(te.lower(s, [x, y]))


def test_split_by_nparts_and_python_custom_op_kernel():
    @te.custom_op("py.ops", "PSwishLocal", attrs={"beta": 1.0})
    def pswish(x, beta):
        return te.compute(x.shape, lambda *i: x[i] * te.sigmoid(beta * x[i]), name="Y")

    n = te.var("n")
    x = te.placeholder((n, 64), name="X")
    y = pswish(x, beta=1.5)
    s = te.create_schedule(y)
    outer, inner = s[y].split(y.op.axis[1], nparts=4)
    assert inner.extent == 16
    s[y].vectorize(inner)
    kernel = te.build(s, [x, y], name="pswish")
    xa = rand(9, 64)
    ya = np.empty_like(xa)
    kernel(xa, ya)
    xd = xa.astype(np.float64)
    np.testing.assert_allclose(ya, xd / (1 + np.exp(-1.5 * xd)), rtol=1e-5, atol=1e-6)


# ---- bad input ----------------------------------------------------------------------------

def simple():
    n = te.var("n")
    x = te.placeholder((n, 8), name="X")
    y = te.compute((n, 8), lambda i, j: x[i, j] * 2, name="Y")
    return x, y


def test_an_axis_that_is_not_the_stages_is_refused_at_the_primitive():
    x, y = simple()
    _, other = simple()
    s = te.create_schedule(y)
    with pytest.raises(kiln.Error, match=r"split\(i\) on 'Y': not one of its loops \(i, j\)"):
        s[y].split(other.op.axis[0], factor=4)
    with pytest.raises(kiln.Error, match="expected an IterVar"):
        s[y].parallel(3)


def test_illegal_schedules_are_refused_by_lower():
    n = te.var("n")
    x = te.placeholder((n, 8), name="X")
    k = te.reduce_axis(8, name="k")
    r = te.compute((n,), lambda i: te.sum(x[i, k], axis=k), name="R")
    s = te.create_schedule(r)
    s[r].parallel(k)  # every iteration updates the same element: a race
    with pytest.raises(kiln.Error, match="reduction"):
        te.lower(s, [x, r])
    s = te.create_schedule(r)
    with pytest.raises(kiln.Error, match="'X' is not a compute of this schedule"):
        s[x]
    _, y = simple()
    s = te.create_schedule(y)
    with pytest.raises(kiln.Error, match="placeholder 'X' is read by 'Y' but is not an argument"):
        te.lower(s, [y])  # the placeholder is not an argument


def test_reads_out_of_bounds_are_refused_by_lower():
    x = te.placeholder((16,), name="A")
    y = te.compute((16,), lambda i: x[i + 1], name="B")
    with pytest.raises(kiln.Error, match="out of bounds"):
        te.lower(te.create_schedule(y), [x, y])


def test_bad_expressions_raise_where_they_are_written():
    x = te.placeholder((4, 4), name="X")
    with pytest.raises(kiln.Error, match=r"'X' has 2 dim\(s\), indexed with 1 index"):
        te.compute((4,), lambda i: x[i], name="Y")
    with pytest.raises(TypeError, match="no truth value"):
        te.compute((4, 4), lambda i, j: x[i, j] if x[i, j] > 0 else 0.0, name="Y")
    with pytest.raises(ZeroDivisionError):
        te.compute((4, 4), lambda i, j: x[i, j] * (1 // 0), name="Y")  # the Python error, unchanged
    with pytest.raises(kiln.Error, match="cannot use a str"):
        te.compute((4, 4), lambda i, j: x[i, j] + "1", name="Y")
    with pytest.raises(kiln.Error, match="dim must be >= 1"):
        te.placeholder((0, 4), name="Z")
    with pytest.raises(kiln.Error, match="float32"):
        te.placeholder((4,), dtype="float16")
    with pytest.raises(kiln.Error, match="data-parallel axis"):
        te.compute((4,), lambda i: te.sum(x[i, 0], axis=te.compute((4,), lambda j: x[j, j]).op.axis[0]))


def test_arrays_that_do_not_match_the_kernel_are_refused():
    x, y = simple()
    kernel = te.build(te.auto_schedule(te.create_schedule(y)), [x, y], name="double")
    xa = rand(3, 8)
    with pytest.raises(kiln.Error, match=r"shape mismatch: argument 1 \('Y'\) is \[n, 8\], dim 0 \(n\) must be 3, "
                                         r"the array has 4"):
        kernel(xa, np.empty((4, 8), np.float32))
    with pytest.raises(kiln.Error, match=r"dim 1 \(8\) must be 8, the array has 7"):
        kernel(rand(3, 7), np.empty((3, 7), np.float32))
    with pytest.raises(kiln.Error, match="must be float32, got float64"):
        kernel(xa.astype(np.float64), np.empty((3, 8), np.float32))
    with pytest.raises(kiln.Error, match="C-contiguous"):
        kernel(rand(8, 3).T, np.empty((3, 8), np.float32))
    with pytest.raises(kiln.Error, match="expected 2 arrays"):
        kernel(xa)
    readonly = np.empty((3, 8), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(kiln.Error, match="read-only"):
        kernel(xa, readonly)
    ya = np.empty((3, 8), np.float32)
    kernel(xa, ya)  # still usable after the refusals
    np.testing.assert_allclose(ya, xa * 2)
