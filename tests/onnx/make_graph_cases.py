#!/usr/bin/python3
"""Writes the graph-level test cases of tests/onnx/graph_test.cc.

For each case, graph_cases/<case>/ gets:
  model.txt         the model in ONNX text syntax (checked here with onnx.checker)
  in_<name>.npy     a seeded random value for each graph input the test feeds
  out_<name>.npy    the expected value of each graph output, computed with NumPy

The expected outputs never come from Kiln: each case computes them in NumPy (float64
where it matters, then cast), or with ONNX's own NumPy reference for Resize.
Run: /usr/bin/python3 tests/onnx/make_graph_cases.py  (needs numpy and onnx)
"""

import os
import shutil

import numpy as np
import onnx
import onnx.parser
from onnx.backend.test.case.node.resize import interpolate_nd, linear_coeffs, nearest_coeffs

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "graph_cases")

CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def lit(a):
    """Formats array values as an ONNX text-syntax literal list."""
    a = np.asarray(a).ravel()
    if a.dtype.kind == "f":
        return "{" + ", ".join("%.9g" % float(v) for v in a) + "}"
    return "{" + ", ".join(str(int(v)) for v in a) + "}"


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- NumPy references ------------------------------------------------------------------

def conv2d(x, w, b, pads, strides, group):
    x = x.astype(np.float64)
    w = w.astype(np.float64)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - kw) // strides[1] + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // group
    for g in range(group):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * mg:(g + 1) * mg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
                out[:, g * mg:(g + 1) * mg] += np.einsum("nchw,mc->nmhw", patch, ws[:, :, i, j])
    out += b.astype(np.float64).reshape(1, m, 1, 1)
    return out


def softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- Cases -----------------------------------------------------------------------------

@case
def conv_relu(rng):
    x = rand(rng, 1, 4, 7, 7)
    w = rand(rng, 6, 2, 3, 3)
    b = rand(rng, 6)
    text = f"""
<ir_version: 8, opset_import: ["" : 17]>
conv_relu (float[1, 4, 7, 7] X) => (float[1, 6, 4, 4] Y)
  <float[6, 2, 3, 3] W = {lit(w)}, float[6] B = {lit(b)}>
{{
  C = Conv(X, W, B) <group = 2, kernel_shape = [3, 3], pads = [1, 1, 1, 1], strides = [2, 2]>
  Y = Relu(C)
}}
"""
    y = np.maximum(conv2d(x, w, b, [1, 1, 1, 1], [2, 2], 2), 0)
    return text, {"X": x}, {"Y": y.astype(np.float32)}


@case
def matmul_add_softmax(rng):
    x = rand(rng, 2, 4, 8)
    w = rand(rng, 8, 5)
    b = rand(rng, 5)
    # Batch is symbolic; the bias is a Constant node.
    text = f"""
<ir_version: 8, opset_import: ["" : 13]>
matmul_add_softmax (float[N, 4, 8] X) => (float[N, 4, 5] Y) <float[8, 5] W = {lit(w)}>
{{
  B = Constant() <value = float[5] {lit(b)}>
  M = MatMul(X, W)
  A = Add(M, B)
  Y = Softmax(A) <axis = -1>
}}
"""
    y = softmax(x.astype(np.float64) @ w.astype(np.float64) + b, -1)
    return text, {"X": x}, {"Y": y.astype(np.float32)}


@case
def layernorm_decomposed(rng):
    x = rand(rng, 3, 5, 16) * 3 + 1
    gamma = rand(rng, 16)
    beta = rand(rng, 16)
    eps = 1e-5
    text = f"""
<ir_version: 8, opset_import: ["" : 13]>
layernorm_decomposed (float[3, 5, 16] X) => (float[3, 5, 16] Y)
  <float[16] gamma = {lit(gamma)}, float[16] beta = {lit(beta)}, float[1] eps = {lit([eps])}>
{{
  mean = ReduceMean(X) <axes = [-1], keepdims = 1>
  d = Sub(X, mean)
  two = Constant() <value_float = 2.0>
  sq = Pow(d, two)
  var = ReduceMean(sq) <axes = [-1], keepdims = 1>
  ve = Add(var, eps)
  sd = Sqrt(ve)
  n = Div(d, sd)
  g = Mul(n, gamma)
  Y = Add(g, beta)
}}
"""
    x64 = x.astype(np.float64)
    mu = x64.mean(-1, keepdims=True)
    var = ((x64 - mu) ** 2).mean(-1, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + np.float64(np.float32(eps))) * gamma + beta
    return text, {"X": x}, {"Y": y.astype(np.float32)}


@case
def gather_concat_reshape(rng):
    data = rand(rng, 5, 4)
    other = rand(rng, 2, 4)
    idx = np.array([4, -1, 0], dtype=np.int64)
    text = f"""
<ir_version: 8, opset_import: ["" : 14]>
gather_concat_reshape (float[5, 4] D, float[2, 4] O) => (float[2, 10] Y, int64[2] S)
  <int64[3] idx = {lit(idx)}, int64[2] shape = {lit([-1, 10])}>
{{
  G = Gather(D, idx) <axis = 0>
  C = Concat(G, O) <axis = 0>
  Y = Reshape(C, shape)
  S = Shape(Y)
}}
"""
    g = data[np.where(idx < 0, idx + 5, idx)]
    c = np.concatenate([g, other], axis=0)
    y = c.reshape(-1, 10)
    return text, {"D": data, "O": other}, {"Y": y, "S": np.array(y.shape, dtype=np.int64)}


