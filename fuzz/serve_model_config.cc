// Fuzz target: a served model's config.json (serve::parse_model_config, what `kiln serve`
// reads from REPO/<model>/config.json when it loads the model).
#include <cstddef>
#include <cstdint>
#include <string>

#include "serve/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;
  std::string text(reinterpret_cast<const char*>(data), size);
  (void)kiln::serve::parse_model_config(text);
  return 0;
}
