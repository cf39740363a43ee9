#!/usr/bin/env bash
# CI's fuzz smoke: every libFuzzer target (fuzz/<target>.cc) fuzzed briefly, SECONDS each
# (default 10), from its seeds and regression inputs, without the fuzz preset's full
# instrumented build (docs/fuzzing.md "The smoke in CI").
#
#   scripts/fuzz-smoke.sh [SECONDS [TARGET...]]
#
# It takes the release tree's own build of each target's replay binary (build/release,
# after scripts/test.sh) and makes it a fuzzer: the target's file, the sources compiled into
# it and the library sources listed in `focus` below are compiled again by clang-14 with
# ASan + UBSan + libFuzzer's coverage (so the fuzzer is guided by, and the sanitizers check,
# the code each target is about), and linked against the release tree's other objects and
# libraries as they are (g++-built: the same C++ ABI). The full campaign, with every library
# instrumented, is bench/fuzz_campaign.sh. New inputs go to build/fuzz-smoke/<target>/corpus
# (the tree's corpora are only read); a crash leaves its input in
# build/fuzz-smoke/<target>/artifacts/ and makes the script exit non-zero, after the others
# have run. Needs clang-14 and libclang-rt-14-dev (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/fuzz-common.sh

seconds=${1:-10}
shift || true
release=build/release
out=build/fuzz-smoke
cxx=${KILN_FUZZ_CXX:-clang++-14}
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz-smoke: $cxx not found (scripts/install-deps.sh installs clang-14)" >&2
  exit 2
fi
[ -f "$release/build.ninja" ] || { echo "fuzz-smoke: build $release first (scripts/test.sh)" >&2; exit 2; }

# Library sources instrumented beside each target's own (the code its bytes reach first;
# none of them is in an archive the target links whole).
declare -A focus=(
  [npy]="src/core/npy.cc"
  [aipp_config]="src/preprocess/aipp_config.cc"
  [fusion_switch]="src/compiler/pass_manager.cc"
  [kiln_init_config]="src/runtime/device.cc"
  [onnx_import]="src/frontend/onnx/onnx_importer.cc src/frontend/onnx/tensor_proto.cc
                 src/frontend/onnx/value_proto.cc src/frontend/onnx/function_inliner.cc"
  [kiln_load]="src/model/model_reader.cc src/model/arena_plan.cc"
  [kiln_load_checksum]="src/model/model_reader.cc src/model/arena_plan.cc"
  [comm_wire]="src/comm/bootstrap.cc src/comm/tcp_transport.cc src/comm/tcp_status_channel.cc"
)
sanitize=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)

targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(scripts/fuzz.sh --list)

