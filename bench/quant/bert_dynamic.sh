#!/bin/sh
# Issue 28's dynamic-quantisation bench: BERT-base s128 (the tests/e2e export) quantised as ONNX
# Runtime's quantize_dynamic writes it (quantize_dynamic.py: each constant-weight MatMul ->
# DynamicQuantizeLinear + MatMulInteger + Cast + Mul, int8 weights per tensor or per column),
# then
#   1. int8_bench.py: Kiln on that file vs ONNX Runtime 1.30 on the same file, vs ORT fp32 and
#      Kiln fp32, alternated, at 1 and 2 threads (medians);
#   2. bert_cosine.py: cosine of the pooled output, Kiln int8 vs Kiln fp32, over 100 inputs
#      shaped like real text.
# Goal (issue 28): cosine >= 0.99 and Kiln int8 <= 0.45x ORT fp32.
# Build kiln and kiln_session first (through the build lock): the bench times them as they are.
#
# usage: bench/quant/bert_dynamic.sh BERT.onnx INPUT_IDS.npy ATTENTION_MASK.npy [per-tensor|per-column]
#        [WORK_DIR] [default|passive]   (the e2e export: build/release/e2e/models/bert/{model.onnx,
#        input_*.npy}; the last: OMP_WAIT_POLICY of the Kiln processes, passive on a machine other
#        work keeps busy, see docs/quantization.md "Threads on a shared machine")
set -e
here=$(dirname "$0")
src=$(cd "$here/../.." && pwd)
model=$1 ids=$2 mask=$3 kind=${4:-per-tensor} work=${5:-$(mktemp -d)} policy=${6:-default}
mkdir -p "$work"
q="$work/bert.dynamic.$kind.onnx"
if [ "$kind" = per-column ]; then pc=--per-channel; else pc=; fi
/usr/bin/python3 "$here/quantize_dynamic.py" "$model" "$q" $pc
/usr/bin/python3 "$here/int8_bench.py" --fp32 "$model" --qdq "$q" --input "input_ids=$ids" \
  --input "attention_mask=$mask" --threads 1,2 --runs 15 --work-dir "$work/bench" \
  --kiln-omp-wait-policy "$policy" --no-build
PYTHONPATH="$src/build/release/python" /usr/bin/python3 "$here/bert_cosine.py" "$model" "$q" --n 100 --threads 2