@case
def resize_nearest(rng):
    x = rand(rng, 1, 2, 3, 4)
    scales = np.array([1, 1, 2, 1.5], dtype=np.float32)
    text = f"""
<ir_version: 8, opset_import: ["" : 13]>
resize_nearest (float[1, 2, 3, 4] X) => (float[1, 2, 6, 6] Y) <float[4] scales = {lit(scales)}>
{{
  Y = Resize(X, , scales) <mode = "nearest", coordinate_transformation_mode = "half_pixel",
                           nearest_mode = "round_prefer_floor">
}}
"""
    y = interpolate_nd(x, lambda r: nearest_coeffs(r, mode="round_prefer_floor"), scale_factors=scales,
                       coordinate_transformation_mode="half_pixel")
    return text, {"X": x}, {"Y": y.astype(np.float32)}


@case
def resize_linear(rng):
    x = rand(rng, 1, 1, 4, 5)
    sizes = np.array([1, 1, 7, 3], dtype=np.int64)
    text = f"""
<ir_version: 8, opset_import: ["" : 13]>
resize_linear (float[1, 1, 4, 5] X) => (float[1, 1, 7, 3] Y) <int64[4] sizes = {lit(sizes)}>
{{
  Y = Resize(X, , , sizes) <mode = "linear", coordinate_transformation_mode = "align_corners">
}}
"""
    y = interpolate_nd(x, linear_coeffs, output_size=sizes, coordinate_transformation_mode="align_corners")
    return text, {"X": x}, {"Y": y.astype(np.float32)}


@case
def loop_accumulate(rng):
    x = rand(rng, 3)
    trips = 4
    # v_{k+1} = v_k + X (X read from the enclosing graph); scan output k = v_{k+1} * k.
    text = f"""
<ir_version: 8, opset_import: ["" : 13]>
loop_accumulate (float[3] X) => (float[3] V, float[{trips}, 3] S)
{{
  M = Constant() <value_int = {trips}>
  zero = Constant() <value_int = 0>
  C = Greater(M, zero)
  V0 = Constant() <value = float[3] {{0.0, 0.0, 0.0}}>
  V, S = Loop(M, C, V0) <body = loop_body (int64 i, bool cond_in, float[3] v_in)
                                       => (bool cond_out, float[3] v_out, float[3] s_out) {{
    cond_out = Identity(cond_in)
    v_out = Add(v_in, X)
    fi = Cast(i) <to = 1>
    s_out = Mul(v_out, fi)
  }}>
}}
"""
    v = np.zeros(3, np.float64)
    scans = []
    for k in range(trips):
        v = v + x
        scans.append(v * k)
    return text, {"X": x}, {"V": v.astype(np.float32), "S": np.stack(scans).astype(np.float32)}


@case
def if_branches(rng):
    x = rand(rng, 2, 3)
    y = rand(rng, 2, 3)
    # The condition depends on the data; both branches read outer-scope values.
    text = """
<ir_version: 8, opset_import: ["" : 13]>
if_branches (float[2, 3] X, float[2, 3] Y) => (float[2, 3] Z)
{
  s = ReduceSum(X) <keepdims = 0>
  t = ReduceSum(Y) <keepdims = 0>
  c = Greater(s, t)
  Z = If(c) <
    then_branch = then_g () => (float[2, 3] a) { a = Mul(X, Y) },
    else_branch = else_g () => (float[2, 3] b) { b = Sub(X, Y) }
  >
}
"""
    z = x.astype(np.float64) * y if x.astype(np.float64).sum() > y.astype(np.float64).sum() else x - y
    return text, {"X": x, "Y": y}, {"Z": np.asarray(z).astype(np.float32)}


def main():
    if os.path.isdir(OUT_DIR):
        shutil.rmtree(OUT_DIR)
    for i, fn in enumerate(CASES):
        rng = np.random.default_rng(1000 + i)
        text, inputs, outputs = fn(rng)
        model = onnx.parser.parse_model(text)
        onnx.checker.check_model(model, full_check=True)
        declared = [o.name for o in model.graph.output]
        assert declared == list(outputs), (fn.__name__, declared, list(outputs))
        d = os.path.join(OUT_DIR, fn.__name__)
        os.makedirs(d)
        with open(os.path.join(d, "model.txt"), "w") as f:
            f.write(text.lstrip())
        for name, v in inputs.items():
            np.save(os.path.join(d, "in_%s.npy" % name), v)
        for name, v in outputs.items():
            np.save(os.path.join(d, "out_%s.npy" % name), v)
        print("%-24s inputs %s outputs %s" % (fn.__name__, {k: v.shape for k, v in inputs.items()},
                                              {k: v.shape for k, v in outputs.items()}))


if __name__ == "__main__":
    main()
