#include "apps/ocr/text_recognition.h"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

namespace kiln::ocr {

cv::Mat crop_text_box(const cv::Mat& bgr, const Quad& box) {
  int crop_width = static_cast<int>(std::max(cv::norm(box[0] - box[1]), cv::norm(box[2] - box[3])));
  int crop_height = static_cast<int>(std::max(cv::norm(box[0] - box[3]), cv::norm(box[1] - box[2])));
  crop_width = std::max(crop_width, 1);
  crop_height = std::max(crop_height, 1);
  cv::Point2f src[4] = {box[0], box[1], box[2], box[3]};
  cv::Point2f dst[4] = {{0, 0},
                        {static_cast<float>(crop_width), 0},
                        {static_cast<float>(crop_width), static_cast<float>(crop_height)},
                        {0, static_cast<float>(crop_height)}};
  cv::Mat m = cv::getPerspectiveTransform(src, dst);
  cv::Mat crop;
  cv::warpPerspective(bgr, crop, m, cv::Size(crop_width, crop_height), cv::INTER_CUBIC, cv::BORDER_REPLICATE);
  if (static_cast<float>(crop.rows) / crop.cols >= 1.5f) {
    cv::Mat turned;
    cv::rotate(crop, turned, cv::ROTATE_90_COUNTERCLOCKWISE);  // np.rot90
    return turned;
  }
  return crop;
}

int recognition_batch_width(const std::vector<const cv::Mat*>& crops, int height, int min_width) {
  float max_ratio = static_cast<float>(min_width) / height;
  for (const cv::Mat* c : crops) max_ratio = std::max(max_ratio, static_cast<float>(c->cols) / c->rows);
  return static_cast<int>(height * max_ratio);
}

void normalize_batch(const std::vector<const cv::Mat*>& crops, int height, int width, std::vector<float>* out) {
  size_t plane = static_cast<size_t>(height) * width;
  out->resize(crops.size() * 3 * plane);
  std::fill(out->begin(), out->end(), 0.0f);  // zero padding; resize+fill keeps the capacity
  for (size_t n = 0; n < crops.size(); ++n) {
    const cv::Mat& img = *crops[n];
    float ratio = static_cast<float>(img.cols) / img.rows;
    int resized_w = std::ceil(height * ratio) > width ? width : static_cast<int>(std::ceil(height * ratio));
    resized_w = std::max(resized_w, 1);
    cv::Mat resized;
    cv::resize(img, resized, cv::Size(resized_w, height));
    float* dst = out->data() + n * 3 * plane;
    for (int y = 0; y < height; ++y) {
      const uint8_t* row = resized.ptr<uint8_t>(y);
      for (int x = 0; x < resized_w; ++x)
        for (int c = 0; c < 3; ++c)
          dst[c * plane + static_cast<size_t>(y) * width + x] = (row[3 * x + c] / 255.0f - 0.5f) / 0.5f;
    }
  }
}

Expected<CtcAlphabet> CtcAlphabet::load(const std::string& dictionary_path) {
  std::ifstream in(dictionary_path);
  if (!in) return not_found("%s: cannot open the recognition dictionary", dictionary_path.c_str());
  CtcAlphabet a;
  a.symbols_.push_back("");  // blank
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    a.symbols_.push_back(line);
  }
  if (a.symbols_.size() < 2) return invalid_argument("%s: the recognition dictionary is empty", dictionary_path.c_str());
  a.symbols_.push_back(" ");
  return a;
}

void CtcAlphabet::decode(const float* probabilities, int steps, int classes, std::string* text,
                         float* confidence) const {
  text->clear();
  double sum = 0;
  int kept = 0;
  int previous = -1;
  for (int t = 0; t < steps; ++t) {
    const float* p = probabilities + static_cast<size_t>(t) * classes;
    int best = static_cast<int>(std::max_element(p, p + classes) - p);
    if (best != previous && best != 0) {
      if (static_cast<size_t>(best) < symbols_.size()) *text += symbols_[best];
      sum += p[best];
      ++kept;
    }
    previous = best;
  }
  *confidence = kept > 0 ? static_cast<float>(sum / kept) : 0.0f;
}

}  // namespace kiln::ocr
