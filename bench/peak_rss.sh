#!/usr/bin/env bash
# Peak memory of a model in use: Kiln's peak RSS against weights + planned arena + 40 MiB, and
# ONNX Runtime's beside it (issue 33). See bench/README.md; `bench/peak_rss.sh --help`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
PYTHONDONTWRITEBYTECODE=1 exec "$python" "$here/memory/peak_rss.py" "$@"
