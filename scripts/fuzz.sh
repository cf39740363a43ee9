#!/usr/bin/env bash
# Runs one libFuzzer target (fuzz/<target>.cc) for SECONDS under ASan + UBSan, starting from
# its seed corpus fuzz/corpus/<target> (docs/fuzzing.md). Builds the fuzz preset (clang) first.
#
#   scripts/fuzz.sh --list               # the targets
#   scripts/fuzz.sh npy 60               # one target for 60 s
#   scripts/fuzz.sh npy 60 -jobs=2       # extra arguments go to libFuzzer
#
# New inputs go to build/fuzz/corpus/<target> (kept between runs, not in the tree); a crash
# is written to build/fuzz/artifacts/<target>/ and ends the run with a non-zero status: copy
# it to fuzz/regressions/<target>/ with the fix, so ctest -L fuzz replays it from then on.
# KILN_BUILD_LOCK=FILE serialises the build with other builds (flock FILE);
# KILN_FUZZ_PREBUILT=1 skips the build (bench/fuzz_campaign.sh builds every target first).
# fuzz/<target>.options, when there is one, gives the target's own libFuzzer options.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/fuzz-common.sh

targets() { ls fuzz/*.cc | sed 's|fuzz/||; s|\.cc$||' | grep -v '^replay_main$'; }

if [ "${1:-}" = "--list" ]; then
  targets
  exit 0
fi
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer args...] | --list" >&2
  exit 2
fi
target=$1 seconds=$2
shift 2
if ! targets | grep -qx "$target"; then
  echo "fuzz: unknown target '$target' (scripts/fuzz.sh --list)" >&2
  exit 2
fi

lock=()
[ -z "${KILN_BUILD_LOCK:-}" ] || lock=(flock "$KILN_BUILD_LOCK")
if [ -z "${KILN_FUZZ_PREBUILT:-}" ]; then
  [ -f build/fuzz/build.ninja ] || "${lock[@]}" cmake --preset fuzz >/dev/null
  "${lock[@]}" cmake --build build/fuzz --target "kiln_fuzz_$target" >/dev/null
fi

work=build/fuzz/corpus/$target artifacts=build/fuzz/artifacts/$target
mkdir -p "$work" "$artifacts"
fuzz_args "$target" "$seconds" "$artifacts"
args=("${fuzz_args[@]}")
log=build/fuzz/$target.log
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "build/fuzz/fuzz/kiln_fuzz_$target" "${args[@]}" "$@" "$work" "fuzz/corpus/$target" 2>&1 | tee "$log" |
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY|^stat::'
rc=${PIPESTATUS[0]}
set -e
done_line=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
crashes=$(ls "$artifacts" | wc -l)
echo "fuzz $target: ${seconds}s, last status: ${done_line:-none}; exit $rc; artifacts in $artifacts: $crashes"
exit "$rc"
