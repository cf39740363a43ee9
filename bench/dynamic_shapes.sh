#!/usr/bin/env bash
# Dynamic shapes at full speed, measured (issue 24's acceptance): each model compiled without
# --input-shape against the same model compiled at each shape and ONNX Runtime on the dynamic
# ONNX file, alternated, at 1 and 2 threads, with output agreement; then a mixed-shape loop on
# PP-OCRv4 rec. See bench/README.md; `bench/dynamic_shapes.sh --help` for options.
#
# usage: bench/dynamic_shapes.sh [--quick] [--models a,b] [--shapes k1,k2] [--runs N]
#                                [--threads 1,2] [--mixed-runs N] [--kiln PATH] [--check]
# Environment: KILN_BIN (kiln binary), NODE (node binary), KILN_BENCH_PYTHON (default
# /usr/bin/python3, which needs numpy and onnx; torch and torchvision for BERT and ResNet-50).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import numpy, onnx' 2>/dev/null; then
  echo "dynamic_shapes: python '$python' not found or lacks numpy/onnx (set KILN_BENCH_PYTHON)" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$python" "$here/dynamic/driver.py" "$@"
