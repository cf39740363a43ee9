// The SIMD Gelu of gelu.cc for other fast kernels' epilogues (a matmul whose fused activation
// is Gelu): the reference formula costs ~20 ns per element, as much as the product itself on
// BERT's feed-forward layer.
#pragma once

#include <cstdint>

namespace kiln::kernels {

// y[i] = gelu(y[i]) for i in [0, n), erf form or tanh form, in parallel chunks; the same
// arithmetic as the kiln Gelu kernel (within a few float32 eps of the reference).
void gelu_in_place(float* y, int64_t n, bool tanh_form);
// Same on the calling thread only (for kernels that already run in parallel chunks).
void gelu_span(float* y, int64_t n, bool tanh_form);

}  // namespace kiln::kernels
