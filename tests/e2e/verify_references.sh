#!/usr/bin/env bash
# Cross-checks the PyTorch references: ONNX Runtime on each exported model must reproduce
# PyTorch's outputs to 1e-4 relative, which shows the export and the references agree. Run it
# after changing make_torch_models.py; it needs what run_e2e.sh needs, but no kiln binary.
#
# Usage: verify_references.sh WORK_DIR [MODEL ...]   (default: resnet50 mobilenet_v2 bert)
set -euo pipefail

[[ $# -ge 1 ]] || { echo "usage: verify_references.sh WORK_DIR [MODEL ...]" >&2; exit 2; }
work=$1
shift
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(resnet50 mobilenet_v2 bert)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
python=${KILN_E2E_PYTHON:-/usr/bin/python3}
node=${KILN_E2E_NODE:-node}

failed=0
for model in "${models[@]}"; do
  "$python" "$here/make_torch_models.py" "$work/models" --models "$model"
  ref=$work/models/$model
  inputs=()
  for f in "$ref"/input_*.npy; do
    name=$(basename "$f" .npy)
    inputs+=("${name#input_}=$f")
  done
  NODE_PATH="$src/node_modules${NODE_PATH:+:$NODE_PATH}" \
    "$node" "$here/ort_reference.js" "$ref/model.onnx" "$work/ort/$model" "${inputs[@]}"
  echo "== $model: ONNX Runtime vs PyTorch"
  "$python" "$here/compare.py" "$ref" "$work/ort/$model" --rel 1e-4 || failed=1
done
exit $failed
