#!/usr/bin/env bash
# Measures opening + preparing a ResNet-50 .kiln (acceptance bar: under 50 ms).
# Builds the seeded ResNet-50 ONNX model with PyTorch if needed, compiles it, runs
# model_load_bench. usage: bench/load_bench.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
work=$build/bench/load
mkdir -p "$work"
cmake --build "$build" --target kiln model_load_bench >/dev/null
/usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models resnet50 >/dev/null
"$build/tools/kiln" compile "$work/models/resnet50/model.onnx" -o "$work/resnet50.kiln" \
  --input-shape "input:1,3,224,224" -q
"$build/bench/model_load_bench" "$work/resnet50.kiln" 20
