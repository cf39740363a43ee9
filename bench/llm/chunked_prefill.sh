#!/bin/sh
# Chunked prefill under a per-step token budget against whole prefills (docs/llm.md, issue 29):
# `kiln llm-bench` with Poisson arrivals runs `paged` (each admitted prompt prefilled whole
# before the decode step) and `paged-chunked` (at most BUDGET rows per step: the decode rows,
# then prefill chunks) alternated in one invocation, and prints TTFT and TPOT p50/p99 of both.
# The load average is printed before and after: the machine may be shared.
#
#   bench/llm/chunked_prefill.sh [MODEL] [BUDGETS] [RATE] [REPEAT]
#   (defaults: gpt2-10m "128 256 512" 2 2; the model is exported with seed 1234 into
#   build/release/bench/llm_chunked/ unless there already)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=${1:-gpt2-10m}
budgets=${2:-128 256 512}
rate=${3:-2}
repeat=${4:-2}
kiln=${KILN:-$root/build/release/tools/kiln}
dir=$root/build/release/bench/llm_chunked/$model
if [ ! -f "$dir/config.json" ]; then
  /usr/bin/python3 "$here/export_decoder.py" "$model" "$dir" --seed 1234 --no-past-kv
fi
for budget in $budgets; do
  echo "== --step-tokens $budget; load average at start: $(uptime | sed 's/.*load average: //')"
  nice "$kiln" llm-bench "$dir" --mode paged --threads 1 --arrival-rate "$rate" --repeat "$repeat" \
    --step-tokens "$budget"
  echo "== load average at end: $(uptime | sed 's/.*load average: //')"
done
