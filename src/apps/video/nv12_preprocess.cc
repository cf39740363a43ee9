#include "apps/video/nv12_preprocess.h"

#include <opencv2/imgproc.hpp>

#include <vector>

namespace kiln::video {

void Nv12Preprocessor::run(const uint8_t* nv12, int width, int height, int out_width, int out_height,
                           const Normalization& norm, float* dst) {
  cv::Mat yuv(height * 3 / 2, width, CV_8UC1, const_cast<uint8_t*>(nv12));
  cv::cvtColor(yuv, rgb_, norm.bgr ? cv::COLOR_YUV2BGR_NV12 : cv::COLOR_YUV2RGB_NV12);
  cv::resize(rgb_, resized_, cv::Size(out_width, out_height), 0, 0, cv::INTER_LINEAR);
  resized_.convertTo(as_float_, CV_32FC3);
  cv::subtract(as_float_, cv::Scalar(norm.mean[0], norm.mean[1], norm.mean[2]), as_float_);
  cv::multiply(as_float_, cv::Scalar(1.0 / norm.std[0], 1.0 / norm.std[1], 1.0 / norm.std[2]), as_float_);
  // HWC -> CHW: split straight into the planes of dst.
  size_t plane = static_cast<size_t>(out_width) * out_height;
  std::vector<cv::Mat> planes;
  for (int c = 0; c < 3; ++c) planes.emplace_back(out_height, out_width, CV_32FC1, dst + c * plane);
  cv::split(as_float_, planes);
}

}  // namespace kiln::video
