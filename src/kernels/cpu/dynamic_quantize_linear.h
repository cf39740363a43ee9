// DynamicQuantizeLinear's SIMD passes (dynamic_quantize_linear.cc) for kernels that quantise
// an activation on the fly (FusedDynamicQuantMatMul).
#pragma once

#include <cstdint>

namespace kiln::kernels {

// x[0, n) float32 -> q uint8 with the scale and zero point DynamicQuantizeLinear computes, bit
// for bit as its reference kernel (NaN ignored in the range, quantised to the zero point's
// rounding of 0). Runs in parallel (parallel_for). False, q untouched, when x holds an infinity
// (a non-finite range): the caller runs its reference kernel then.
bool dynamic_quantize_u8(const float* x, int64_t n, uint8_t* q, float* scale, uint8_t* zero_point);

}  // namespace kiln::kernels
