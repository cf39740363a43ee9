// Cropping, angle classification and recognition's host side, with PaddleOCR's semantics
// (tools/infer/utility.py get_rotate_crop_image, predict_cls.py, predict_rec.py,
// ppocr/postprocess/rec_postprocess.py CTCLabelDecode).
#pragma once

#include <opencv2/core.hpp>

#include <string>
#include <vector>

#include "apps/ocr/text_detection.h"
#include "core/status.h"

namespace kiln::ocr {

// The box cut out of the image and warped upright (perspective, bicubic, replicated border);
// turned 90 degrees counter-clockwise when it is at least 1.5 times taller than wide.
cv::Mat crop_text_box(const cv::Mat& bgr, const Quad& box);

// Crops of one batch resized to height `height` keeping their aspect ratio (at most
// `width` wide), normalised to [-1, 1] and zero-padded on the right: N x 3 x height x width.
void normalize_batch(const std::vector<const cv::Mat*>& crops, int height, int width, std::vector<float>* out);

// PaddleOCR's batch width for recognition: height * the widest aspect ratio in the batch,
// and at least `min_width` (rec_image_shape 3,48,320).
int recognition_batch_width(const std::vector<const cv::Mat*>& crops, int height, int min_width);

// The recognition alphabet: index 0 is CTC's blank, then the dictionary's lines, then a space
// (use_space_char).
class CtcAlphabet {
 public:
  static Expected<CtcAlphabet> load(const std::string& dictionary_path);
  size_t size() const { return symbols_.size(); }
  // Greedy CTC decoding of one sequence of `steps` x `classes` probabilities: the best class
  // per step, repeats merged, blanks dropped; confidence is the mean probability of the kept
  // characters (0 for an empty text).
  void decode(const float* probabilities, int steps, int classes, std::string* text, float* confidence) const;

 private:
  std::vector<std::string> symbols_;
};

}  // namespace kiln::ocr
