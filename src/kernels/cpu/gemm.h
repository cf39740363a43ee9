// Kiln's fp32 GEMM for products with a constant right operand (the weights of MatMul and Gemm
// nodes): C[M, N] = act(alpha * A[M, K] B[K, N] + addends), with B packed once, when the
// model loads, into column panels the micro-kernel streams from L1.
//
// Why not only oneDNN: oneDNN 2.6's f32 matmul without AVX-512 is its gemm:jit, which packs B
// on every call (9.4 MB for BERT's 768x3072 feed-forward weight) and ran that layer at 41
// GFLOP/s of this CPU's ~100 per core; the packed kernel runs it at the core's FMA rate.
//
// Blocking (BLIS's, with B packed ahead of time): the micro-kernel computes a tile of
// kRows rows by one panel (two SIMD vectors: 16 columns on AVX2, 32 on AVX-512) in registers,
// over a K block sized so that the panel's slice (16 KiB) stays in L1 while every row tile
// of an M block (192 rows of A, in L2) streams past it. Work is split over threads by
// M block and by groups of panels (parallel_for). Highway, the AVX-512 / AVX2 / baseline
// version picked once (simd_dispatch.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "ops/fused_activation.h"

namespace kiln::kernels::gemm {

// B as column panels, in K blocks: block b holds rows [b * kc, (b + 1) * kc) of B (fewer in
// the last block), and within a block, panel after panel, the rows of columns [p * width,
// (p + 1) * width) (zeros past N). A block's sweep over its panels is then one sequential
// stream.
class PackedB {
 public:
  // Packs B of K rows and N columns whose element (k, n) is at b[k * row_stride + n *
  // col_stride] (so a transposed B is just other strides). For the SIMD target this CPU runs.
  static PackedB pack(const float* b, int64_t k, int64_t n, int64_t row_stride,
                      int64_t col_stride);
  // The same, shared by every caller packing the same constant B the same way (a node's
  // kernels at several input shapes); `b` must stay alive and unchanged while the result is
  // held (the kernels keep the initializer), as onednn::pack_shared.
  static std::shared_ptr<const PackedB> pack_shared(const float* b, int64_t k, int64_t n, int64_t row_stride,
                                                    int64_t col_stride);

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int64_t width() const { return width_; }
  int64_t block_rows() const { return kc_; }
  int64_t num_panels() const { return (n_ + width_ - 1) / width_; }
  // Panel p of the K block starting at row k0 (a multiple of block_rows()).
  const float* slice(int64_t k0, int64_t p) const {
    return data_.get() + k0 * num_panels() * width_ + p * std::min(kc_, k_ - k0) * width_;
  }
  size_t bytes() const { return static_cast<size_t>(num_panels() * k_ * width_) * sizeof(float); }

 private:
  struct Free {
    void operator()(float* p) const;
  };
  int64_t k_ = 0, n_ = 0, width_ = 0, kc_ = 0;
  std::unique_ptr<float[], Free> data_;
};

// Where C's elements live: element (i, j) at c[i * row_stride + (j / L) * vector_stride + j % L],
// L = vector_floats(). Row-major C is row_stride = ldc, vector_stride = L; a channel-blocked
// NC1HWC0 output with C0 = L (rows = pixels, columns = channels) is row_stride = C0,
// vector_stride = H * W * C0.
struct OutputLayout {
  float* c = nullptr;
  int64_t row_stride = 0;
  int64_t vector_stride = 0;
};

// What is added to the product and applied after it, per element (i, j) of C:
//   C = act(alpha * (A B)[i, j] + row_scale * row[j] + full_scale * full(i, j)),
// full laid out as C (same strides).
struct Epilogue {
  float alpha = 1.0f;
  const float* row = nullptr;  // [N], added to every row (a bias), or null
  float row_scale = 1.0f;
  const float* full = nullptr;  // laid out as C, or null
  float full_scale = 1.0f;
  ops::FusedActivation act;
};

// Rows of A as the micro-kernel reads them, for sources that are not a plain matrix (a
// convolution's input windows, gathered on the fly instead of an im2col copy).
class ASource {
 public:
  virtual ~ASource() = default;
  // Writes rows [i0, i0 + rows) (rows <= tile_rows()), columns [k0, k0 + kc) of A to `out`:
  // kc steps of tile_rows() values, step k holding A[i0 + r][k0 + k] at r (rows past `rows`
  // may hold anything).
  virtual void pack(int64_t i0, int64_t rows, int64_t k0, int64_t kc, float* out) const = 0;
};

// The micro-kernel's rows (the `out` stride of ASource::pack) and vector length in floats.
int64_t tile_rows();
int64_t vector_floats();

// C = the epilogue of A (m rows, B.k() columns) times B, in parallel (parallel_for). C must
// not overlap A or `full` (partial sums pass through C).
void multiply(int64_t m, const ASource& a, const PackedB& b, const OutputLayout& c,
              const Epilogue& epilogue);
// Row-major A (row stride lda) and C (row stride ldc).
void multiply(int64_t m, const float* a, int64_t lda, const PackedB& b, float* c, int64_t ldc,
              const Epilogue& epilogue);

// "avx2", "avx512" or "baseline": the SIMD target multiply() and pack() use on this CPU.
const char* target_name();

}  // namespace kiln::kernels::gemm
