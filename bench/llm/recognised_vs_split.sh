#!/bin/sh
# The recognised decoder.onnx against the exporter's split (docs/llm.md "A plain decoder.onnx",
# issue 29): the same weights run by `kiln llm-bench --mode paged` from MODEL_DIR (embed / pre /
# post / head segments) and from MODEL_DIR/decoder.onnx (attention recognised, the graph cut
# into stages), alternated ROUNDS times, at batch 1 and batch 16, on one seeded workload (as
# many requests as the batch, prompts 16-64, 64 output tokens each; llm-bench's `paged` row, the
# buckets on; the `paged-nobuckets` row it also runs is not read). Prints each run's tokens/s and TPOT p50, the
# medians' ratios (recognised / split), and the load average before and after: the machine may
# be shared. They should agree within noise: both run the same kernels and paged attention.
#
#   bench/llm/recognised_vs_split.sh [MODEL] [ROUNDS]
#   (defaults: gpt2-10m 3; exported with seed 1234 into build/release/bench/llm_recognised/
#   unless there already)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
model=${1:-gpt2-10m}
rounds=${2:-3}
kiln=${KILN:-$root/build/release/tools/kiln}
dir=$root/build/release/bench/llm_recognised/$model
if [ ! -f "$dir/decoder.onnx" ]; then
  /usr/bin/python3 "$here/export_decoder.py" "$model" "$dir" --seed 1234
fi
echo "== load average at start: $(uptime | sed 's/.*load average: //')"
for batch in 1 16; do
  out=$(mktemp)
  r=0
  while [ "$r" -lt "$rounds" ]; do
    for source in split recognised; do
      path=$dir
      [ "$source" = recognised ] && path=$dir/decoder.onnx
      printf '%s %s ' "$batch" "$source" >>"$out"
      nice "$kiln" llm-bench "$path" --mode paged --threads 1 --batch "$batch" --requests "$batch" --prompt-min 16 \
        --prompt-max 64 --output-min 64 --output-max 64 --json |
        /usr/bin/python3 -c 'import json,sys; c=[c for c in json.load(sys.stdin)["configs"] if c["name"] == "paged"][0]; print(c["tokens_per_s"], c["tpot_p50_ms"])' >>"$out"
    done
    r=$((r + 1))
  done
  /usr/bin/python3 - "$out" <<'EOF'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
by = {}
for batch, source, tps, tpot in rows:
    by.setdefault(source, []).append((float(tps), float(tpot)))
    print(f"batch {batch} {source:10s} tokens/s {float(tps):8.1f}  TPOT p50 {float(tpot):7.3f} ms")
med = {s: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for s, v in by.items()}
print(f"batch {rows[0][0]}: recognised / split: tokens/s {med['recognised'][0] / med['split'][0]:.3f}x, "
      f"TPOT p50 {med['recognised'][1] / med['split'][1]:.3f}x (medians of {len(by['split'])})")
EOF
  rm -f "$out"
done
echo "== load average at end: $(uptime | sed 's/.*load average: //')"
