#!/bin/sh
# bf16 against fp32 KV cache (docs/llm.md "bf16 KV cache", issue 29): `kiln llm-bench
# --kv-dtype both` runs `paged` (fp32 pool) and `paged-bf16kv` (the same KV memory in bf16:
# twice the blocks) alternated in one invocation on the same seeded workload, and prints their
# tokens/s, the sessions that fit in the memory and how many requests' greedy tokens agree. Run
# once per KV memory: a large pool (every request fits both ways: the kernel's cost alone) and a
# small one (fp32 preempts where bf16 still fits: the capacity's effect).
# The load average is printed before and after: the machine may be shared.
#
#   bench/llm/kv_dtype.sh [MODEL] [KV_MIBS] [REPEAT]
#   (defaults: gpt2-10m "256 48" 2; the model is exported with seed 1234 into
#   build/release/bench/llm_kv_dtype/ unless there already)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=${1:-gpt2-10m}
mibs=${2:-256 48}
repeat=${3:-2}
kiln=${KILN:-$root/build/release/tools/kiln}
dir=$root/build/release/bench/llm_kv_dtype/$model
if [ ! -f "$dir/config.json" ]; then
  /usr/bin/python3 "$here/export_decoder.py" "$model" "$dir" --seed 1234 --no-past-kv
fi
for mib in $mibs; do
  echo "== --kv-memory $mib; load average at start: $(uptime | sed 's/.*load average: //')"
  nice "$kiln" llm-bench "$dir" --mode paged --threads 1 --kv-memory "$mib" --repeat "$repeat" --kv-dtype both
  echo "== load average at end: $(uptime | sed 's/.*load average: //')"
done
