#!/usr/bin/env bash
# AllReduce (sum, fp32) of `kiln comm-bench` against OpenMPI's MPI_Allreduce on this host:
# for 2 and 4 ranks, both launched with `mpirun -np N` (one rank per process, shared memory),
# run alternately for ROUNDS rounds; prints per rank count a table per size of each side's best
# time and the busbw it gives, their ratio, and the 8-byte latency.
#
#   bench/comm/compare.sh [BUILD_DIR]      (default: build/release of this checkout)
#
# Then, per rank count, the 8-byte latency on its own: LAT_ROUNDS (default 8) alternating runs
# of LAT_ITERS (default 20000) back-to-back AllReduces per side (20 iterations of 8 bytes are
# 0.1 ms, less than one scheduler tick where ranks outnumber cores), with each side's best
# and median run.
#
# Environment: ROUNDS (default 2), RANKS (default "2 4"), MAXBYTES (default 256M),
# ITERS / WARMUP (default 20 / 5), LAT_ROUNDS / LAT_ITERS, KILN_BIN (the kiln command),
# MPI_BASELINE (a built mpi_allreduce; otherwise it is compiled with mpicc into a temporary
# directory).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$repo/build/release}" && pwd) || { echo "compare.sh: no build directory ${1:-}" >&2; exit 1; }
kiln=${KILN_BIN:-$build/tools/kiln}
rounds=${ROUNDS:-2}
ranks_list=${RANKS:-"2 4"}
maxbytes=${MAXBYTES:-256M}
iters=${ITERS:-20}
warmup=${WARMUP:-5}
lat_rounds=${LAT_ROUNDS:-8}
lat_iters=${LAT_ITERS:-20000}

die() { echo "compare.sh: $*" >&2; exit 1; }
command -v mpirun >/dev/null || die "mpirun not found (install openmpi-bin)"
[[ -x $kiln ]] || die "no kiln command at $kiln (build the 'kiln' target, or set KILN_BIN)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

baseline=${MPI_BASELINE:-}
if [[ -z $baseline && -x $build/bench/comm/mpi_allreduce ]]; then baseline=$build/bench/comm/mpi_allreduce; fi
if [[ -z $baseline ]]; then
  command -v mpicc >/dev/null || die "mpicc not found (install libopenmpi-dev)"
  mpicc -O2 -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" || die "compiling mpi_allreduce.c failed"
  baseline=$tmp/mpi_allreduce
fi

launcher=(mpirun --oversubscribe)
if [[ $(id -u) == 0 ]]; then launcher+=(--allow-run-as-root); fi

# Rows of a comm-bench style table: "size time busbw wrong", header lines dropped.
rows() { awk '!/^#/ && NF == 9 { print $1, $6, $8, $9 }' "$1"; }

