// Fuzz target: .npy parsing (parse_npy, what read_npy and `kiln run --input x.npy` use).
#include <cstddef>
#include <cstdint>

#include "core/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 16)) return -1;  // the header is what is parsed; bigger inputs add nothing
  auto tensor = kiln::parse_npy(data, size, "fuzz.npy");
  if (!tensor.ok()) return 0;
  // A tensor that parsed must own every byte it claims (ASan checks the reads).
  const auto* bytes = static_cast<const uint8_t*>(tensor->raw_data());
  uint8_t sum = 0;
  for (size_t i = 0; i < tensor->size_bytes(); ++i) sum ^= bytes[i];
  volatile uint8_t sink = sum;
  (void)sink;
  return 0;
}
