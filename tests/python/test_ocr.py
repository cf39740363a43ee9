"""kiln.OcrPipeline / kiln.ocr against the ground truth of the sample images
(assets/ocr_samples.json: the text each image was rendered from), like tests/tools/ocr_test.py
for `kiln ocr`. Needs the PP-OCRv4 models that scripts/install-deps.sh puts in node_modules."""

import json
import re
import unicodedata

import numpy as np
import pytest

import kiln
from conftest import REPO

MODELS = REPO / "node_modules" / "@gutenye" / "ocr-models" / "assets"
ASSETS = REPO / "assets"
pytestmark = pytest.mark.skipif(not (MODELS / "ch_PP-OCRv4_det_infer.onnx").exists(),
                                reason="PP-OCRv4 models not installed (scripts/install-deps.sh)")


def norm(text):
    """Whitespace-free NFKC text: the pipeline joins a line's word boxes without spaces."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    with kiln.OcrPipeline(str(MODELS), cache_dir=str(tmp_path_factory.mktemp("ocr_cache"))) as p:
        yield p


def truth():
    with open(ASSETS / "ocr_samples.json", encoding="utf-8") as f:
        return json.load(f)["images"]


@pytest.mark.parametrize("sample", truth(), ids=lambda s: s["file"])
def test_files_bytes_and_pixels_read_the_ground_truth(pipeline, sample):
    path = ASSETS / sample["file"]
    want = [norm(t) for t in sample["lines"]]
    by_path = pipeline.run(str(path))
    assert [norm(line["text"]) for line in by_path["lines"]] == want
    for line in by_path["lines"]:
        assert 0 < line["confidence"] <= 1 and len(line["box"]) == 4
    by_bytes = pipeline.run(path.read_bytes())
    assert [line["text"] for line in by_bytes["lines"]] == [line["text"] for line in by_path["lines"]]


def test_pixels_in_both_channel_orders(pipeline):
    from PIL import Image  # python3-pil (scripts/install-deps.sh)
    rgb = np.asarray(Image.open(ASSETS / "ocr_english.png").convert("RGB"))
    want = [norm(t) for t in truth()[0]["lines"]]
    assert [norm(l["text"]) for l in pipeline.run(rgb, pixel_format="rgb")["lines"]] == want
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    assert [norm(l["text"]) for l in pipeline.run(bgr)["lines"]] == want


def test_errors_name_the_problem(pipeline):
    with pytest.raises(kiln.Error, match="no such file"):
        pipeline.run(str(ASSETS / "missing.png"))
    with pytest.raises(kiln.Error, match=r"\[H, W, 3\]"):
        pipeline.run(np.zeros((8, 8, 4), np.uint8))
    with pytest.raises(kiln.Error, match="uint8"):
        pipeline.run(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(kiln.Error, match="precision"):
        kiln.OcrPipeline(str(MODELS), precision="int4")


def test_ocr_function_and_closed_pipeline(tmp_path):
    r = kiln.ocr(str(ASSETS / "ocr_upside_down.png"), str(MODELS), cache_dir=str(tmp_path))
    assert [norm(l["text"]) for l in r["lines"]] == [norm(truth()[2]["lines"][0])]
    p = kiln.OcrPipeline(str(MODELS), cache_dir=str(tmp_path))
    p.close()
    with pytest.raises(kiln.Error, match="closed"):
        p.run(str(ASSETS / "ocr_upside_down.png"))
