// Runtime choice among the Highway targets a kernel file compiled (hwy/foreach_target.h),
// without libhwy's dispatcher (HWY_DYNAMIC_DISPATCH needs the shared library; these checks
// need only the compiler's cpuid support). A kernel picks its function once, at prepare:
//
//   fn_ = KILN_SIMD_SELECT(kiln::kernels::attention_simd, attention_tasks);
//   impl_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
//
// Include it after <hwy/highway.h>, in the file's HWY_ONCE section.
#pragma once

#include <cpuid.h>
#include <hwy/highway.h>

namespace kiln::kernels::simd {

// F16C from cpuid leaf 1: clang before 16 has no "f16c" for __builtin_cpu_supports (the
// fuzz preset builds with clang-14). The OS saving the ymm state is checked by "avx2".
inline bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

// What Highway's AVX3 target (AVX-512 F/VL/DQ/BW) needs; __builtin_cpu_supports also checks
// that the OS saves the zmm state.
inline bool cpu_has_avx3() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw");
}

// What Highway's AVX2 target needs besides AVX2: FMA, BMI2 and F16C.
inline bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("bmi2") && cpu_has_f16c();
}

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
