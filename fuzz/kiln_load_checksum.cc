// Fuzz target: .kiln loading with the checksum recomputed over the mutated bytes first, so
// that mutations reach the header, FlatBuffers, offset and graph checks behind the checksum.
#include <cstring>
#include <vector>

#include "kiln_load_common.h"
#include "model/model_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return -1;
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= kiln::model::kHeaderSize) {
    const uint64_t sum = kiln::model::file_checksum(bytes.data(), bytes.size());
    std::memcpy(bytes.data() + offsetof(kiln::model::FileHeader, checksum), &sum, sizeof sum);
  }
  kiln::fuzz::load_and_inspect(bytes.data(), bytes.size());
  return 0;
}
