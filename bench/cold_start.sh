#!/usr/bin/env bash
# Model open + first inference, this build against a baseline (issue 33's cold-start goal).
# See bench/README.md; `bench/cold_start.sh --help`.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
PYTHONDONTWRITEBYTECODE=1 exec "$python" "$here/memory/cold_start.py" "$@"
