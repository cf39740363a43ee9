// Conversions between Kiln's activation layouts (plain NCHW, channel-blocked NC1HWC0) and
// the NHWC layout oneDNN's AMX / AVX512-BF16 convolutions compute in, for the bf16 and bf16x3
// convolution kernels (conv.cc). oneDNN's generic reorders between these layouts ran at a
// fraction of the memory bandwidth (jit:uni; 13 of 19 ms of a bf16 ResNet-50 at one thread),
// and bf16x3's split source has no oneDNN reorder at all.
//
// Split bfloat16 (bf16x3): x = hi + lo + r with hi = bf16(x), lo = bf16(x - hi) and |r| <=
// 2^-17 |x|. A product x*w becomes hi_x*hi_w + hi_x*lo_w + lo_x*hi_w (the lo*lo term is below
// float32's rounding of the sum), which one bf16 convolution computes over three times the
// input channels: per group, source channels [hi_x | hi_x | lo_x] against weight input
// channels [hi_w | lo_w | hi_w]. MKL's BF16X3 compute mode does the same for GEMM.
#pragma once

#include <cstdint>

namespace kiln::kernels::bf16 {

// A 4-D float32 activation tensor: N C H W, plain (c0 == 0) or NC1HWC0 with c0 channels per
// block (C a multiple of c0).
struct ActivationLayout {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t c0 = 0;
};

// Source of a bf16 convolution: x (laid out as `l`) into out, NHWC bfloat16 with
// l.c * parts channels. parts 1: bf16(x). parts 3 (bf16x3): per group of c / groups
// channels, [hi | hi | lo]. Rows of pixels in parallel.
void to_nhwc_bf16(const float* x, const ActivationLayout& l, int parts, int64_t groups, uint16_t* out);

// Weights of a bf16x3 convolution: w is O x Cg x K (K = kernel elements, Cg input channels per
// group), out is O x 3Cg x K float32 holding bfloat16 values: input channels [hi | lo | hi].
void split_weights_bf16x3(const float* w, int64_t o, int64_t cg, int64_t k, float* out);

// NHWC float32 <-> `l` (the destination of a convolution, and a residual read into it).
void nhwc_to_layout(const float* src, const ActivationLayout& l, float* dst);
void layout_to_nhwc(const float* src, const ActivationLayout& l, float* dst);

}  // namespace kiln::kernels::bf16
