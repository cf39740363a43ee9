#!/bin/sh
# Issue 31's tuned-schedule acceptance: tunes the DSL examples at BERT-base and ResNet-50 shapes
# with kiln tune --op into a tuning database, then races Kiln's hand-written and reference
# kernels against the default and the tuned DSL kernels (bench/dsl_bench.cc), alternated rounds,
# medians, one thread, and prints the table. Each trial of kiln tune is the fastest of 201 calls
# (a few ms for these kernels): with 31, on a shared machine the noise between trials (+-25% at
# load 9) exceeded the differences between schedules. kiln tune then races its three best points
# against the default again (9 alternated rounds) and records the winner, the default's point if
# none beats it.
#
#   bench/dsl_tuned.sh [BUILD_DIR] [TRIALS] [DB]     (defaults: build/release, 60, a temporary file)
set -eu
build=${1:-build/release}
trials=${2:-60}
db=${3:-$(mktemp -u "${TMPDIR:-/tmp}/kiln-tuning-XXXXXX.json")}
export KILN_NUM_THREADS=1 OMP_NUM_THREADS=1
for spec in layernorm:128,768 layernorm:1024,768 softmax:1536,128 softmax:1,1000 gelu_bias_add:128,3072 gelu_bias_add:3136,256; do
  "$build/tools/kiln" tune --op "${spec%%:*}" --shape "${spec#*:}" --trials "$trials" --reps 201 --db "$db" |
    grep -v '^trial'
done
echo "tuning database: $db"
"$build/bench/dsl_bench" --reps 31 --tuning-db "$db"
