// What the Aipp fast kernel (aipp.cc) shares with kiln AippConv's (aipp_conv.cc): the plan of
// one image's preprocessing, a job over output rows, and the row function of the best SIMD
// target this CPU runs. AippConv calls the same rows into a strip buffer instead of the
// whole float32 image (docs/aipp.md, "The first convolution folded into the Aipp node").
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/aipp_params.h"

namespace kiln::kernels::aipp_simd {

// AVX-512 VBMI replacement of a 32-bit gather for one vector of 16 lanes: each lane's byte
// comes from one of one or two 128-byte windows of a row, picked with vpermt2b straight into
// the lane's low byte (index: the lane's row byte minus `win`, computed from the column taps
// at run time; the lane's other three bytes zeroed by the mask), so a lane is the byte's value
// with no shift or mask before its conversion to float. The windows depend on the column taps
// only, the same for every row: made once per plan (make_byte_windows).
struct ByteWindows {
  int32_t win[2] = {0, 0};
  uint64_t mask[2] = {0, 0};  // bit 4i: lane i reads window k; mask[1] 0: one window
  bool blend = true;          // false: every lane's right-tap weight is 0 (the left tap's value)
};

// One image's parameters, decoded into what the row loop reads.
struct ImagePlan {
  ops::AippFormat format = ops::AippFormat::kUndefined;
  bool rbuv_swap = false, ax_swap = false, csc = false;
  int32_t src_w = 0, src_h = 0;
  int32_t rw = 0, rh = 0;        // the resized (or cropped) region
  int32_t left = 0, top = 0;     // where it sits in the output
  float padding_value = 0;
  float m[9] = {}, ib[3] = {}, ob[3] = {};  // CSC: matrix / 256, input and output biases
  float scale[4] = {1, 1, 1, 1}, bias[4] = {};  // DTC as v * scale + bias
  // CSC and DTC folded into one for the row loop: channel r < 3 is
  // clamp(sum_j csc_m[3r + j] (in_j - ib_j) + csc_b[r], csc_lo[r], csc_hi[r]), the matrix and the
  // output bias scaled by `scale`, the clamp to [0, 255] moved through the DTC.
  float csc_m[9] = {}, csc_b[3] = {}, csc_lo[3] = {}, csc_hi[3] = {};
  std::vector<int32_t> x0;  // per column of the region: absolute source column of the left tap
  std::vector<float> wx;    // weight of the right tap
  std::vector<int32_t> y0;
  std::vector<float> wy;
  // The crop is at least 2 wide (high): x0 + 1 (y0 + 1) is inside it. A crop 1 wide has
  // one column: x0 with weight 0 on a second tap that is x0 itself.
  bool taps2_x = true, taps2_y = true;
  ops::AippParams fetch_view;  // what ops::aipp_fetch_pixel reads (the scalar path)
  // Semi-planar YUV on AVX-512 VBMI: per vector of 16 region columns, the windows of the Y
  // bytes (x0, x0+1) and of the chroma bytes (the pairs of x0 and x0+1), no gathers.
  bool byte_windows = false;
  std::vector<ByteWindows> y_windows, uv_windows;
};

// What one run computes: all images, output rows in parallel.
struct Job {
  const uint8_t* images = nullptr;
  int64_t image_stride = 0;   // bytes from one image to the next
  const uint8_t* buffer_end = nullptr;
  const ImagePlan* plans = nullptr;  // one per image, or one for all
  bool one_plan = true;
  int64_t batch = 1, channels = 3, height = 0, width = 0;
  bool nhwc = false;
  bool stream = false;  // non-temporal stores of the output (NCHW rows)
  // NCHW: output row y of image n, channel c starts at
  // dst + n * image_floats + c * plane_floats + (y - row0) * width. The whole output:
  // C*H*W, H*W and 0; kiln AippConv (aipp_conv.cc) points them at a strip of rows.
  float* dst = nullptr;
  int64_t image_floats = 0, plane_floats = 0, row0 = 0;
  // The thread's previous call was on this run's rows (AippConv's next strip): its cached
  // resampled source rows and prefetches stay valid (the first call of a run resets them).
  bool continues = false;
};

using RowsFn = void (*)(const Job&, int64_t, int64_t);
// aipp_rows of the best compiled target this CPU runs, and its name ("avx512", ...).
RowsFn select_rows();
const char* rows_target_name();
// A job over the whole output `out` for a batch of raw images in `image` (checked by
// ops::check_aipp_image) with their plans: everything but dst and stream.
Job make_job(const ops::AippOutputDesc& out, const Tensor& image, const std::vector<ImagePlan>& plans);
// One plan per batch entry of the parameters (one for all images, or one per image).
std::vector<ImagePlan> make_plans(const ops::AippParams& p);

}  // namespace kiln::kernels::aipp_simd
