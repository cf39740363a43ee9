// The host preprocessing a video pipeline does without AIPP, with OpenCV as applications
// commonly write it: NV12 -> RGB (or BGR) with cvtColor, resize INTER_LINEAR to the model's
// input, float conversion and per-channel (x - mean) / std, HWC -> CHW. `kiln video-bench`
// runs it as the baseline of a model compiled without --insert-op-conf.
#pragma once

#include <opencv2/core.hpp>

#include <array>
#include <cstdint>

namespace kiln::video {

struct Normalization {
  std::array<float, 3> mean = {123.675f, 116.28f, 103.53f};  // ImageNet, on 0..255 values
  std::array<float, 3> std = {58.395f, 57.12f, 57.375f};
  bool bgr = false;  // channel order of the model's input
};

// Reuses its intermediate images from call to call (one per thread).
class Nv12Preprocessor {
 public:
  // `nv12`: width x height (even), Y plane then interleaved UV, tightly packed. `dst`: float
  // [3, out_height, out_width].
  void run(const uint8_t* nv12, int width, int height, int out_width, int out_height, const Normalization& norm,
           float* dst);

 private:
  cv::Mat rgb_, resized_, as_float_;
};

}  // namespace kiln::video
