#!/usr/bin/env bash
# Builds the C API tests (ctest label "api": tests/api/*_test.cc) under ThreadSanitizer and
# under AddressSanitizer + UndefinedBehaviorSanitizer (CMake presets tsan and asan) and runs
# them. Only the api test binaries and the libraries they link are built.
#
#   scripts/test-sanitizers.sh            # both presets
#   scripts/test-sanitizers.sh tsan       # one of them
#
# KILN_BUILD_LOCK=FILE serialises the builds with other builds on a shared machine
# (flock FILE). Under TSan KILN_NUM_THREADS=1 (set by the test preset) keeps OpenMP, which
# libgomp does without TSan instrumentation, out of the picture; both presets shorten the
# stress test (KILN_STRESS_SECONDS).
set -euo pipefail
cd "$(dirname "$0")/.."

presets=("$@")
[ ${#presets[@]} -gt 0 ] || presets=(tsan asan)
lock=()
[ -z "${KILN_BUILD_LOCK:-}" ] || lock=(flock "$KILN_BUILD_LOCK")

for preset in "${presets[@]}"; do
  case "$preset" in
    tsan | asan) ;;
    *) echo "test-sanitizers: unknown preset '$preset' (tsan or asan)" >&2; exit 2 ;;
  esac
  t0=$(date +%s)
  "${lock[@]}" cmake --preset "$preset" >/dev/null
  # The api test executables are the targets named api_*_test.
  mapfile -t targets < <(ninja -C "build/$preset" -t targets all |
                         sed -n 's/^\(api_[A-Za-z0-9_]*_test\): phony$/\1/p' | sort -u)
  if [ ${#targets[@]} -eq 0 ]; then
    echo "test-sanitizers: no api test targets in build/$preset" >&2
    exit 1
  fi
  echo "test-sanitizers: [$preset] building ${targets[*]}"
  "${lock[@]}" cmake --build --preset "$preset" --target "${targets[@]}"
  t1=$(date +%s)
  ctest --preset "$preset" -j 2 --timeout 1200
  t2=$(date +%s)
  echo "test-sanitizers: [$preset] build $((t1 - t0)) s, tests $((t2 - t1)) s"
done
