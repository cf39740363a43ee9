// Reading the images `kiln ocr` is given into 8-bit BGR, the channel order PaddleOCR's
// models were trained on, with cv2.imread's semantics (alpha dropped, EXIF orientation
// applied): PNG with libpng's simplified API, JPEG with TurboJPEG, the other formats
// (BMP, TIFF, WebP, PNM) with OpenCV.
//
// Every failure names the file and what is wrong with it (missing, a directory, empty,
// not an image, truncated, corrupt), and no decoder prints on stderr: OpenCV lets libpng
// and libjpeg print their own lines, and decodes a truncated JPEG into a half-grey image
// that would read as text that is not there. Very large images are decoded at a reduced
// scale (JPEG natively at 1/2, 1/4, 1/8; PNG decoded, then reduced); the scale is reported
// so that boxes come back in original-image pixels.
#pragma once

#include <opencv2/core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::ocr {

struct DecodedImage {
  cv::Mat bgr;           // CV_8UC3
  int original_width = 0;
  int original_height = 0;
  int scale_down = 1;    // bgr is the original downscaled by this factor (1, 2, 4 or 8)
  std::string note;      // e.g. why it was downscaled; empty when nothing to say
};

// Above this many pixels an image is decoded downscaled (by the smallest power of two that
// brings it under); above kMaxImagePixels it is refused (OpenCV's own decoder limit).
inline constexpr int64_t kDownscalePixels = int64_t{64} << 20;
inline constexpr int64_t kMaxImagePixels = int64_t{1} << 30;

// `name` is what messages call the image (its path, or "<buffer>").
Expected<DecodedImage> decode_image(const uint8_t* data, size_t size, const std::string& name);
Expected<DecodedImage> read_image_file(const std::string& path);

// An image from raw pixels: 3-channel BGR or RGB, or 1-channel gray, rows `stride` bytes apart.
enum class PixelFormat { kBgr, kRgb, kGray };
Expected<DecodedImage> image_from_pixels(const uint8_t* pixels, int width, int height, size_t stride,
                                         PixelFormat format);

}  // namespace kiln::ocr
