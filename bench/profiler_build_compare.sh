#!/usr/bin/env bash
# Issue 6's second overhead figure: with profiling off, does a Kiln with the profiler's hooks
# run as fast as a Kiln built without them (-DKILN_PROFILER=OFF)? Builds the second tree if
# needed, then alternates `kiln bench` of ResNet-50 between the two binaries (ROUNDS rounds,
# the order swapped every round) and prints the median latency of each and their ratio.
# usage: bench/profiler_build_compare.sh [BUILD_DIR] [NOPROF_BUILD_DIR] [ROUNDS]
#        (defaults build/release build/noprof 10)
# Run it on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
noprof=${2:-build/noprof}
rounds=${3:-10}
work=$build/bench/profiler
mkdir -p "$work"
cmake --build "$build" --target kiln >/dev/null
if [ ! -f "$noprof/build.ninja" ]; then
  cmake -S . -B "$noprof" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_PROFILER=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-march=native >/dev/null
fi
cmake --build "$noprof" --target kiln >/dev/null
onnx=$build/e2e/models/resnet50/model.onnx
if [ ! -f "$onnx" ]; then
  /usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models resnet50 >/dev/null
  onnx=$work/models/resnet50/model.onnx
fi
"$build/tools/kiln" compile "$onnx" --input-shape "input:1,3,224,224" -o "$work/resnet50.kiln" -q
bench() { "$1/tools/kiln" bench "$work/resnet50.kiln" --loops 10 --depth 1 --json; }
with=()
without=()
for ((i = 0; i < rounds; i++)); do
  if ((i % 2 == 0)); then
    with+=("$(bench "$build")")
    without+=("$(bench "$noprof")")
  else
    without+=("$(bench "$noprof")")
    with+=("$(bench "$build")")
  fi
done
/usr/bin/python3 - "${#with[@]}" "${with[@]}" "${without[@]}" <<'PY'
import json, statistics, sys
n = int(sys.argv[1])
p50 = lambda runs: [json.loads(r)["latency_ms"]["p50"] for r in runs]
on, off = p50(sys.argv[2:2 + n]), p50(sys.argv[2 + n:])
a, b = statistics.median(on), statistics.median(off)
print(f"with profiler hooks (profiling off)  median p50 {a:8.2f} ms  (rounds: {' '.join(f'{x:.1f}' for x in on)})")
print(f"built without the profiler           median p50 {b:8.2f} ms  (rounds: {' '.join(f'{x:.1f}' for x in off)})")
print(f"ratio hooks/no-hooks {a / b:.4f}  ({(a / b - 1) * 100:+.2f}%)")
PY
