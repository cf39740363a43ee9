// How fast can any schedule make LayerNorm over [ROWS, 768] at one thread? (issue 31) LayerNorm
// written by hand with AVX-512 intrinsics in the loop nests a DSL schedule can reach and in some
// it cannot (rows interleaved, software-pipelined), plus the memory floor (one pass reading X and
// writing Y), raced in alternated rounds against the DSL's default schedule's loop nest written
// the same way. It bounds the gain tuning can show over the default: bench/dsl_layernorm_floor.sh
// builds it with the flags of the DSL's kernels (docs/dsl.md) and runs it.
//
//   dsl_layernorm_floor [ROWS] [ROUNDS] [CALLS]     (defaults 128, 31, 20 * 128 / ROWS calls a round)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#ifndef __AVX512F__
#error "dsl_layernorm_floor needs AVX-512 (build with -march=native on an AVX-512 machine)"
#endif

namespace {

constexpr int64_t kCols = 768;  // BERT-base's hidden size
constexpr float kEps = 1e-5f;

struct Args {
  const float* x;
  const float* gamma;
  const float* beta;
  float* y;
  int64_t rows;
};

float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// The sum of a row in A independent accumulators (A * 16 lanes), combined by a halving tree.
template <int A>
__m512 row_sum(const float* x) {
  __m512 acc[A];
  for (int a = 0; a < A; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kCols; k += 16 * A)
    for (int a = 0; a < A; ++a) acc[a] = _mm512_add_ps(acc[a], _mm512_loadu_ps(x + k + 16 * a));
  for (int w = A / 2; w >= 1; w /= 2)
    for (int a = 0; a < w; ++a) acc[a] = _mm512_add_ps(acc[a], acc[a + w]);
  return acc[0];
}

template <int A>
__m512 row_sqdev(const float* x, __m512 mean) {
  __m512 acc[A];
  for (int a = 0; a < A; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kCols; k += 16 * A)
    for (int a = 0; a < A; ++a) {
      __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + k + 16 * a), mean);
      acc[a] = _mm512_fmadd_ps(d, d, acc[a]);
    }
  for (int w = A / 2; w >= 1; w /= 2)
    for (int a = 0; a < w; ++a) acc[a] = _mm512_add_ps(acc[a], acc[a + w]);
  return acc[0];
}

// Pointers are passed by value, never read through Args inside a loop: _mm512_storeu_ps may alias
// anything, so a pointer read from memory would be reloaded after every store.
void row_out(const Args& p, const float* x, float* y, __m512 mean, __m512 rstd) {
  const float* gamma = p.gamma;
  const float* beta = p.beta;
  for (int64_t j = 0; j < kCols; j += 16) {
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mean), rstd);
    _mm512_storeu_ps(y + j, _mm512_fmadd_ps(v, _mm512_loadu_ps(gamma + j), _mm512_loadu_ps(beta + j)));
  }
}

float rstd_of(float sqdev) { return 1.0f / std::sqrt(sqdev / kCols + kEps); }

// The DSL's default schedule's loop nest, as its code generator emits it (kiln dsl --example
// layernorm --emit c): three passes over the rows (sum, squared deviations, output), each
// reduction an `omp simd reduction` (one vector accumulator).
__attribute__((noinline)) void three_passes(const Args& p, std::vector<float>& total_v, std::vector<float>& sq_v) {
  const float* __restrict x = p.x;
  const float* __restrict gamma = p.gamma;
  const float* __restrict beta = p.beta;
  float* __restrict y = p.y;
  float* __restrict total = total_v.data();
  float* __restrict sq = sq_v.data();
  for (int64_t i = 0; i < p.rows; ++i) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < kCols; ++k) acc = acc + x[i * kCols + k];
    total[i] = acc;
  }
  for (int64_t i = 0; i < p.rows; ++i) {
    float acc = 0.0f;
    const float t = total[i];
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < kCols; ++k)
      acc = acc + (x[i * kCols + k] - t / static_cast<float>(kCols)) * (x[i * kCols + k] - t / static_cast<float>(kCols));
    sq[i] = acc;
  }
  for (int64_t i = 0; i < p.rows; ++i) {
    const float t = total[i], q = sq[i];
#pragma omp simd
    for (int64_t j = 0; j < kCols; ++j)
      y[i * kCols + j] = (x[i * kCols + j] - t / static_cast<float>(kCols)) *
                             (1.0f / std::sqrt(q / static_cast<float>(kCols) + kEps)) * gamma[j] + beta[j];
  }
}

