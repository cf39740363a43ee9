#!/usr/bin/python3
"""Which side of a Kiln ~ ONNX Runtime gap is off: both against a float64 reference.

bench/dynamic_shapes.sh checks max|Kiln - ORT| <= 1e-4 * max|ORT|. When a cell misses it, that
distance alone does not say whose fp32 result drifted. This script makes a float64 copy of the
ONNX model (float initializers, value types, Constant tensors and Cast targets), compiles it with
`kiln compile -O 0` at the input's shape (no fusion, no layout change: Kiln's plain float64
kernels, a summation order and precision neither fp32 engine shares), runs it on the same input
and prints each given output folder's distance to it, in the bench's metric.

usage: f64_reference.py MODEL.onnx INPUT_DIR OUT_DIR [LABEL=OUTPUT_DIR ...]
  INPUT_DIR   the bench's input set (input_<name>.npy files), e.g.
              BUILD/dynamic_shapes/ocr_det/inputs/1280x736
  LABEL=DIR   an output folder as the bench saves them (<output>.npy), e.g.
              kiln=BUILD/dynamic_shapes/ocr_det/outputs/1280x736_t1_dyn
Environment: KILN_BIN (default build/release/tools/kiln).
"""

import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def to_float64(model):
    def fix(t):
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))

    g = model.graph
    for t in g.initializer:
        fix(t)
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
            vi.type.tensor_type.elem_type = TensorProto.DOUBLE
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                fix(a.t)
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    return model


def distance(a, ref):
    a, ref = a.astype(np.float64), ref.astype(np.float64)
    scale = np.max(np.abs(ref))
    return np.max(np.abs(a - ref)) / scale if scale > 0 else float(np.max(np.abs(a - ref)))


def main(argv):
    if len(argv) < 3 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 2 if len(argv) < 3 else 0
    model_path, input_dir, out = argv[0], argv[1], argv[2]
    kiln = os.environ.get("KILN_BIN", os.path.join(SRC, "build", "release", "tools", "kiln"))
    os.makedirs(out, exist_ok=True)
    inputs, shapes = [], []
    for f in sorted(os.listdir(input_dir)):
        if f.startswith("input_") and f.endswith(".npy"):
            name = f[len("input_"):-len(".npy")]
            x = np.load(os.path.join(input_dir, f))
            if x.dtype == np.float32:
                x = x.astype(np.float64)
            path = os.path.join(out, f"{name}.npy")
            np.save(path, x)
            inputs += ["--input", f"{name}={path}"]
            shapes.append(f"{name}:{','.join(str(d) for d in x.shape)}")
    if not inputs:
        print(f"f64_reference: no input_<name>.npy in {input_dir}", file=sys.stderr)
        return 1
    f64 = os.path.join(out, "model_f64.onnx")
    onnx.save(to_float64(onnx.load(model_path)), f64)
    compiled = os.path.join(out, "model_f64.kiln")
    subprocess.run([kiln, "compile", "-O", "0", f64, "--input-shape", ";".join(shapes), "-o", compiled],
                   check=True, stdout=subprocess.DEVNULL)
    ref_dir = os.path.join(out, "outputs")
    subprocess.run([kiln, "run", compiled, *inputs, "--warmup", "0", "--output-dir", ref_dir],
                   check=True, stdout=subprocess.DEVNULL)
    refs = {f[:-4]: np.load(os.path.join(ref_dir, f)) for f in os.listdir(ref_dir) if f.endswith(".npy")}
    print(f"float64 reference: {os.path.basename(model_path)} at {' '.join(shapes)} "
          f"(kiln compile -O 0, float64)")
    print("| engine | output | max|engine - f64| / max|f64| |")
    print("|---|---|---|")
    for arg in argv[3:]:
        label, _, folder = arg.partition("=")
        for name, ref in sorted(refs.items()):
            path = os.path.join(folder, f"{name}.npy")
            if os.path.exists(path):
                print(f"| {label} | {name} | {distance(np.load(path), ref):.1e} |")
            else:
                print(f"| {label} | {name} | (no {name}.npy in {folder}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