# Compiles the fuzzer of target $1 into $out/$1/fuzzer; its log in $out/$1/build.log.
build_target() {
  local t=$1 dir=$out/$1 replay=kiln_fuzz_replay_$1
  mkdir -p "$dir/obj"
  : >"$dir/build.log"
  local commands link
  commands=$(ninja -C "$release" -t commands "$replay")
  link=$(grep -E -- "-o fuzz/$replay( |$)" <<<"$commands" | tail -1)
  [ -n "$link" ] || { echo "no link command for $replay" >"$dir/build.log"; return 1; }
  local objs=() line src obj
  # The target's own objects (its file and the sources compiled into it), then the focus
  # sources, from the release tree's compile commands.
  while IFS= read -r line; do
    src=${line##* -c }
    [ "$(basename "$src")" = replay_main.cc ] && continue
    objs+=("$(compile_again "$line" "$dir/obj")") || return 1
  done < <(grep -E -- "-o fuzz/CMakeFiles/$replay\.dir/.* -c " <<<"$commands")
  for src in ${focus[$t]:-}; do
    line=$(grep -F -- "-c $PWD/$src" <<<"$commands" | head -1)
    [ -n "$line" ] || { echo "no compile command for $src" >"$dir/build.log"; return 1; }
    objs+=("$(compile_again "$line" "$dir/obj")") || return 1
  done
  # The link: clang with the sanitizers' and libFuzzer's runtimes, the new objects instead
  # of the replay binary's, the release tree's libraries as they are.
  local args=() word
  read -r -a words <<<"${link#: && }"
  for word in "${words[@]:1}"; do
    case $word in
      "&&" | ":") ;;
      -fuse-ld=*) ;;  # the release tree links with gold, which warns on clang's ASan runtime
      fuzz/CMakeFiles/$replay.dir/*.o) ;;
      -o) args+=(-o) ;;
      fuzz/$replay) args+=("$dir/fuzzer") ;;
      /*) args+=("$word") ;;
      -*) args+=("$word") ;;
      *) args+=("$release/$word") ;;
    esac
  done
  "$cxx" "${sanitize[@]}" "${objs[@]}" "${args[@]}" >>"$dir/build.log" 2>&1
}

# Compiles one release compile command's source again with clang and the sanitizers into
# folder $2; prints the object's path.
compile_again() {
  local line=$1 dir=$2 src obj flags=() word skip=0
  src=${line##* -c }
  obj=${src#"$PWD"/}
  obj=$PWD/$dir/${obj//\//_}.o  # fuzz/npy.cc and src/core/npy.cc: two objects
  read -r -a words <<<"$line"
  for word in "${words[@]:1}"; do
    if [ $skip -eq 1 ]; then skip=0; continue; fi
    case $word in
      -MD | -fopenmp | -O3 | -O2) ;;
      -MT | -MF | -o | -c) skip=1 ;;
      *) flags+=("$word") ;;
    esac
  done
  (cd "$release" && "$cxx" "${flags[@]}" -O1 -g "${sanitize[@]}" -c "$src" -o "$obj") \
    >>"$dir/../build.log" 2>&1 || { echo "compile failed: $src" >>"$dir/../build.log"; return 1; }
  echo "$obj"
}

# Fuzzes target $1 for $seconds; one table row.
run_target() {
  local t=$1 dir=$out/$1
  rm -rf "$dir/artifacts"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  fuzz_args "$t" "$seconds" "$dir/artifacts"
  local args=("${fuzz_args[@]}")
  local dirs=("$dir/corpus" "fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && dirs+=("fuzz/regressions/$t")
  local rc=0
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$dir/fuzzer" "${args[@]}" "${dirs[@]}" >"$dir/run.log" 2>&1 || rc=$?
  local runs edges
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/run.log" | tail -1)
  edges=$(grep -oE 'cov: [0-9]+' "$dir/run.log" | tail -1 | cut -d' ' -f2)
  printf '%-22s %10s %7s %6s %5s\n' "$t" "${runs:-?}" "${edges:-?}" "$(ls "$dir/artifacts" | wc -l)" "$rc"
  return "$rc"
}

# One target, built and fuzzed: its table row in $out/<target>/row, its status in .../status.
smoke_target() {
  local t=$1 rc=0
  mkdir -p "$out/$t"
  if ! build_target "$t"; then
    printf '%-22s build failed: %s\n' "$t" "$out/$t/build.log" >"$out/$t/row"
    echo 1 >"$out/$t/status"
    return
  fi
  run_target "$t" >"$out/$t/row" || rc=$?
  echo "$rc" >"$out/$t/status"
}

jobs=${KILN_FUZZ_SMOKE_JOBS:-$(nproc)}
echo "fuzz smoke: $cxx, ASan+UBSan on each target and its focus sources, ${seconds}s each, $jobs at a time"
for t in "${targets[@]}"; do
  rm -f "$out/$t/row" "$out/$t/status"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  smoke_target "$t" &
done
wait
failed=()
printf '%-22s %10s %7s %6s %5s\n' target executions edges crash exit
for t in "${targets[@]}"; do
  cat "$out/$t/row" 2>/dev/null || printf '%-22s no result\n' "$t"
  [ "$(cat "$out/$t/status" 2>/dev/null)" = 0 ] || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz smoke: failed: ${failed[*]} (logs and inputs in $out/<target>/)" >&2
  for t in "${failed[@]}"; do tail -30 "$out/$t/run.log" "$out/$t/build.log" 2>/dev/null >&2 || true; done
  exit 1
fi
echo "fuzz smoke: ${#targets[@]} targets, 0 crashes"
