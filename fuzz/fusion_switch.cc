// Fuzz target: the fusion-switch file parser (`kiln compile --fusion-switch-file FILE`).
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/pass_manager.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)kiln::compiler::parse_fusion_switch_text(text, "fuzz.cfg");
  return 0;
}
