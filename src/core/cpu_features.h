// The host CPU's instruction-set features, detected once per process. Every layer that picks
// code by ISA (the SIMD kernels' Highway targets, the layout pass's channel block, the model's
// target description, the DSL's cache key, the profiler's peak, the copy engine) asks here, so
// they cannot disagree about the machine they run on.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct CpuFeatures {
  // A feature counts only when the CPU has it and the OS saves its registers (XCR0): a
  // hypervisor may hide AVX-512 state from a guest whose cpuid still lists the instructions.
  bool sse42 = false, popcnt = false, avx = false, fma = false, f16c = false, avx2 = false;
  bool bmi1 = false, bmi2 = false;
  bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
  bool avx512_ifma = false, avx512_vbmi = false, avx512_vbmi2 = false, avx512_vnni = false;
  bool avx512_bitalg = false, avx512_vpopcntdq = false, avx512_fp16 = false, avx512_bf16 = false;
  bool avx_vnni = false, amx_tile = false, amx_bf16 = false, amx_int8 = false;

  // The features present, by the names the .kiln target description uses ("avx2",
  // "avx512f", "avx512_vnni", ...), in a fixed order.
  std::vector<std::string> names;

  bool has(std::string_view name) const;
  // What Highway's AVX3 target needs (AVX-512 F/VL/DQ/BW) and its AVX2 target (AVX2, FMA,
  // BMI2, F16C).
  bool highway_avx3() const { return avx512f && avx512vl && avx512dq && avx512bw; }
  bool highway_avx2() const { return avx2 && fma && bmi2 && f16c; }
};

// Detected on first use (thread-safe), then constant.
const CpuFeatures& cpu_features();

}  // namespace kiln
