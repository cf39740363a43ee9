#!/usr/bin/env python3
"""The video_analytics example end to end: makes the small test videos with
bench/video/make_videos.sh, a tiny convolutional ONNX model, compiles it with an AIPP config
taking 320x240 NV12, and runs the example on the 2-second video (50 frames); then checks that
a truncated video is a one-line error naming the frame. Exit 77 (skipped) without ffmpeg.

usage: run_example.py KILN_BINARY EXAMPLE_BINARY WORK_DIR
"""
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "tools"))
from video_bench_test import tiny_model  # noqa: E402

AIPP = """aipp_op {
  aipp_mode: static
  input_format: YUV420SP_U8
  src_image_size_w: 320
  src_image_size_h: 240
  resize: true
  resize_output_w: 32
  resize_output_h: 32
  csc_switch: true
  csc_preset: BT601_NARROW
  mean_chn_0: 123.675  mean_chn_1: 116.28  mean_chn_2: 103.53
  var_reci_chn_0: 0.017125  var_reci_chn_1: 0.017507  var_reci_chn_2: 0.017429
}
"""


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    kiln, example, work = sys.argv[1:]
    if shutil.which("ffmpeg") is None:
        print("run_example: skipped: the ffmpeg command is missing (scripts/install-deps.sh installs it)")
        return 77
    env = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
    os.makedirs(work, exist_ok=True)
    videos = os.path.join(work, "videos")
    subprocess.run([os.path.join(REPO, "bench", "video", "make_videos.sh"), videos, "--small-only"], check=True,
                   stdout=subprocess.DEVNULL)
    onnx_path, cfg, model = (os.path.join(work, n) for n in ("tiny.onnx", "aipp.cfg", "tiny_aipp.kiln"))
    tiny_model(onnx_path)
    with open(cfg, "w") as f:
        f.write(AIPP)
    subprocess.run([kiln, "compile", onnx_path, "--insert-op-conf", cfg, "-o", model, "-q"], check=True, env=env)
    r = subprocess.run([example, model, os.path.join(videos, "small_320x240.mp4")], env=env, text=True,
                       capture_output=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        print(r.stderr, end="", file=sys.stderr)
        return 1
    r = subprocess.run([example, model, os.path.join(videos, "truncated.mp4")], env=env, text=True,
                       capture_output=True)
    lines = r.stderr.splitlines()
    if r.returncode != 1 or len(lines) != 1 or "frame " not in lines[0]:
        print(f"run_example: a truncated video should be one error line naming the frame, got exit "
              f"{r.returncode}:\n{r.stderr}", file=sys.stderr)
        return 1
    print(f"truncated video: {lines[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
