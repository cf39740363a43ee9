// Reduce kernels (acc = acc op in, and out = x op in) for every kilnCommDataType x
// kilnReduceOp. The loops are plain element-wise loops over __restrict pointers so GCC
// vectorises them for the target (-march=native); fp16 uses the F16C conversions when the
// target has them.
#include "comm/reduce_ops.h"

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#define KILN_COMM_HAVE_F16C 1
#endif

namespace kiln::comm {
namespace {

enum Op {
  kSum = KILN_REDUCE_SUM,
  kProd = KILN_REDUCE_PROD,
  kMax = KILN_REDUCE_MAX,
  kMin = KILN_REDUCE_MIN
};

// Integer arithmetic in an unsigned type at least as wide as int: wraps instead of the
// undefined signed overflow, and avoids int promotion overflowing (uint16 * uint16).
template <typename T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <Op kOp, typename T>
inline T combine(T a, T b) {
  if constexpr (kOp == kMax) {
    return a > b ? a : b;
  } else if constexpr (kOp == kMin) {
    return a < b ? a : b;
  } else if constexpr (std::is_floating_point_v<T>) {
    return kOp == kSum ? a + b : a * b;
  } else {
    using W = Wide<T>;
    return static_cast<T>(kOp == kSum ? static_cast<W>(a) + static_cast<W>(b)
                                      : static_cast<W>(a) * static_cast<W>(b));
  }
}

// Each family has an in-place form (acc op= in) and a three-buffer form (out = x op in):
// with __restrict on every pointer GCC vectorises both without run-time overlap checks,
// which an in-place call of the three-buffer form would fail (and run scalar).
template <Op kOp, typename T>
void apply_plain(void* acc, const void* in, size_t bytes) {
  T* __restrict a = static_cast<T*>(acc);
  const T* __restrict b = static_cast<const T*>(in);
  size_t n = bytes / sizeof(T);
  for (size_t i = 0; i < n; ++i) a[i] = combine<kOp>(a[i], b[i]);
}

template <Op kOp, typename T>
void apply_plain_to(void* out, const void* x, const void* in, size_t bytes) {
  T* __restrict o = static_cast<T*>(out);
  const T* __restrict a = static_cast<const T*>(x);
  const T* __restrict b = static_cast<const T*>(in);
  size_t n = bytes / sizeof(T);
  for (size_t i = 0; i < n; ++i) o[i] = combine<kOp>(a[i], b[i]);
}

// bfloat16: widening is a shift; narrowing rounds to nearest even, NaN kept quiet (as
// float_to_bf16 does), written without branches so the loop vectorises.
inline uint32_t bf16_round(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t quiet_nan = (u >> 16) | 0x40u;
  return (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
}

inline float bf16_widen(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

template <Op kOp>
inline uint16_t combine_bf16(uint16_t a, uint16_t b) {
  return static_cast<uint16_t>(bf16_round(combine<kOp>(bf16_widen(a), bf16_widen(b))));
}

template <Op kOp>
void apply_bf16(void* acc, const void* in, size_t bytes) {
  uint16_t* __restrict a = static_cast<uint16_t*>(acc);
  const uint16_t* __restrict b = static_cast<const uint16_t*>(in);
  size_t n = bytes / 2;
  for (size_t i = 0; i < n; ++i) a[i] = combine_bf16<kOp>(a[i], b[i]);
}

template <Op kOp>
void apply_bf16_to(void* out, const void* x, const void* in, size_t bytes) {
  uint16_t* __restrict o = static_cast<uint16_t*>(out);
  const uint16_t* __restrict a = static_cast<const uint16_t*>(x);
  const uint16_t* __restrict b = static_cast<const uint16_t*>(in);
  size_t n = bytes / 2;
  for (size_t i = 0; i < n; ++i) o[i] = combine_bf16<kOp>(a[i], b[i]);
}

#ifdef KILN_COMM_HAVE_F16C
template <Op kOp>
inline __m256 combine8(__m256 a, __m256 b) {
  if constexpr (kOp == kSum) return _mm256_add_ps(a, b);
  if constexpr (kOp == kProd) return _mm256_mul_ps(a, b);
  // maxps(a, b) is a > b ? a : b (its second operand when the comparison is false, NaN
  // included), exactly what the scalar tail computes.
  if constexpr (kOp == kMax) return _mm256_max_ps(a, b);
  return _mm256_min_ps(a, b);
}
#endif

// out = x op in; out may be x (explicit vector code: each group of 8 is loaded before it
// is stored, so one function serves both forms).
template <Op kOp>
void apply_fp16_to(void* out, const void* x, const void* in, size_t bytes) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* a = static_cast<const uint16_t*>(x);
  const uint16_t* b = static_cast<const uint16_t*>(in);
  size_t n = bytes / 2;
  size_t i = 0;
#ifdef KILN_COMM_HAVE_F16C
  for (; i + 8 <= n; i += 8) {
    __m256 va = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 vb = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m128i r = _mm256_cvtps_ph(combine8<kOp>(va, vb), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), r);
  }
#endif
  for (; i < n; ++i) o[i] = float_to_fp16(combine<kOp>(fp16_to_float(a[i]), fp16_to_float(b[i])));
}

template <Op kOp>
void apply_fp16(void* acc, const void* in, size_t bytes) {
  apply_fp16_to<kOp>(acc, acc, in, bytes);
}

template <typename T>
struct PlainKernels {
  static constexpr Reducer kSumR{sizeof(T), &apply_plain<kSum, T>, &apply_plain_to<kSum, T>};
  static constexpr Reducer kProdR{sizeof(T), &apply_plain<kProd, T>, &apply_plain_to<kProd, T>};
  static constexpr Reducer kMaxR{sizeof(T), &apply_plain<kMax, T>, &apply_plain_to<kMax, T>};
  static constexpr Reducer kMinR{sizeof(T), &apply_plain<kMin, T>, &apply_plain_to<kMin, T>};
  static constexpr const Reducer* kAll[4] = {&kSumR, &kProdR, &kMaxR, &kMinR};
};

constexpr Reducer kFp16[4] = {{2, &apply_fp16<kSum>, &apply_fp16_to<kSum>},
                              {2, &apply_fp16<kProd>, &apply_fp16_to<kProd>},
                              {2, &apply_fp16<kMax>, &apply_fp16_to<kMax>},
                              {2, &apply_fp16<kMin>, &apply_fp16_to<kMin>}};
constexpr Reducer kBf16[4] = {{2, &apply_bf16<kSum>, &apply_bf16_to<kSum>},
                              {2, &apply_bf16<kProd>, &apply_bf16_to<kProd>},
                              {2, &apply_bf16<kMax>, &apply_bf16_to<kMax>},
                              {2, &apply_bf16<kMin>, &apply_bf16_to<kMin>}};

}  // namespace

size_t comm_dtype_size(int dtype) {
  switch (dtype) {
    case KILN_COMM_INT8: case KILN_COMM_UINT8: return 1;
    case KILN_COMM_INT16: case KILN_COMM_UINT16: case KILN_COMM_FP16: case KILN_COMM_BF16: return 2;
    case KILN_COMM_INT32: case KILN_COMM_UINT32: case KILN_COMM_FP32: return 4;
    case KILN_COMM_INT64: case KILN_COMM_UINT64: case KILN_COMM_FP64: return 8;
    default: return 0;
  }
}

const char* comm_dtype_name(int dtype) {
  switch (dtype) {
    case KILN_COMM_INT8: return "int8";
    case KILN_COMM_INT16: return "int16";
    case KILN_COMM_INT32: return "int32";
    case KILN_COMM_FP16: return "fp16";
    case KILN_COMM_FP32: return "fp32";
    case KILN_COMM_INT64: return "int64";
    case KILN_COMM_UINT64: return "uint64";
    case KILN_COMM_UINT8: return "uint8";
    case KILN_COMM_UINT16: return "uint16";
    case KILN_COMM_UINT32: return "uint32";
    case KILN_COMM_FP64: return "fp64";
    case KILN_COMM_BF16: return "bf16";
    default: return "?";
  }
}

const char* reduce_op_name(int op) {
  switch (op) {
    case KILN_REDUCE_SUM: return "sum";
    case KILN_REDUCE_PROD: return "prod";
    case KILN_REDUCE_MAX: return "max";
    case KILN_REDUCE_MIN: return "min";
    default: return "?";
  }
}

const Reducer* reducer_for(int dtype, int op) {
  if (op < KILN_REDUCE_SUM || op > KILN_REDUCE_MIN) return nullptr;
  switch (dtype) {
    case KILN_COMM_INT8: return PlainKernels<int8_t>::kAll[op];
    case KILN_COMM_INT16: return PlainKernels<int16_t>::kAll[op];
    case KILN_COMM_INT32: return PlainKernels<int32_t>::kAll[op];
    case KILN_COMM_INT64: return PlainKernels<int64_t>::kAll[op];
    case KILN_COMM_UINT8: return PlainKernels<uint8_t>::kAll[op];
    case KILN_COMM_UINT16: return PlainKernels<uint16_t>::kAll[op];
    case KILN_COMM_UINT32: return PlainKernels<uint32_t>::kAll[op];
    case KILN_COMM_UINT64: return PlainKernels<uint64_t>::kAll[op];
    case KILN_COMM_FP32: return PlainKernels<float>::kAll[op];
    case KILN_COMM_FP64: return PlainKernels<double>::kAll[op];
    case KILN_COMM_FP16: return &kFp16[op];
    case KILN_COMM_BF16: return &kBf16[op];
    default: return nullptr;
  }
}

}  // namespace kiln::comm
