#!/usr/bin/env bash
# ResNet-50 with profiling on vs off (issue 6: on must cost at most 3%): builds the seeded
# ResNet-50 ONNX model with PyTorch if the e2e tests have not, compiles it for batch 1 and
# runs profiler_overhead (alternated rounds, medians, ratio).
# usage: bench/profiler_overhead.sh [BUILD_DIR] [ROUNDS] [LOOPS]   (default build/release 10 5)
# Run it on an otherwise idle machine: other processes on the cores swing the medians more
# than the profiler does.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
work=$build/bench/profiler
mkdir -p "$work"
cmake --build "$build" --target kiln profiler_overhead >/dev/null
onnx=$build/e2e/models/resnet50/model.onnx
if [ ! -f "$onnx" ]; then
  /usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models resnet50 >/dev/null
  onnx=$work/models/resnet50/model.onnx
fi
"$build/tools/kiln" compile "$onnx" --input-shape "input:1,3,224,224" -o "$work/resnet50.kiln" -q
"$build/bench/profiler_overhead" "$work/resnet50.kiln" "${2:-10}" "${3:-5}"
