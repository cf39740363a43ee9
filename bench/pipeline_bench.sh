#!/usr/bin/env bash
# MobileNetV2 throughput with 2 streams pipelining (H2D copy of batch i+1 overlapping the
# execute of batch i) vs one synchronous loop (memcpy, execute, memcpy). Builds the seeded
# MobileNetV2 ONNX model with PyTorch if needed, compiles it, runs pipeline_bench.
# usage: bench/pipeline_bench.sh [BUILD_DIR] [BATCHES] [WARMUP]   (default build/release 100 5)
# Run it on an otherwise idle machine: when other processes compete for the cores, OpenMP's
# spin-waiting (libgomp spins only while it has no more threads than cores) makes the
# numbers swing by several times; OMP_WAIT_POLICY=passive steadies them.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
work=$build/bench/pipeline
mkdir -p "$work"
cmake --build "$build" --target kiln pipeline_bench >/dev/null
/usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models mobilenet_v2 >/dev/null
"$build/tools/kiln" compile "$work/models/mobilenet_v2/model.onnx" -o "$work/mobilenet_v2.kiln" -q
"$build/bench/pipeline_bench" "$work/mobilenet_v2.kiln" "${2:-100}" "${3:-5}"
