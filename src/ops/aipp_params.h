// AIPP (CANN's "AI pre-processing"): the image preprocessing Kiln compiles into a model's
// input. The parameters, their validation, the raw-image shape each input format takes, and
// the byte layout that carries the parameters both in a static Aipp node's attribute and in
// the extra input of a dynamic one (filled at run time by kilnmdlSetInputAIPP).
//
// What the Aipp op computes, per image n and output pixel (y, x) — docs/aipp.md states the
// same with the rounding of every step; tests/preprocess/aipp_test.py checks it in NumPy:
//   1. crop: the window (load_start_pos_w/h, crop_size_w/h) of the source image;
//   2. channel fetch: each source pixel gives 3 (or 1, or 4) channel values in the order of
//      the format (Y,U,V or R,G,B), chroma of subsampled formats taken from the pixel's
//      chroma sample (nearest, as OpenCV's cvtColor); rbuv_swap_switch swaps U/V (NV21) or
//      R/B; ax_swap_switch says the alpha/X byte of a 4-byte format is last, not first;
//   3. resize: bilinear with half-pixel centres on the channel values of step 2, from the
//      crop size to resize_output_w/h (source coordinate (o + 0.5) * in / out - 0.5,
//      clamped to the image; OpenCV INTER_LINEAR's taps, without antialiasing). Resizing
//      before the colour conversion is the DVPP -> AIPP order of CANN's video pipelines
//      (the scaler works on YUV) and converts each output pixel once instead of each source
//      pixel it reads: 3.4x fewer conversions for 1080p -> 640x640;
//   4. colour-space conversion (csc_switch): v_c = clamp(sum_j M[c][j] * (in_j - input_bias_j)
//      / 256 + output_bias_c, 0, 255), in float, no rounding (M in ATC's 1/256 units);
//   5. data type conversion: out_c = (v_c - mean_chn_c - min_chn_c) * var_reci_chn_c;
//   6. padding: the result placed at (left, top) of the output, padding_value (in the
//      output's domain, after step 5) around it.
// The output is float32 in the model input's layout (NCHW or NHWC).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::ops {

// ATC's InputFormat numbers.
enum class AippFormat : int32_t {
  kUndefined = 0,
  kYuv420sp = 1,  // NV12 (NV21 with rbuv_swap_switch): Y plane H x W, then interleaved UV H/2 x W
  kXrgb8888 = 2,  // 4 bytes per pixel, X first (last with ax_swap_switch)
  kRgb888 = 3,    // 3 bytes per pixel
  kYuv400 = 4,    // Y only (grey)
  kArgb8888 = 7,  // 4 bytes per pixel, A first (last with ax_swap_switch)
  kYuyv = 8,      // packed 4:2:2: Y0 U Y1 V per two pixels
  kYuv422sp = 9,  // NV16: Y plane H x W, then interleaved UV H x W
  kAyuv444 = 10,  // 4 bytes per pixel: A Y U V (Y U V A with ax_swap_switch)
};
const char* aipp_format_name(AippFormat f);  // "YUV420SP_U8", ...; "UNDEFINED" for others
bool aipp_format_known(AippFormat f);
int aipp_format_channels(AippFormat f);        // colour channels + alpha: 1, 3 or 4
bool aipp_format_is_yuv(AippFormat f);

// Parameters that may differ per image of a batch (dynamic AIPP sets them per batch index,
// as AscendCL's kilnmdlSetAIPPCropParams(..., batchIndex)).
struct AippBatchParams {
  bool crop = false;
  int32_t crop_x = 0, crop_y = 0, crop_w = 0, crop_h = 0;  // load_start_pos_w/h, crop_size_w/h
  bool resize = false;
  int32_t resize_w = 0, resize_h = 0;  // resize_output_w/h
  bool padding = false;
  int32_t pad_left = 0, pad_right = 0, pad_top = 0, pad_bottom = 0;
  float padding_value = 0;
  float mean[4] = {0, 0, 0, 0};
  float min[4] = {0, 0, 0, 0};
  float var_reci[4] = {1, 1, 1, 1};
};