// Every stage in the row loop (fuse_rows), A accumulators (lanes = 16 * A): the tuned point.
template <int A>
__attribute__((noinline)) void fused_rows(const Args& p) {
  for (int64_t i = 0; i < p.rows; ++i) {
    const float* x = p.x + i * kCols;
    const __m512 mean = _mm512_set1_ps(hsum(row_sum<A>(x)) / kCols);
    row_out(p, x, p.y + i * kCols, mean, _mm512_set1_ps(rstd_of(hsum(row_sqdev<A>(x, mean)))));
  }
}

// Not expressible as a schedule of the DSL's LayerNorm compute: one pass for the sum and the sum
// of squares (var = E[x^2] - mean^2, another compute), then the output.
__attribute__((noinline)) void one_pass_moments(const Args& p) {
  for (int64_t i = 0; i < p.rows; ++i) {
    const float* x = p.x + i * kCols;
    __m512 s[4], q[4];
    for (int a = 0; a < 4; ++a) s[a] = q[a] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kCols; k += 64)
      for (int a = 0; a < 4; ++a) {
        __m512 v = _mm512_loadu_ps(x + k + 16 * a);
        s[a] = _mm512_add_ps(s[a], v);
        q[a] = _mm512_fmadd_ps(v, v, q[a]);
      }
    const float mean = hsum(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), _mm512_add_ps(s[2], s[3]))) / kCols;
    const float var = hsum(_mm512_add_ps(_mm512_add_ps(q[0], q[1]), _mm512_add_ps(q[2], q[3]))) / kCols - mean * mean;
    row_out(p, x, p.y + i * kCols, _mm512_set1_ps(mean), _mm512_set1_ps(1.0f / std::sqrt(var + kEps)));
  }
}

// Two rows per iteration with their reductions interleaved in one loop (independent chains side
// by side), then both outputs: what a row tile with the tile's rows inside the reduction gives.
__attribute__((noinline)) void two_rows_interleaved(const Args& p) {
  int64_t i = 0;
  for (; i + 1 < p.rows; i += 2) {
    const float* x0 = p.x + i * kCols;
    const float* x1 = x0 + kCols;
    __m512 a[4], b[4];
    for (int t = 0; t < 4; ++t) a[t] = b[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kCols; k += 64)
      for (int t = 0; t < 4; ++t) {
        a[t] = _mm512_add_ps(a[t], _mm512_loadu_ps(x0 + k + 16 * t));
        b[t] = _mm512_add_ps(b[t], _mm512_loadu_ps(x1 + k + 16 * t));
      }
    const __m512 m0 = _mm512_set1_ps(hsum(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))) / kCols);
    const __m512 m1 = _mm512_set1_ps(hsum(_mm512_add_ps(_mm512_add_ps(b[0], b[1]), _mm512_add_ps(b[2], b[3]))) / kCols);
    for (int t = 0; t < 4; ++t) a[t] = b[t] = _mm512_setzero_ps();
    for (int64_t k = 0; k < kCols; k += 64)
      for (int t = 0; t < 4; ++t) {
        __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x0 + k + 16 * t), m0);
        a[t] = _mm512_fmadd_ps(d, d, a[t]);
        d = _mm512_sub_ps(_mm512_loadu_ps(x1 + k + 16 * t), m1);
        b[t] = _mm512_fmadd_ps(d, d, b[t]);
      }
    row_out(p, x0, p.y + i * kCols, m0,
            _mm512_set1_ps(rstd_of(hsum(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]))))));
    row_out(p, x1, p.y + (i + 1) * kCols, m1,
            _mm512_set1_ps(rstd_of(hsum(_mm512_add_ps(_mm512_add_ps(b[0], b[1]), _mm512_add_ps(b[2], b[3]))))));
  }
  for (; i < p.rows; ++i) {
    const float* x = p.x + i * kCols;
    const __m512 mean = _mm512_set1_ps(hsum(row_sum<4>(x)) / kCols);
    row_out(p, x, p.y + i * kCols, mean, _mm512_set1_ps(rstd_of(hsum(row_sqdev<4>(x, mean)))));
  }
}

