// Fuzz target: ONNX import and compile from bytes (compile_onnx_bytes, what `kiln compile`
// and kilnCompile use), at -O0 and, when that succeeded, at -O3.
#include <cstddef>
#include <cstdint>

#include "compiler/compiler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  kiln::compiler::CompileOptions options;
  options.passes.opt_level = 0;
  auto o0 = kiln::compiler::compile_onnx_bytes(data, size, "fuzz.onnx", options);
  if (!o0.ok()) return 0;
  options.passes.opt_level = 3;
  (void)kiln::compiler::compile_onnx_bytes(data, size, "fuzz.onnx", options);
  return 0;
}
