// Encoded images (JPEG, PNG, WebP, TIFF, JPEG 2000, BMP, PNM) decoded to 8-bit RGB by the
// system libraries Pillow uses (pixels match Pillow's Image.open(...).convert("RGB"); no
// EXIF rotation, as Pillow), as the ImageDecoder op does. The tools that read picture files
// (kiln ocr's formats beyond PNG and JPEG, kiln quantize's calibration images) use it rather
// than OpenCV's imgcodecs, whose dependency tree (GDAL, DICOM, HDF5, ...: 139 libraries)
// took 0.24 s of every start of the kiln command and of `import kiln`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/status.h"

namespace kiln::ops {

struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3, row-major
};

// Errors say what is wrong with the data (unknown format, truncated, too large: above 2^28
// pixels, since a hostile header can claim any size).
Expected<RgbImage> decode_image_bytes(const uint8_t* data, size_t size);

}  // namespace kiln::ops