struct AippParams {
  AippFormat format = AippFormat::kUndefined;
  int32_t src_w = 0, src_h = 0;  // src_image_size_w/h
  bool csc = false;
  float matrix[3][3] = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}};  // matrix_r<row>c<col>, in 1/256
  float input_bias[3] = {0, 0, 0};
  float output_bias[3] = {0, 0, 0};
  bool rbuv_swap = false;
  bool ax_swap = false;
  // One entry applies to every image; otherwise one per image of the batch.
  std::vector<AippBatchParams> batch{AippBatchParams{}};

  const AippBatchParams& for_image(int64_t n) const {
    return batch.size() == 1 ? batch[0] : batch[static_cast<size_t>(n)];
  }
  std::string to_text() const;  // the configuration in aipp.cfg's field names, one line
};

// Colour-space presets (Kiln's csc_preset field): YUV -> RGB with ITU-R BT.601 / BT.709
// coefficients, full range (JPEG) or narrow ("video", Y in 16..235) range.
enum class CscPreset { kNone, kBt601Narrow, kBt601Full, kBt709Narrow, kBt709Full };
// Sets matrix and biases for YUV -> RGB (or BGR when `bgr`).
void apply_csc_preset(AippParams& p, CscPreset preset, bool bgr);

// The raw input one image of `format` and size takes, without the batch dim: YUV420SP
// [H*3/2, W], YUV422SP [H*2, W], YUV400 [H, W], YUYV [H, W*2], RGB888 [H, W, 3], the 4-byte
// formats [H, W, 4]. Errors when W or H does not suit the format (odd sizes of 4:2:x).
Expected<std::vector<int64_t>> aipp_image_dims(AippFormat format, int32_t w, int32_t h);
int64_t aipp_image_bytes(AippFormat format, int32_t w, int32_t h);  // product of the dims

// Where the output goes: the model input's layout and size.
struct AippOutputDesc {
  bool nhwc = false;   // false: [N, C, H, W]
  int64_t batch = 1, channels = 3, height = 0, width = 0;
};

// Checks the parameters against themselves and against the output they must fill. Errors
// name the config field ("crop_size_w 300 + load_start_pos_w 10 exceeds src_image_size_w 300").
Status validate_aipp(const AippParams& p, const AippOutputDesc& out);

// The byte layout (little-endian, versioned) of parameters in a tensor: the static node's
// "params" attribute and a dynamic model's parameter input hold this.
std::vector<uint8_t> serialize_aipp(const AippParams& p);
Expected<AippParams> deserialize_aipp(const uint8_t* data, size_t size);
// Bytes of the serialized form for `batch` per-image entries (a dynamic model's parameter
// input is sized for its batch).
size_t aipp_serialized_bytes(int64_t batch);

// The Aipp node's attributes (kKilnDomain op "Aipp"):
//   mode: "static" (params attribute) or "dynamic" (params read from input 1 at run time);
//   params: uint8 tensor, serialize_aipp's layout (static only);
//   output_layout: "NCHW" or "NHWC"; output_shape: the model input's dims;
//   max_src_image_size: bytes of input 0 per image (dynamic only).
inline constexpr const char* kAippOp = "Aipp";

}  // namespace kiln::ops

namespace kiln::ops {

// One `aipp_op { ... }` of a configuration file, for the compiler to insert.
struct AippInsertion {
  int64_t input_index = 0;  // related_input_rank: which model input (among non-weight inputs)
  bool dynamic = false;     // aipp_mode
  AippParams params;        // static: everything; src size 0 means the model input's size
  int64_t max_src_image_size = 0;  // dynamic: bytes of the largest image
  std::string where;        // "aipp.cfg:3" (the block), for errors
  // Line of each field set in the file, so an error naming a field can name its line.
  std::vector<std::pair<std::string, int>> field_lines;
  // "aipp.cfg:7: <message>" when the message names a field set in the file, else
  // "aipp.cfg:3: <message>".
  std::string locate(const std::string& message) const;
};

}  // namespace kiln::ops
