#!/usr/bin/env bash
# Builds Kiln (release) and runs every test: unit, graph-level and end-to-end against
# PyTorch and ONNX Runtime references. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release -j "$(nproc)" --timeout 1200 "$@"
