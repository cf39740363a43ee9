// The reference GEMM shared by Conv, ConvTranspose, MatMul and Gemm: a blocked, row-major
// C = alpha * op(A) * op(B) + beta * C whose inner loop runs along rows of B and C so that
// the compiler vectorises it. Readable on purpose: it is the oracle for the fast kernels.
// Also MatMul's output shape rule, which MatMulInteger and QLinearMatMul share.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::ops {

// op(A) is M x K, op(B) is K x N, C is M x N; lda, ldb and ldc are the row strides (in
// elements) of A, B and C as stored (A is K x M when trans_a). When beta is 0, C is not
// read (NaN in C does not leak). Parallel over tiles of C with kiln::parallel_for unless
// `parallel` is false (callers that already parallelise over groups or batches).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, bool parallel = true);

extern template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                                 const float*, int64_t, float, float*, int64_t, bool);
extern template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t,
                                  const double*, int64_t, double, double*, int64_t, bool);

// Output shape of MatMul from possibly symbolic operand shapes (NumPy's matmul: 1-D operands
// promoted, batch dims broadcast); unknown rank when an operand's rank is unknown; an error
// when known inner dims differ or the batch dims do not broadcast.
Expected<Shape> matmul_shape(const ir::Node& node, const Shape& a, const Shape& b);

}  // namespace kiln::ops
