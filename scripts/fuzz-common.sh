# Sourced by scripts/fuzz.sh and scripts/fuzz-smoke.sh: the libFuzzer options both pass.
#
# fuzz_args TARGET SECONDS ARTIFACT_DIR: sets the array `fuzz_args` to libFuzzer's options for
# fuzz/TARGET.cc: the time budget, a 10 s per-input timeout, a 2 GiB memory limit, final
# statistics, crashes written under ARTIFACT_DIR, the target's dictionary (fuzz/dict/TARGET.dict)
# and the [libfuzzer] section of fuzz/TARGET.options (OSS-Fuzz's format: "name = value" lines).
fuzz_args() {
  local target=$1 seconds=$2 artifacts=$3
  fuzz_args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
             -artifact_prefix="$artifacts/")
  [ -f "fuzz/dict/$target.dict" ] && fuzz_args+=(-dict="fuzz/dict/$target.dict")
  if [ -f "fuzz/$target.options" ]; then
    local opt
    while IFS= read -r opt; do fuzz_args+=("$opt"); done < <(awk '
      /^[[:space:]]*(#|$)/ { next }
      /^\[/ { section = $0; next }
      section == "[libfuzzer]" { gsub(/[[:space:]]/, ""); split($0, kv, "="); print "-" kv[1] "=" kv[2] }' "fuzz/$target.options")
  fi
  return 0
}
