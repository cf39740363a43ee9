// Fuzz target: .kiln loading from bytes (load_model_from_memory, what kilnModelLoadFromMem
// and, after reading the file, `kiln inspect` / `kiln run` use). Most mutations stop at the
// checksum; kiln_load_checksum.cc gets past it.
#include "kiln_load_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return -1;
  kiln::fuzz::load_and_inspect(data, size);
  return 0;
}
