// Per-target Highway helpers of the 8-bit quantisation kernels (quantize_linear.cc,
// qlinear_add.cc): widening uint8 / int8 lanes to float32 and QuantizeLinear's last step
// (round half to even, add the zero point, saturate, NaN to the lowest value), exact with
// respect to the reference kernels (src/ops/quantize.cc). Include inside a file's
// foreach_target section (the -inl.h include-guard toggle of Highway).
#if defined(KILN_KERNELS_CPU_QUANTIZE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KILN_KERNELS_CPU_QUANTIZE_SIMD_INL_H_
#undef KILN_KERNELS_CPU_QUANTIZE_SIMD_INL_H_
#else
#define KILN_KERNELS_CPU_QUANTIZE_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::quantize_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
template <typename T>
using D8 = hn::Rebind<T, DF>;  // one 8-bit lane per float32 lane

// Elements of a tail buffer: at least one vector of any x86 target.
inline constexpr int64_t kTailLanes = 64;

// float32(q - zero_point) per lane of the 8-bit values at p (exact).
template <typename T>
HWY_INLINE VF load_centered(const T* p, VI zero_point) {
  return hn::ConvertTo(DF(), hn::Sub(hn::PromoteTo(DI(), hn::LoadU(D8<T>(), p)), zero_point));
}

// What quantising to T with a zero point needs, as vectors.
template <typename T>
struct QuantBounds {
  VF lo, hi;  // T's range minus the zero point: round(v) in [lo, hi] saturates nothing
  VI zero_point;

  explicit QuantBounds(int32_t zp)
      : QuantBounds(zp, std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()) {}
  // Narrower integer bounds [q_lo, q_hi] within T's range (an activation's, quantised).
  QuantBounds(int32_t zp, int32_t q_lo, int32_t q_hi)
      : lo(hn::Set(DF(), static_cast<float>(q_lo - zp))),
        hi(hn::Set(DF(), static_cast<float>(q_hi - zp))),
        zero_point(hn::Set(DI(), zp)) {}
};

// Stores int32 lanes that are within T's range as T at p. AVX-512 has the one-instruction
// narrowing (vpmovdb); Highway's DemoteTo saturates through two packs and a permute.
template <typename T>
HWY_INLINE void store_narrowed(VI r, T* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(r.raw));
#else
  hn::StoreU(hn::DemoteTo(D8<T>(), r), D8<T>(), p);
#endif
}

// round_half_to_even(v) for v within int32 (no overflow fix-up, unlike NearestInt).
HWY_INLINE VI nearest_int_in_range(VF v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return VI{_mm512_cvtps_epi32(v.raw)};  // rounds as MXCSR says: to nearest even
#elif HWY_ARCH_X86 && HWY_TARGET == HWY_AVX2
  return VI{_mm256_cvtps_epi32(v.raw)};
#else
  return hn::NearestInt(v);
#endif
}

// saturate(round_half_to_even(v) + zero_point) within q's bounds, stored as T at p. Clamping
// before rounding is the same as after (the bounds are integers), and keeps the float ->
// int32 conversion in range. kNaN: v may be NaN, which stores q.lo's value (T's lowest for
// the plain bounds), as the QuantizeLinear reference does.
template <bool kNaN, typename T>
HWY_INLINE void store_quantized(VF v, const QuantBounds<T>& q, T* p) {
  if (kNaN) v = hn::IfThenElse(hn::IsNaN(v), q.lo, v);
  v = hn::Min(hn::Max(v, q.lo), q.hi);
  store_narrowed(hn::Add(nearest_int_in_range(v), q.zero_point), p);
}

// Keeps the compiler from contracting the product v with a following addition into an FMA
// (GCC contracts vector intrinsics too): the float graph rounds the product first.
HWY_INLINE VF rounded(VF v) {
#if (HWY_COMPILER_GCC || HWY_COMPILER_CLANG) && HWY_ARCH_X86 && HWY_TARGET != HWY_SCALAR && \
    HWY_TARGET != HWY_EMU128
  asm("" : "+v"(v.raw));
#endif
  return v;
}

// Runs body(a + i, b + i, dst + i) over elements [begin, end) one vector at a time (b may be
// null: a broadcast operand the body holds itself, passed on as null). The last partial
// vector runs on copies in zero-padded local buffers, so every element sees the same
// arithmetic.
template <typename TD, typename TS, class Body>
HWY_INLINE void for_vectors(int64_t begin, int64_t end, const TS* a, const TS* b, TD* dst, const Body& body) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t i = begin;
  for (; i + n <= end; i += n) body(a + i, b ? b + i : nullptr, dst + i);
  if (i < end) {
    const size_t rest = static_cast<size_t>(end - i);
    TS sa[kTailLanes] = {}, sb[kTailLanes] = {};
    TD d[kTailLanes];
    std::memcpy(sa, a + i, rest * sizeof(TS));
    if (b) std::memcpy(sb, b + i, rest * sizeof(TS));
    body(sa, b ? sb : nullptr, d);
    std::memcpy(dst + i, d, rest * sizeof(TD));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::quantize_simd
HWY_AFTER_NAMESPACE();

#endif  // KILN_KERNELS_CPU_QUANTIZE_SIMD_INL_H_
