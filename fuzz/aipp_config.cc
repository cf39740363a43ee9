// Fuzz target: the AIPP configuration parser (`kiln compile --insert-op-conf FILE`).
#include <cstddef>
#include <cstdint>
#include <string>

#include "preprocess/aipp_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)kiln::preprocess::parse_aipp_config(text, "fuzz.cfg");
  return 0;
}
