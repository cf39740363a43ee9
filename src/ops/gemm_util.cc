// The reference GEMM: C tiles of kRowBlock x kColBlock, K walked in kDepthBlock slices so
// that the B panel a tile reads stays in L2 and the C tile in L1.
#include "ops/gemm_util.h"

#include <algorithm>
#include <vector>

#include "core/parallel.h"

namespace kiln::ops {
namespace {

constexpr int64_t kRowBlock = 16;
constexpr int64_t kColBlock = 512;
constexpr int64_t kDepthBlock = 256;

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc, bool parallel) {
  if (m <= 0 || n <= 0) return;
  // A transposed B would make the inner loop strided; one packed copy costs K*N, the
  // product M*K*N.
  std::vector<T> b_packed;
  if (trans_b && k > 0) {
    b_packed.resize(static_cast<size_t>(k * n));
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) b_packed[static_cast<size_t>(p * n + j)] = b[j * ldb + p];
    b = b_packed.data();
    ldb = n;
  }
  const int64_t row_tiles = (m + kRowBlock - 1) / kRowBlock;
  const int64_t col_tiles = (n + kColBlock - 1) / kColBlock;
  auto run_tiles = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / col_tiles) * kRowBlock, i1 = std::min(m, i0 + kRowBlock);
      const int64_t j0 = (t % col_tiles) * kColBlock, j1 = std::min(n, j0 + kColBlock);
      for (int64_t i = i0; i < i1; ++i) {
        T* crow = c + i * ldc;
        if (beta == T(0)) {
          for (int64_t j = j0; j < j1; ++j) crow[j] = T(0);
        } else if (beta != T(1)) {
          for (int64_t j = j0; j < j1; ++j) crow[j] *= beta;
        }
      }
      for (int64_t p0 = 0; p0 < k; p0 += kDepthBlock) {
        const int64_t p1 = std::min(k, p0 + kDepthBlock);
        for (int64_t i = i0; i < i1; ++i) {
          T* __restrict crow = c + i * ldc;
          for (int64_t p = p0; p < p1; ++p) {
            const T av = alpha * (trans_a ? a[p * lda + i] : a[i * lda + p]);
            const T* __restrict brow = b + p * ldb;
            for (int64_t j = j0; j < j1; ++j) crow[j] += av * brow[j];
          }
        }
      }
    }
  };
  const int64_t tiles = row_tiles * col_tiles;
  if (parallel) {
    // A tile is worth a thread when it holds enough multiply-adds to amortise the fork.
    const int64_t work_per_tile = std::min(m, kRowBlock) * std::min(n, kColBlock) * std::max<int64_t>(k, 1);
    parallel_for(0, tiles, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(work_per_tile, 1)), run_tiles);
  } else {
    run_tiles(0, tiles);
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                          int64_t, float, float*, int64_t, bool);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t, bool);

}  // namespace kiln::ops
