// Channel-blocked tensor layout, the CPU twin of CANN's 5HD format (NC1HWC0): a tensor of
// logical shape [N, C, S...] is stored as [N, C1, S..., C0] with C1 = C / C0, so the C0
// channels of one pixel are contiguous and a convolution kernel loads them as one vector
// (C0 = 8 floats for AVX2, 16 for AVX-512). In the graph a blocked value simply has the
// 5-D (for 2-D images) shape, so shape inference, memory planning and the executor need
// nothing special; the ops that read or write it say so with a format attribute, and the
// kiln TransData op converts between the two (docs/fused-ops.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln::ops {

inline constexpr const char* kFormatPlain = "NCHW";       // [N, C, S...]
inline constexpr const char* kFormatBlocked = "NC1HWC0";  // [N, C/C0, S..., C0]

// Whether `format` is one of the two names above.
bool valid_format(const std::string& format);
bool is_blocked_format(const std::string& format);

// [N, C, S...] -> [N, C/c0, S..., c0]. Fails unless rank >= 3 and C (when known) is a
// multiple of c0 > 0.
Expected<Shape> blocked_shape(const Shape& plain, int64_t c0);
// [N, C1, S..., c0] -> [N, C1*c0, S...]. Fails unless rank >= 4 and the last dim (when
// known) equals c0.
Expected<Shape> plain_shape(const Shape& blocked, int64_t c0);

// Element copies between the layouts (float32, float64, float16, bfloat16 and any other
// fixed-size type: the data are moved, not converted). Parallel over N*C1.
Expected<Tensor> to_blocked(const Tensor& plain, int64_t c0);
Expected<Tensor> to_plain(const Tensor& blocked, int64_t c0);

}  // namespace kiln::ops
