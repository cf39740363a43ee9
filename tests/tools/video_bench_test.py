#!/usr/bin/env python3
"""`kiln video-bench` as a user runs it, on small videos bench/video/make_videos.sh makes with
the ffmpeg command (320x240, 2 s) and a tiny convolutional model: every frame of the file is
decoded (ffprobe's count) and inferred; a truncated file, a corrupt one, one whose frame size
changes mid-stream and a missing one each end their own stream with a one-line error naming
the frame while the other streams run to the end (exit 1, no crash); --duration replays the
file; usage errors exit 2; a model compiled with an AIPP config (NV12 in) runs with the
preprocessing inside the model, and with the Aipp node folded into the first convolution
(AippConv) only its Aipp rows count as preprocessing. Without ffmpeg/ffprobe the test is skipped (exit 77).

usage: video_bench_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

KILN = None
WORK = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}
VIDEOS = None


def video(name):
    return os.path.join(VIDEOS, name)


def bench(*args, code=EXIT_OK):
    r = subprocess.run([KILN, "video-bench"] + [str(a) for a in args], capture_output=True, timeout=120,
                       env=BASE_ENV, text=True)
    if code is not None and r.returncode != code:
        raise AssertionError(f"kiln video-bench {' '.join(map(str, args))} exited {r.returncode}, expected {code}:\n"
                             f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def ffprobe_frames(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                          "stream=nb_read_frames", "-of", "csv=p=0", path], capture_output=True, text=True).stdout
    return int(out.split()[0])


def tiny_model(path, size=32):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.RandomState(0).randn(8, 3, 3, 3).astype(np.float32) * 0.1, "W")
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


class VideoBenchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        onnx_path = os.path.join(WORK, "tiny.onnx")
        tiny_model(onnx_path)
        cls.model = os.path.join(WORK, "tiny.kiln")
        subprocess.run([KILN, "compile", onnx_path, "-o", cls.model, "-q"], check=True, env=BASE_ENV)
        cls.small_frames = ffprobe_frames(video("small_320x240.mp4"))

    def test_every_frame_decoded_and_inferred(self):
        r = bench(self.model, "--video", video("small_320x240.mp4"), "--streams", 2, "--json", "--queue", 50)
        out = json.loads(r.stdout)
        self.assertEqual(out["stream_count"], 2)
        self.assertEqual(out["preprocessing"], "opencv")
        for s in out["streams"]:
            self.assertNotIn("error", s)
            self.assertEqual(s["frames_decoded"], self.small_frames)
            self.assertEqual(s["frames_inferred"] + s["frames_dropped"], s["frames_decoded"])
            self.assertEqual((s["width"], s["height"]), (320, 240))
            self.assertGreater(s["latency_p99_ms"], 0)
        cpu = out["cpu_s"]
        self.assertGreater(cpu["decode"], 0)
        self.assertGreater(cpu["preprocessing"], 0)
        self.assertAlmostEqual(cpu["decode"] + cpu["preprocessing"] + cpu["inference"], cpu["process"], delta=0.01)

    def test_table(self):
        r = bench(self.model, "--video", video("small_320x240.mp4"), "--queue", 50)
        self.assertIn("decoded", r.stdout)
        self.assertRegex(r.stdout, r"\ntotal +%d " % self.small_frames)
        self.assertIn("process CPU", r.stdout)
        self.assertEqual(r.stderr, "")

    def test_bad_videos_fail_their_stream_only(self):
        files = ["small_320x240.mp4", "truncated.mp4", "corrupt.mp4", "size_change.mkv", "missing.mp4"]
        args = [self.model, "--streams", len(files), "--json", "--queue", 50]
        for f in files:
            args += ["--video", video(f)]
        r = bench(*args, code=EXIT_ERROR)
        out = json.loads(r.stdout)
        streams = {os.path.basename(s["video"]): s for s in out["streams"]}
        good = streams["small_320x240.mp4"]
        self.assertNotIn("error", good)
        self.assertEqual(good["frames_decoded"], self.small_frames)
        errors = r.stderr.splitlines()
        self.assertEqual(len(errors), 4, r.stderr)
        for line in errors:
            self.assertTrue(line.startswith("kiln video-bench: error: stream "), line)
        by_file = {f: [l for l in errors if f in l] for f in files[1:]}
        for f, lines in by_file.items():
            self.assertEqual(len(lines), 1, (f, r.stderr))
        self.assertRegex(by_file["size_change.mkv"][0],
                         r"frame 25: frame size changed from 320x240 to 160x120 mid-stream")
        self.assertRegex(by_file["truncated.mp4"][0], r"frame \d+: ")
        self.assertRegex(by_file["corrupt.mp4"][0], r"frame \d+: ")
        self.assertIn("no such file", by_file["missing.mp4"][0])
        # The frames before the failure were decoded (and no more).
        self.assertEqual(streams["size_change.mkv"]["frames_decoded"], 25)
        trunc = int(by_file["truncated.mp4"][0].split("frame ")[1].split(":")[0])
        self.assertEqual(streams["truncated.mp4"]["frames_decoded"], trunc)
        self.assertLess(trunc, self.small_frames)

    def test_duration_replays_the_file(self):
        r = bench(self.model, "--video", video("small_320x240.mp4"), "--duration", 3, "--json", "--queue", 50)
        s = json.loads(r.stdout)["streams"][0]
        self.assertEqual(s["frames_decoded"], 75)
        self.assertNotIn("error", s)

    def test_usage_errors(self):
        v = video("small_320x240.mp4")
        for args in (["--streams", 0], ["--fps", 0], ["--duration", -1], ["--queue", 0], ["--mean", "1,2"],
                     ["--std", "1,0,1"], ["--devices", 0], ["--threads", 0]):
            r = bench(self.model, "--video", v, *args, code=EXIT_USAGE)
            self.assertTrue(r.stderr.strip(), args)
        bench(self.model, code=EXIT_USAGE)  # no --video
        r = bench(os.path.join(WORK, "nope.kiln"), "--video", v, code=EXIT_ERROR)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn("no such file", r.stderr)
        r = bench(self.model, "--video", os.path.join(WORK, "nope.mp4"), code=EXIT_ERROR)
        self.assertIn("no such file", r.stderr)

    def test_aipp_model_takes_nv12(self):
        # `kiln compile --insert-op-conf`: the input becomes the NV12 frame, the Aipp op runs in the model.
        help_text = subprocess.run([KILN, "compile", "--help"], capture_output=True, text=True, env=BASE_ENV).stdout
        if "--insert-op-conf" not in help_text:
            self.skipTest("this kiln has no --insert-op-conf")
        cfg = os.path.join(WORK, "aipp.cfg")
        with open(cfg, "w") as f:
            f.write("aipp_op {\n aipp_mode: static\n input_format: YUV420SP_U8\n src_image_size_w: 320\n"
                    " src_image_size_h: 240\n resize: true\n resize_output_w: 32\n resize_output_h: 32\n"
                    " csc_switch: true\n csc_preset: BT601_NARROW\n mean_chn_0: 123.675 mean_chn_1: 116.28"
                    " mean_chn_2: 103.53\n var_reci_chn_0: 0.017125 var_reci_chn_1: 0.017507"
                    " var_reci_chn_2: 0.017429\n}\n")
        model = os.path.join(WORK, "tiny_aipp.kiln")
        subprocess.run([KILN, "compile", os.path.join(WORK, "tiny.onnx"), "--insert-op-conf", cfg, "-o", model, "-q"],
                       check=True, env=BASE_ENV)
        r = bench(model, "--video", video("small_320x240.mp4"), "--streams", 2, "--json", "--queue", 50)
        out = json.loads(r.stdout)
        self.assertEqual(out["preprocessing"], "aipp")
        self.assertIn("NV12 320x240", out["input"])
        self.assertGreater(out["aipp_op_share"], 0)
        for s in out["streams"]:
            self.assertEqual(s["frames_decoded"], self.small_frames)
            self.assertNotIn("error", s)
        # A stream whose frames are not the size the AIPP input takes: its own one-line error.
        r = bench(model, "--video", video("small_320x240.mp4"), "--video", video("size_change.mkv"), "--streams", 2,
                  "--json", "--queue", 50, code=EXIT_ERROR)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("frame 25", r.stderr)

    def test_folded_aipp_counts_only_its_aipp_rows(self):
        # An image over 2 MiB (320x240 resized to 480x480) folds the Aipp node into the first
        # convolution (kiln AippConv). The preprocessing share is its Aipp rows' time (the task
        # records its kernel writes), not the whole node's: checked against the profile
        # KILN_PROFILE writes of the same run (op_summary.csv, timeline.json).
        help_text = subprocess.run([KILN, "compile", "--help"], capture_output=True, text=True, env=BASE_ENV).stdout
        if "--insert-op-conf" not in help_text:
            self.skipTest("this kiln has no --insert-op-conf")
        import csv
        onnx_path, cfg = os.path.join(WORK, "tiny480.onnx"), os.path.join(WORK, "aipp480.cfg")
        tiny_model(onnx_path, size=480)
        with open(cfg, "w") as f:
            f.write("aipp_op {\n aipp_mode: static\n input_format: YUV420SP_U8\n src_image_size_w: 320\n"
                    " src_image_size_h: 240\n resize: true\n resize_output_w: 480\n resize_output_h: 480\n"
                    " csc_switch: true\n csc_preset: BT601_NARROW\n}\n")
        model = os.path.join(WORK, "tiny480_aipp.kiln")
        subprocess.run([KILN, "compile", onnx_path, "--insert-op-conf", cfg, "-o", model, "-q"], check=True,
                       env=BASE_ENV)
        profile = os.path.join(WORK, "profile_folded")
        shutil.rmtree(profile, ignore_errors=True)
        r = subprocess.run([KILN, "video-bench", model, "--video", video("small_320x240.mp4"), "--streams", "1",
                            "--json", "--queue", "50"], capture_output=True, timeout=120, text=True,
                           env=dict(BASE_ENV, KILN_PROFILE=profile))
        self.assertEqual(r.returncode, EXIT_OK, r.stderr)
        share = json.loads(r.stdout)["aipp_op_share"]
        with open(os.path.join(profile, "op_summary.csv")) as f:
            ops = list(csv.DictReader(f))
        op_us = sum(float(o["duration us"]) for o in ops)
        folded_us = sum(float(o["duration us"]) for o in ops if o["op type"] == "AippConv")
        self.assertGreater(folded_us, 0, "the Aipp node was not folded into AippConv")
        with open(os.path.join(profile, "timeline.json")) as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        rows_us = sum(e.get("dur", 0) for e in events if e.get("name") == "AippConv: Aipp rows")
        self.assertGreater(share, 0)
        self.assertAlmostEqual(share, rows_us / op_us, delta=0.002)
        # The convolution is not preprocessing: the share is well under the whole node's.
        self.assertLess(share, 0.9 * folded_us / op_us)


def main():
    global KILN, WORK, VIDEOS
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    for tool in ("ffmpeg", "ffprobe"):
        if shutil.which(tool) is None:
            print(f"video_bench_test: skipped: the {tool} command is missing (scripts/install-deps.sh installs it)")
            return SKIP
    os.makedirs(WORK, exist_ok=True)
    VIDEOS = os.path.join(WORK, "videos")
    subprocess.run([os.path.join(REPO, "bench", "video", "make_videos.sh"), VIDEOS, "--small-only"], check=True,
                   stdout=subprocess.DEVNULL)
    result = unittest.main(argv=[sys.argv[0]], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
