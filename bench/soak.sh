#!/usr/bin/env bash
# Soak (issue 32 part 4): `kiln serve` with two small models on 2 logical devices under
# load for DURATION seconds (default 600): kiln loadgen on both models, a client checking
# every output against NumPy, clients that hang up mid-request, malformed requests, and task
# failures injected into the server (KILN_FAULT_INJECT, --fault-inject SPEC). Prints
# the server's RSS, open file descriptors and threads every window and, at the end, the drift
# of each over the run and the counts of wrong outputs and hangs; exits non-zero unless the
# server stayed steady (bench/soak.py says how that is decided).
#
#   bench/soak.sh [DURATION [WINDOW]]     # needs build/release (the kiln command)
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-600}
window=${2:-10}
exec /usr/bin/python3 bench/soak.py --duration "$duration" --window "$window" "${@:3}"
