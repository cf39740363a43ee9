// Calibration images -> model input tensors: the --preprocess spec of `kiln quantize` and
// its application (decoding as Pillow decodes, colour conversion and resize with OpenCV, scale,
// mean/std, layout).
//
// Spec: colon-separated KEY=VALUE items, every one optional:
//   resize=H,W     output size (default: the model input's static H and W); bilinear, no crop
//   scale=S        pixels (0..255) are multiplied by S first (default 1/255; "1/255" or a number)
//   mean=M[,M,M]   subtracted after scaling, per channel (default 0)
//   std=S[,S,S]    divided by after that, per channel (default 1)
//   layout=NCHW|NHWC   (default NCHW)
//   color=RGB|BGR|GRAY (default RGB)
// e.g. "resize=224,224:mean=0.485,0.456,0.406:std=0.229,0.224,0.225:layout=NCHW:color=RGB".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::quant {

struct ImagePreprocess {
  int64_t height = 0, width = 0;  // 0: from the model input
  double scale = 1.0 / 255.0;
  std::vector<float> mean{0.0f}, std{1.0f};  // 1 or channels entries
  bool nchw = true;
  enum class Color { kRgb, kBgr, kGray } color = Color::kRgb;
};

// Parses a spec; errors name the item at fault.
Expected<ImagePreprocess> parse_image_preprocess(const std::string& spec);

// Resolves the defaults against a float32 model input of rank 4 (`dims`, -1 for an open dim):
// the size, and that the channel count matches the colour.
Status resolve_image_preprocess(ImagePreprocess& p, const std::vector<int64_t>& dims, const std::string& input);

// Reads one image file into a [1, C, H, W] (or [1, H, W, C]) float32 tensor. Errors name the file.
Expected<Tensor> load_image(const std::string& path, const ImagePreprocess& p);

// Whether a file name has an image extension the decoders read (png, jpg, jpeg, bmp, tif, tiff, webp, ppm, pgm).
bool is_image_file(const std::string& path);

}  // namespace kiln::quant
