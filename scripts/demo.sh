#!/usr/bin/env bash
# Kiln's main job on real models: installs what is missing, builds Kiln and its Python
# package (installed into the system Python, so that `python3 -c "import kiln"` works), and
# reads the text in the sample images of assets/ with `kiln ocr` (PP-OCRv4 text detection,
# angle classification and recognition; the models are compiled into .kiln files once and
# cached).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
echo "== build (release)"
cmake --preset release >/dev/null
cmake --build --preset release --target kiln _kiln
echo "== install the Python package kiln (cmake --install --component python)"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" cmake --install build/release --component python >/dev/null
/usr/bin/python3 -c "import kiln; print('import kiln:', kiln.__version__, 'from', kiln.__path__[0])"

kiln=build/release/tools/kiln
images=(assets/ocr_english.png assets/ocr_chinese.png assets/ocr_upside_down.png)

echo "== kiln ocr ${images[*]}"
"$kiln" ocr "${images[@]}"
