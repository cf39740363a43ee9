#!/usr/bin/python3
"""Dynamic int8 quantisation of a model's constant-weight MatMuls, written as ONNX Runtime's
`quantize_dynamic` writes it (issue 28's BERT bench input).

Each MatMul(x, W) whose W is a float32 2-D initializer, or a Transpose of one (PyTorch's
Linear exports x @ W^T), becomes

    x -> DynamicQuantizeLinear -> (x_q uint8, x_scale, x_zero_point)
    MatMulInteger(x_q, W_q, x_zero_point, W_zero_point) -> int32
    Cast(to float) -> Mul(., Mul(x_scale, W_scale)) -> the MatMul's output

with W_q int8 symmetric (ORT's default for int8 weights: zero point 0, scale max|W| / 127)
per tensor, or per column of W [K, N] with --per-channel. Other nodes (the bias Add, Gemm,
attention's activation x activation MatMuls) stay float, as in ORT's output.

usage: quantize_dynamic.py IN.onnx OUT.onnx [--per-channel]
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def quantize_weight(w, per_channel):
    # round half to even, as ORT's quantiser (numpy.rint) does
    amax = np.abs(w).max(axis=0) if per_channel else np.abs(w).max()
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    zp = np.zeros(scale.shape, np.int8)
    return q, scale, zp


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--per-channel", action="store_true")
    a = p.parse_args()
    m = onnx.load(a.input)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def constant_weight(name):
        if name in inits:
            return numpy_helper.to_array(inits[name])
        n = producer.get(name)
        if n is not None and n.op_type == "Transpose" and n.input[0] in inits:
            perm = [at.ints for at in n.attribute if at.name == "perm"]
            w = numpy_helper.to_array(inits[n.input[0]])
            return np.transpose(w, perm[0] if perm else None)
        return None

    new_nodes, new_inits, count = [], [], 0
    for n in g.node:
        w = constant_weight(n.input[1]) if n.op_type == "MatMul" else None
        if w is None or w.ndim != 2 or w.dtype != np.float32:
            new_nodes.append(n)
            continue
        base = n.name or n.output[0]
        q, scale, zp = quantize_weight(w, a.per_channel)
        names = {k: f"{base}_{k}" for k in ("W_quantized", "W_scale", "W_zero_point", "x_q", "x_scale",
                                            "x_zero_point", "int32", "float", "scales_mul")}
        new_inits += [numpy_helper.from_array(q, names["W_quantized"]),
                      numpy_helper.from_array(scale, names["W_scale"]),
                      numpy_helper.from_array(zp, names["W_zero_point"])]
        new_nodes += [
            helper.make_node("DynamicQuantizeLinear", [n.input[0]],
                             [names["x_q"], names["x_scale"], names["x_zero_point"]], base + "_QuantizeLinear"),
            helper.make_node("MatMulInteger", [names["x_q"], names["W_quantized"], names["x_zero_point"],
                                               names["W_zero_point"]], [names["int32"]], base + "_MatMulInteger"),
            helper.make_node("Cast", [names["int32"]], [names["float"]], base + "_cast", to=TensorProto.FLOAT),
            helper.make_node("Mul", [names["x_scale"], names["W_scale"]], [names["scales_mul"]],
                             base + "_scales_mul"),
            helper.make_node("Mul", [names["float"], names["scales_mul"]], [n.output[0]], base + "_output_mul"),
        ]
        count += 1
    del g.node[:]
    g.node.extend(new_nodes)
    g.initializer.extend(new_inits)
    # Transposes and weights now unread go (ORT's output keeps only the quantised weights).
    used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    while True:
        dead = [n for n in g.node if not any(o in used for o in n.output)]
        if not dead:
            break
        for n in dead:
            g.node.remove(n)
        used = {i for n in g.node for i in n.input} | {o.name for o in g.output}
    keep = [i for i in g.initializer if i.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    onnx.checker.check_model(m)
    onnx.save(m, a.output)
    print(f"{a.output}: {count} MatMuls quantised dynamically "
          f"({'per column' if a.per_channel else 'per tensor'} int8 weights)")


if __name__ == "__main__":
    main()
