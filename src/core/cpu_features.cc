// cpuid leaves 1 and 7 (subleaves 0 and 1) and XCR0, read once.
#include "core/cpu_features.h"

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  auto add = [&](bool present, bool* field, const char* name) {
    *field = present;
    if (present) f.names.emplace_back(name);
  };
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const unsigned ecx1 = c;
  // The CPU having AVX registers is not enough: the OS must save them (XCR0).
  uint64_t xcr0 = 0;
  if (ecx1 & (1u << 27)) {  // OSXSAVE
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t{hi} << 32) | lo;
  }
  const bool ymm = (xcr0 & 0x6) == 0x6;
  const bool zmm = ymm && (xcr0 & 0xe0) == 0xe0;
  const bool tiles = (xcr0 & 0x60000) == 0x60000;
  add(ecx1 & (1u << 20), &f.sse42, "sse4.2");
  add(ecx1 & (1u << 23), &f.popcnt, "popcnt");
  add(ymm && (ecx1 & (1u << 28)), &f.avx, "avx");
  add(ymm && (ecx1 & (1u << 12)), &f.fma, "fma");
  add(ymm && (ecx1 & (1u << 29)), &f.f16c, "f16c");
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned ebx7 = b, ecx7 = c, edx7 = d, max_sub = a;
    add(ymm && (ebx7 & (1u << 5)), &f.avx2, "avx2");
    add(ebx7 & (1u << 3), &f.bmi1, "bmi1");
    add(ebx7 & (1u << 8), &f.bmi2, "bmi2");
    add(zmm && (ebx7 & (1u << 16)), &f.avx512f, "avx512f");
    add(zmm && (ebx7 & (1u << 17)), &f.avx512dq, "avx512dq");
    add(zmm && (ebx7 & (1u << 28)), &f.avx512cd, "avx512cd");
    add(zmm && (ebx7 & (1u << 30)), &f.avx512bw, "avx512bw");
    add(zmm && (ebx7 & (1u << 31)), &f.avx512vl, "avx512vl");
    add(zmm && (ebx7 & (1u << 21)), &f.avx512_ifma, "avx512_ifma");
    add(zmm && (ecx7 & (1u << 1)), &f.avx512_vbmi, "avx512_vbmi");
    add(zmm && (ecx7 & (1u << 6)), &f.avx512_vbmi2, "avx512_vbmi2");
    add(zmm && (ecx7 & (1u << 11)), &f.avx512_vnni, "avx512_vnni");
    add(zmm && (ecx7 & (1u << 12)), &f.avx512_bitalg, "avx512_bitalg");
    add(zmm && (ecx7 & (1u << 14)), &f.avx512_vpopcntdq, "avx512_vpopcntdq");
    add(zmm && (edx7 & (1u << 23)), &f.avx512_fp16, "avx512_fp16");
    unsigned eax71 = 0;
    if (max_sub >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      eax71 = a;
    }
    add(ymm && (eax71 & (1u << 4)), &f.avx_vnni, "avx_vnni");
    add(zmm && (eax71 & (1u << 5)), &f.avx512_bf16, "avx512_bf16");
    add(tiles && (edx7 & (1u << 24)), &f.amx_tile, "amx_tile");
    add(tiles && (edx7 & (1u << 22)), &f.amx_bf16, "amx_bf16");
    add(tiles && (edx7 & (1u << 25)), &f.amx_int8, "amx_int8");
  }
#endif
  return f;
}

}  // namespace

bool CpuFeatures::has(std::string_view name) const {
  return std::find(names.begin(), names.end(), name) != names.end();
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace kiln
