#!/usr/bin/env bash
# Kiln vs ONNX Runtime side by side (issue 7): ResNet-50, MobileNetV2, BERT-base, PP-OCRv4 det and
# rec and a chain of 1000 tiny Adds, at 1 and 2 threads, alternated, with output agreement, FLOPs
# and % of this CPU's FMA peak. See bench/README.md; `bench/ort_compare.sh --help` for options.
#
# usage: bench/ort_compare.sh [--quick] [--kiln PATH] [--models a,b] [--runs N] [--threads 1,2]
# Environment: KILN_BIN (kiln binary), NODE (node binary), KILN_BENCH_PYTHON (default
# /usr/bin/python3, which needs numpy and onnx; torch too if the e2e model cache is empty).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import numpy, onnx' 2>/dev/null; then
  echo "ort_compare: python '$python' not found or lacks numpy/onnx (set KILN_BENCH_PYTHON)" >&2
  exit 1
fi
PYTHONDONTWRITEBYTECODE=1 exec "$python" "$here/ort_compare/driver.py" "$@"
