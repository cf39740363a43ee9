#!/usr/bin/env bash
# Latency before/after in one run (issue 33: "latency unchanged or better"): a baseline tree's
# `bench/ort_compare.sh` and this tree's, alternated round by round with the same options.
# Each compares its Kiln with ONNX Runtime in its own alternated rounds, so the machine's
# drift between the two shows in the ORT column and the Kiln/ORT ratios compare across builds.
#
# usage: bench/ort_compare_ab.sh BASELINE_TREE [--rounds N] [ort_compare options...]
#   BASELINE_TREE  a checkout of the other revision (e.g. `git worktree add DIR REV`) with its
#                  release build: build/release/tools/kiln and bench/kiln_session built
#   --rounds N     baseline, this tree, baseline, ... N times each (default 2)
# e.g. bench/ort_compare_ab.sh ../kiln-old --models resnet50,mobilenet_v2,bert --runs 11
# The baseline needs ONNX Runtime's node_modules and the e2e models: where it has none, links to
# this tree's are made in it (and said).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
this=$(cd "$here/.." && pwd)
usage() { sed -n '7,14p' "$0" | sed 's/^# \{0,1\}//'; }
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || { usage; [[ $# -ge 1 ]]; exit; }
base=$(cd "$1" 2>/dev/null && pwd) || { echo "ort_compare_ab: no folder '$1'" >&2; exit 2; }
shift
rounds=2
if [[ ${1:-} == --rounds ]]; then rounds=${2:?--rounds needs a number}; shift 2; fi
for tree in "$base" "$this"; do
  for f in bench/ort_compare.sh build/release/tools/kiln build/release/bench/kiln_session; do
    [[ -e $tree/$f ]] || { echo "ort_compare_ab: $tree has no $f (build kiln and kiln_session there)" >&2; exit 2; }
  done
done
link_from_this() {
  if [[ ! -e $base/$1 && -e $this/$1 ]]; then
    ln -s "$this/$1" "$base/$1"
    echo "ort_compare_ab: linked $base/$1 to this tree's" >&2
  fi
}
link_from_this node_modules
link_from_this build/release/e2e
for ((r = 1; r <= rounds; r++)); do
  for tree in "$base" "$this"; do
    side=$([[ $tree == "$base" ]] && echo baseline || echo "this tree")
    echo "=== round $r, $side ($(git -C "$tree" rev-parse --short HEAD)), $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$tree/bench/ort_compare.sh" --kiln "$tree/build/release/tools/kiln" --build-dir "$tree/build/release" "$@"
  done
done
echo "=== end, $(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
