// The channel-blocked layout by its definition (docs/fused-ops.md), written out as the kernel
// tests' own oracle rather than through Kiln's TransData.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln::kernels::testing {

// [N, C, H, W] -> [N, C/c0, H, W, c0]: element (n, c, h, w) goes to (n, c / c0, h, w, c % c0).
inline Tensor block_by_definition(const Tensor& t, int64_t c0) {
  const int64_t n = t.dim(0), c = t.dim(1), h = t.dim(2), w = t.dim(3);
  Tensor out = Tensor::make(DataType::kFloat32, {n, c / c0, h, w, c0});
  for (int64_t a = 0; a < n; ++a)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          out.data<float>()[(((a * (c / c0) + ch / c0) * h + y) * w + x) * c0 + ch % c0] =
              t.data<float>()[((a * c + ch) * h + y) * w + x];
  return out;
}

}  // namespace kiln::kernels::testing