// The memory floor: one pass reading X and writing Y (y = x * gamma + beta), no reduction.
__attribute__((noinline)) void read_write_floor(const Args& p) {
  const float* x = p.x;
  const float* gamma = p.gamma;
  const float* beta = p.beta;
  float* y = p.y;
  for (int64_t i = 0; i < p.rows; ++i)
    for (int64_t j = 0; j < kCols; j += 16)
      _mm512_storeu_ps(y + i * kCols + j, _mm512_fmadd_ps(_mm512_loadu_ps(x + i * kCols + j),
                                                          _mm512_loadu_ps(gamma + j), _mm512_loadu_ps(beta + j)));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 128;
  const int rounds = argc > 2 ? std::max(3, std::atoi(argv[2])) : 31;
  if (rows < 1 || rows > (1 << 20)) {
    std::fprintf(stderr, "dsl_layernorm_floor: ROWS must be 1..1048576, got %s\n", argv[1]);
    return 2;
  }
  std::vector<float> x(rows * kCols), y(rows * kCols), gamma(kCols), beta(kCols), total(rows), sq(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * 2.0f + 0.5f;
  for (int64_t j = 0; j < kCols; ++j) gamma[j] = 1.0f + 0.001f * j, beta[j] = 0.01f * (j % 7);
  const Args p{x.data(), gamma.data(), beta.data(), y.data(), rows};

  // Each variant's output is checked against double-precision LayerNorm first (the floor excepted).
  std::vector<double> want(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (int64_t k = 0; k < kCols; ++k) s += x[i * kCols + k];
    const double m = s / kCols;
    for (int64_t k = 0; k < kCols; ++k) q += (x[i * kCols + k] - m) * (x[i * kCols + k] - m);
    const double r = 1.0 / std::sqrt(q / kCols + kEps);
    for (int64_t k = 0; k < kCols; ++k) want[i * kCols + k] = (x[i * kCols + k] - m) * r * gamma[k] + beta[k];
  }
  struct Variant {
    const char* name;
    std::function<void()> fn;
    bool check;
    std::vector<double> us;
  };
  std::vector<Variant> vs = {
      {"three passes (default)", [&] { three_passes(p, total, sq); }, true, {}},
      {"fused rows, 64 lanes", [&] { fused_rows<4>(p); }, true, {}},
      {"fused rows, 128 lanes", [&] { fused_rows<8>(p); }, true, {}},
      {"two rows interleaved", [&] { two_rows_interleaved(p); }, true, {}},
      {"one-pass moments", [&] { one_pass_moments(p); }, true, {}},
      {"read X, write Y (floor)", [&] { read_write_floor(p); }, false, {}},
  };
  for (Variant& v : vs) {
    if (!v.check) continue;
    v.fn();
    double err = 0;
    for (size_t i = 0; i < y.size(); ++i) err = std::max(err, std::fabs(y[i] - want[i]));
    if (err > 1e-4) {
      std::fprintf(stderr, "dsl_layernorm_floor: %s differs from the double reference by %g\n", v.name, err);
      return 1;
    }
  }
  const int inner = argc > 3 ? std::max(1, std::atoi(argv[3])) : static_cast<int>(std::max<int64_t>(1, 20 * 128 / rows));
  for (int r = 0; r < rounds; ++r)
    for (Variant& v : vs) {
      v.fn();  // untimed: the variant before left other data in the caches
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < inner; ++i) v.fn();
      v.us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / inner);
    }
  const double base = median(vs[0].us);
  std::printf("LayerNorm [%lld, %lld], one thread, medians of %d alternated rounds of %d calls\n",
              static_cast<long long>(rows), static_cast<long long>(kCols), rounds, inner);
  for (Variant& v : vs)
    std::printf("  %-26s %9.2f us   default / this %5.2fx\n", v.name, median(v.us), base / median(v.us));
  return 0;
}
