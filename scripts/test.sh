#!/usr/bin/env bash
# Builds Kiln (release) and runs every test: unit, graph-level and end-to-end against
# PyTorch and ONNX Runtime references. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
# ctest starts the longest tests first when it knows their times (Testing/Temporary/
# CTestCostData.txt, rewritten by every run); a clean clone has none and starts them in
# the order they are declared, so e2e.bert (about 90 s) could start last and run alone.
# tests/ctest_cost_seed.txt holds the times of the tests of 5 s or more from a clean-clone
# run, read only where the build has no times of its own.
costs=build/release/Testing/Temporary/CTestCostData.txt
if [ ! -f "$costs" ]; then
  mkdir -p "$(dirname "$costs")"
  cp tests/ctest_cost_seed.txt "$costs"
fi
ctest --preset release -j "$(nproc)" --timeout 1200 "$@"
