#!/usr/bin/env bash
# Makes the H.264 test videos of `kiln video-bench` (docs/video.md) with the ffmpeg command,
# from ffmpeg's testsrc2 pattern (moving, detailed: a realistic load for the decoder).
#
#   bench/video/make_videos.sh [OUT_DIR] [--small-only]
#
# OUT_DIR defaults to build/videos (generated videos stay out of git). Writes:
#   testsrc2_1080p25.mp4   1920x1080, 25 fps, 15 s   (the benchmark's stream)
#   small_320x240.mp4      320x240, 25 fps, 2 s      (tests)
#   truncated.mp4          small_320x240.mp4 cut at 60% of its bytes (index kept at the
#                          front, so the file opens and ends short)
#   corrupt.mp4            small_320x240.mp4 with the frame data garbled from 40% on
#   size_change.mkv        1 s at 320x240 then 1 s at 160x120 (one H.264 stream)
# Existing files are kept; delete them to remake.
set -euo pipefail
out=build/videos
small_only=0
for a in "$@"; do
  case "$a" in
    --small-only) small_only=1 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) out=$a ;;
  esac
done
command -v ffmpeg >/dev/null || { echo "make_videos: the ffmpeg command is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
mkdir -p "$out"

# libx264 when the build of ffmpeg has it, else its other software H.264 encoder.
encoders=$(ffmpeg -hide_banner -encoders 2>/dev/null || true)
encoder=libx264
grep -q ' libx264 ' <<<"$encoders" || encoder=h264
h264=(-c:v "$encoder" -pix_fmt yuv420p)
[ "$encoder" = libx264 ] && h264+=(-preset veryfast -tune zerolatency -g 50)

make_video() {  # make FILE SIZE SECONDS [extra ffmpeg output options]
  local file=$1 size=$2 secs=$3; shift 3
  [ -s "$out/$file" ] && return 0
  echo "make_videos: $out/$file ($size, ${secs} s)"
  ffmpeg -hide_banner -loglevel error -y -f lavfi -i "testsrc2=size=$size:rate=25:duration=$secs" \
    "${h264[@]}" "$@" "$out/$file"
}

make_video small_320x240.mp4 320x240 2 -movflags +faststart
if [ ! -s "$out/truncated.mp4" ]; then
  bytes=$(stat -c %s "$out/small_320x240.mp4")
  head -c $((bytes * 6 / 10)) "$out/small_320x240.mp4" > "$out/truncated.mp4"
  echo "make_videos: $out/truncated.mp4 (first 60% of the bytes)"
fi
if [ ! -s "$out/corrupt.mp4" ]; then
  # Overwrite a run of bytes well inside the frame data (the index at the front is intact).
  cp "$out/small_320x240.mp4" "$out/corrupt.mp4"
  bytes=$(stat -c %s "$out/corrupt.mp4")
  head -c 20000 /dev/zero | tr '\0' '\377' |
    dd of="$out/corrupt.mp4" bs=1 seek=$((bytes * 4 / 10)) conv=notrunc status=none
  echo "make_videos: $out/corrupt.mp4 (20000 bytes garbled at 40%)"
fi
if [ ! -s "$out/size_change.mkv" ]; then
  # Two raw H.264 streams back to back are one valid stream whose second SPS changes the
  # size; remuxed (no re-encoding) into Matroska.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for size in 320x240 160x120; do
    ffmpeg -hide_banner -loglevel error -y -f lavfi -i "testsrc2=size=$size:rate=25:duration=1" "${h264[@]}" \
      -f h264 "$tmp/$size.h264"
  done
  cat "$tmp/320x240.h264" "$tmp/160x120.h264" > "$tmp/both.h264"
  ffmpeg -hide_banner -loglevel error -y -fflags +genpts -framerate 25 -i "$tmp/both.h264" -c copy "$tmp/size_change.mkv"
  mv "$tmp/size_change.mkv" "$out/size_change.mkv"
  echo "make_videos: $out/size_change.mkv (25 frames at 320x240, then 25 at 160x120)"
fi
[ "$small_only" = 1 ] && exit 0
make_video testsrc2_1080p25.mp4 1920x1080 15 -movflags +faststart