echo "# kiln comm-bench vs OpenMPI MPI_Allreduce, fp32 sum, $(nproc) cores, $(mpirun --version 2>&1 | head -1)"
echo "# $rounds alternating rounds per rank count; each side's best round per size"
status=0
for n in $ranks_list; do
  for ((round = 1; round <= rounds; round++)); do
    "${launcher[@]}" -np "$n" "$kiln" comm-bench allreduce -b 8 -e "$maxbytes" -f 2 -d fp32 -o sum \
      -n "$iters" -w "$warmup" -c 1 >"$tmp/kiln.$n.$round" 2>"$tmp/kiln.$n.$round.err" ||
      { cat "$tmp/kiln.$n.$round.err" >&2; die "kiln comm-bench failed with $n ranks (round $round)"; }
    "${launcher[@]}" -np "$n" "$baseline" -b 8 -e "$maxbytes" -f 2 -n "$iters" -w "$warmup" -c 1 \
      >"$tmp/mpi.$n.$round" 2>"$tmp/mpi.$n.$round.err" ||
      { cat "$tmp/mpi.$n.$round.err" >&2; die "mpi_allreduce failed with $n ranks (round $round)"; }
  done
  # Best (lowest) time per size over the rounds, per side, and the wrong elements of all rounds.
  for side in kiln mpi; do
    for ((round = 1; round <= rounds; round++)); do rows "$tmp/$side.$n.$round"; done |
      awk '{ if (!($1 in t) || $2 < t[$1]) t[$1] = $2; w[$1] += $4 } END { for (s in t) print s, t[s], w[s] }' |
      sort -n >"$tmp/$side.$n.best"
  done
  echo
  echo "## $n ranks (mpirun -np $n, one process per rank)"
  # busbw from the best time: size / time x 2(n-1)/n (nccl-tests' AllReduce factor); the ratio
  # of the two busbw is that of the times, so it stays exact where busbw rounds to 0.00.
  join "$tmp/kiln.$n.best" "$tmp/mpi.$n.best" | awk -v n="$n" '
    BEGIN { f = 2 * (n - 1) / n
            printf "%12s %12s %12s %14s %14s %8s %7s\n", "size (B)", "kiln (us)", "OpenMPI (us)", "kiln busbw",
                   "OpenMPI busbw", "ratio", "#wrong"
            printf "%12s %12s %12s %14s %14s %8s %7s\n", "", "", "", "(GB/s)", "(GB/s)", "", "" }
    { bk = $2 > 0 ? $1 / ($2 * 1e3) * f : 0; bm = $4 > 0 ? $1 / ($4 * 1e3) * f : 0
      ratio = $2 > 0 ? $4 / $2 : 0
      printf "%12d %12.2f %12.2f %14.3f %14.3f %8.2f %7d\n", $1, $2, $4, bk, bm, ratio, $3 + $5
      if ($1 == 8) { lat_k = $2; lat_m = $4 }
      if ($1 >= 1048576) { big++; if (ratio >= 1.0) ok++; if (min == "" || ratio < min) min = ratio }
      wrong += $3 + $5 }
    END { printf "8-byte AllReduce latency (enqueue + synchronise for kiln), table above: kiln %.2f us, OpenMPI %.2f us\n",
                 lat_k, lat_m
          printf "sizes >= 1 MiB with kiln busbw >= OpenMPI: %d of %d (lowest ratio %.2f)\n", ok, big, min
          if (wrong > 0) { printf "WRONG RESULTS: %d elements\n", wrong; exit 1 } }' || status=1
  # The 8-byte latency from long runs, alternating sides.
  for ((round = 1; round <= lat_rounds; round++)); do
    "${launcher[@]}" -np "$n" "$kiln" comm-bench allreduce -b 8 -e 8 -d fp32 -o sum -n "$lat_iters" \
      -w 200 -c 1 2>"$tmp/lat.err" | rows /dev/stdin | awk '{ print "kiln", $2, $4 }' >>"$tmp/lat.$n" ||
      { cat "$tmp/lat.err" >&2; die "kiln comm-bench (latency) failed with $n ranks"; }
    "${launcher[@]}" -np "$n" "$baseline" -b 8 -e 8 -n "$lat_iters" -w 200 -c 1 2>"$tmp/lat.err" |
      rows /dev/stdin | awk '{ print "mpi", $2, $4 }' >>"$tmp/lat.$n" ||
      { cat "$tmp/lat.err" >&2; die "mpi_allreduce (latency) failed with $n ranks"; }
  done
  for side in kiln mpi; do
    awk -v s="$side" '$1 == s { print $2 }' "$tmp/lat.$n" | sort -n | awk -v s="$side" -v it="$lat_iters" '
      { t[NR] = $1 }
      END { m = NR % 2 ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
            printf "8-byte AllReduce, %d runs of %d: %-7s best %.2f us, median %.2f us, runs:", NR, it,
                   s == "kiln" ? "kiln" : "OpenMPI", t[1], m
            for (i = 1; i <= NR; i++) printf " %.2f", t[i]
            printf "\n" }'
  done
  if awk '$3 > 0 { bad = 1 } END { exit !bad }' "$tmp/lat.$n"; then
    echo "WRONG RESULTS in the latency runs"
    status=1
  fi
done
exit $status
