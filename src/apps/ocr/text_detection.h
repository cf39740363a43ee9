// Text detection's host side, with PaddleOCR's semantics (tools/infer/predict_det.py,
// ppocr/data/imaug/operators.py DetResizeForTest, ppocr/postprocess/db_postprocess.py):
// the image resized so its longer side is at most `limit_side` and both sides are
// multiples of 32, normalised with ImageNet's mean/std in BGR order; the DB probability
// map thresholded, each contour's minimum-area box scored, expanded by the unclip offset
// (Clipper, as pyclipper) and mapped back to the original image.
#pragma once

#include <opencv2/core.hpp>

#include <array>
#include <vector>

namespace kiln::ocr {

// Four corners, clockwise from the top-left, in image pixels.
using Quad = std::array<cv::Point2f, 4>;

struct DetectionOptions {
  int limit_side = 960;         // det_limit_side_len, det_limit_type "max"
  float threshold = 0.3f;       // det_db_thresh: pixels above are text
  float box_threshold = 0.6f;   // det_db_box_thresh: mean probability inside a kept box
  float unclip_ratio = 1.5f;    // det_db_unclip_ratio
  int max_candidates = 1000;
  int min_size = 3;
  // The network input is padded (bottom and right, with the normalised mean colour, 0) to
  // multiples of `gear` pixels, so that images of many sizes share a few input shapes: the
  // first run at a new shape prepares its kernels (oneDNN JIT, fresh memory), several times
  // the cost of a warm run. The probability map is read back on the unpadded region only.
  // 32: PaddleOCR's exact sizes.
  int gear = 128;
};

// The network input for `bgr` into `chw` (reused, so that a steady stream of images does not
// fault fresh memory in): 1x3xHxW floats, H and W multiples of 32.
struct DetectionSize {
  int height = 0, width = 0;                // the resized image
  int padded_height = 0, padded_width = 0;  // the network input (multiples of the gear)
};
DetectionSize detection_preprocess(const cv::Mat& bgr, const DetectionOptions& options, std::vector<float>* chw);

// DB post-processing of the HxW probability map (rows `row_stride` floats apart) of an image
// of src_width x src_height: the text boxes in source pixels (corners in get_mini_boxes
// order), with their scores.
struct DetectedBox {
  Quad quad;
  float score = 0;
};
std::vector<DetectedBox> db_postprocess(const float* probability, int height, int width, size_t row_stride,
                                        int src_width, int src_height, const DetectionOptions& options);

// PaddleOCR's filter_tag_det_res and sorted_boxes: corners ordered clockwise from the
// top-left, clipped to the image, boxes of a side <= 3 pixels dropped, then sorted in
// reading order (top to bottom; boxes whose tops are within 10 pixels, left to right).
std::vector<Quad> order_and_filter_boxes(const std::vector<DetectedBox>& boxes, int image_width, int image_height);

}  // namespace kiln::ocr
