// C++ code generation from loop IR: one self-contained translation unit per kernel.
#pragma once

#include <string>
#include <vector>

#include "dsl/lower.h"

namespace kiln::dsl {

// The symbol every emitted kernel exports:
//   int kiln_dsl_entry(float* const* buffers, const int64_t* dims);
// buffers in LoweredFunc::args order, dims in LoweredFunc::dims order. Returns 0, or
// 1 + the index of the run-time check that failed (see `checks`).
inline constexpr const char* kEntrySymbol = "kiln_dsl_entry";
using EntryFn = int (*)(float* const* buffers, const int64_t* dims);

struct CSource {
  std::string code;
  std::vector<std::string> checks;  // messages of the run-time checks, in order
};

// Parallel loops become OpenMP `parallel for`, vectorized loops `omp simd`, the innermost
// reduction loop an `omp simd reduction` over its scalar accumulator, unrolled loops
// `GCC unroll`. exp/tanh/erf use inline polynomials the compiler vectorises (libm's do not
// vectorise without -ffast-math).
CSource codegen_c(const LoweredFunc& f);

}  // namespace kiln::dsl
