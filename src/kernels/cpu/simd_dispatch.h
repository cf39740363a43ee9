// Runtime choice among the Highway targets a kernel file compiled (hwy/foreach_target.h),
// without libhwy's dispatcher (HWY_DYNAMIC_DISPATCH needs the shared library; these checks
// need only Kiln's one CPU feature detection, core/cpu_features.h). A kernel picks its
// function once, at prepare:
//
//   fn_ = KILN_SIMD_SELECT(kiln::kernels::attention_simd, attention_tasks);
//   impl_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
//
// Include it after <hwy/highway.h>, in the file's HWY_ONCE section.
#pragma once

#include <hwy/highway.h>

#include "core/cpu_features.h"

namespace kiln::kernels::simd {

// What Highway's AVX3 target (AVX-512 F/VL/DQ/BW) needs, the OS saving the zmm state.
inline bool cpu_has_avx3() { return ::kiln::cpu_features().highway_avx3(); }

// What Highway's AVX2 target needs besides AVX2: FMA, BMI2 and F16C.
inline bool cpu_has_avx2() { return ::kiln::cpu_features().highway_avx2(); }

}  // namespace kiln::kernels::simd

#if HWY_TARGETS & HWY_AVX3
#define KILN_SIMD_IF_AVX3(NS, FN) \
  if (::kiln::kernels::simd::cpu_has_avx3()) return &NS::N_AVX3::FN;
#define KILN_SIMD_IF_AVX3_NAME() \
  if (::kiln::kernels::simd::cpu_has_avx3()) return "avx512";
#else
#define KILN_SIMD_IF_AVX3(NS, FN)
#define KILN_SIMD_IF_AVX3_NAME()
#endif

#if (HWY_TARGETS & HWY_AVX2) && HWY_STATIC_TARGET != HWY_AVX2
#define KILN_SIMD_IF_AVX2(NS, FN) \
  if (::kiln::kernels::simd::cpu_has_avx2()) return &NS::N_AVX2::FN;
#define KILN_SIMD_IF_AVX2_NAME() \
  if (::kiln::kernels::simd::cpu_has_avx2()) return "avx2";
#else
#define KILN_SIMD_IF_AVX2(NS, FN)
#define KILN_SIMD_IF_AVX2_NAME()
#endif

#if HWY_STATIC_TARGET == HWY_AVX3 || HWY_STATIC_TARGET == HWY_AVX3_DL
#define KILN_SIMD_STATIC_NAME "avx512"
#elif HWY_STATIC_TARGET == HWY_AVX2
#define KILN_SIMD_STATIC_NAME "avx2"
#else
#define KILN_SIMD_STATIC_NAME "baseline"
#endif

// The best compiled version of NS::<target>::FN this CPU runs; the static (baseline) target's
// when no better one is compiled and supported.
#define KILN_SIMD_SELECT(NS, FN)         \
  ([] {                                  \
    KILN_SIMD_IF_AVX3(NS, FN)            \
    KILN_SIMD_IF_AVX2(NS, FN)            \
    return &NS::HWY_STATIC_DISPATCH(FN); \
  }())

// The name of the target KILN_SIMD_SELECT picks, for Kernel::implementation().
#define KILN_SIMD_TARGET_NAME()   \
  ([]() -> const char* {          \
    KILN_SIMD_IF_AVX3_NAME()      \
    KILN_SIMD_IF_AVX2_NAME()      \
    return KILN_SIMD_STATIC_NAME; \
  }())
