// Helpers shared by the .kiln model tests: temp files, file bytes, header patching.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/kiln_model.h"
#include "model/model_format.h"
#include "../process_temp_dir.h"

namespace kiln::model::test_util {

// A directory of this test process, removed with its files when the process exits.
inline std::string temp_dir() {
  static const kiln::test_support::ProcessTempDir dir("kiln_model_test");
  return dir.path();
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline FileHeader header_of(const std::vector<uint8_t>& bytes) {
  FileHeader h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  return h;
}

inline void set_header(std::vector<uint8_t>& bytes, const FileHeader& h) {
  std::memcpy(bytes.data(), &h, sizeof(h));
}

// Recomputes the checksum so that a corruption after the header reaches the later checks.
inline void reseal(std::vector<uint8_t>& bytes) {
  FileHeader h = header_of(bytes);
  h.checksum = file_checksum(bytes.data(), bytes.size());
  set_header(bytes, h);
}

// A file made of a header, `metadata` and `weight_size` zero bytes of weights, sealed.
inline std::vector<uint8_t> assemble(const uint8_t* metadata, size_t metadata_size,
                                     size_t weight_size) {
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.format_version = kFormatVersion;
  h.metadata_offset = kHeaderSize;
  h.metadata_size = metadata_size;
  h.weight_offset = (kHeaderSize + metadata_size + kWeightSectionAlignment - 1) /
                    kWeightSectionAlignment * kWeightSectionAlignment;
  h.weight_size = weight_size;
  h.file_size = h.weight_offset + weight_size;
  std::vector<uint8_t> bytes(h.file_size, 0);
  std::memcpy(bytes.data() + kHeaderSize, metadata, metadata_size);
  set_header(bytes, h);
  reseal(bytes);
  return bytes;
}

}  // namespace kiln::model::test_util
