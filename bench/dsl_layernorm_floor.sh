#!/bin/sh
# Builds bench/dsl_layernorm_floor.cc with the flags of the DSL's generated kernels (docs/dsl.md)
# and runs it at one thread for each ROWS given: hand-written LayerNorm loop nests against the DSL
# default schedule's, i.e. how much any schedule could gain over the default (issue 31).
#
#   bench/dsl_layernorm_floor.sh [ROWS...]      (default: 128 384 1024)
set -eu
here=$(dirname "$0")
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
${CXX:-c++} -std=c++17 -O3 -march=native -fopenmp -fno-math-errno -fno-trapping-math "$here/dsl_layernorm_floor.cc" -o "$bin"
[ $# -gt 0 ] || set -- 128 384 1024
for rows in "$@"; do
  echo "load: $(uptime | sed 's/.*load average: //')"
  "$bin" "$rows" 31
done
