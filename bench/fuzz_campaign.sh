#!/usr/bin/env bash
# Issue 32's fuzz campaign: every libFuzzer target (scripts/fuzz.sh --list) under ASan +
# UBSan, one after the other, each until it has run RUNS inputs or SECONDS have passed,
# whichever comes first; then one table: target, executions, exec/s, edges (libFuzzer's
# cov), corpus size (inputs/bytes), new artifacts (crashes, leaks, timeouts, OOMs) and
# libFuzzer's exit status. docs/fuzzing.md.
#
#   bench/fuzz_campaign.sh [SECONDS [RUNS]] [TARGET...]   # defaults: 600 s, 1000000 runs
#
# Builds the targets first, in one build (KILN_BUILD_LOCK=FILE: under flock FILE;
# KILN_FUZZ_PREBUILT=1: not at all), then fuzzes each at nice 19 (a shared machine). Exits
# non-zero when a target left an artifact; the inputs are in build/fuzz/artifacts/<target>/
# (fix, then copy to fuzz/regressions/<target>/).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=600 runs=1000000
if [[ ${1:-} =~ ^[0-9]+$ ]]; then seconds=$1; shift; fi
if [[ ${1:-} =~ ^[0-9]+$ ]]; then runs=$1; shift; fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(scripts/fuzz.sh --list)

if [ -z "${KILN_FUZZ_PREBUILT:-}" ]; then
  lock=()
  [ -z "${KILN_BUILD_LOCK:-}" ] || lock=(flock "$KILN_BUILD_LOCK")
  [ -f build/fuzz/build.ninja ] || "${lock[@]}" cmake --preset fuzz >/dev/null || exit 1
  "${lock[@]}" nice -n 19 cmake --build build/fuzz --target "${targets[@]/#/kiln_fuzz_}" >/dev/null ||
    exit 1
fi

rows=() failed=0
for t in "${targets[@]}"; do
  artifacts=build/fuzz/artifacts/$t
  before=$(ls "$artifacts" 2>/dev/null | wc -l)
  start=$(date +%s)
  KILN_FUZZ_PREBUILT=1 nice -n 19 scripts/fuzz.sh "$t" "$seconds" -runs="$runs" >/dev/null 2>&1
  rc=$?
  wall=$(( $(date +%s) - start ))
  log=build/fuzz/$t.log
  after=$(ls "$artifacts" 2>/dev/null | wc -l)
  new=$((after - before))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
  rows+=("$(printf '%-22s %10s %8s %7s %12s %7s %5s %4s' "$t" "${execs:--}" "${rate:--}" \
            "${cov:--}" "${corp:--}" "${wall}s" "$new" "$rc")")
  [ "$new" -eq 0 ] && [ "$rc" -eq 0 ] || failed=1
done

echo "fuzz campaign: each target until ${runs} runs or ${seconds} s, ASan+UBSan, nice 19"
printf '%-22s %10s %8s %7s %12s %7s %5s %4s\n' target executions exec/s edges corpus wall \
  crash exit
printf '%s\n' "${rows[@]}"
exit "$failed"
