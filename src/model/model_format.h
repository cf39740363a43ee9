// The fixed .kiln file header and the format constants shared by the writer, the reader
// and the tests (internal to src/model; users go through kiln_model.h).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace kiln::model {

static_assert(std::endian::native == std::endian::little,
              "the .kiln header is read by memcpy: little-endian hosts only");

inline constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'M', 'O', 'D', 'L'};
inline constexpr size_t kHeaderSize = 64;
// The weight section starts on a page boundary so that it maps like any other page
// range (and could be mapped on its own); each tensor in it starts on a 64-byte line.
inline constexpr uint64_t kWeightSectionAlignment = 4096;
inline constexpr uint64_t kWeightAlignment = 64;
// Bound on If/Loop/Scan nesting: keeps the recursive loader's stack use small on a
// hostile file. Real models nest a handful of levels.
inline constexpr int kMaxSubgraphDepth = 64;

// Byte layout of the first 64 bytes of the file (little-endian).
struct FileHeader {
  char magic[8];             // "KILNMODL"
  uint32_t format_version;   // kFormatVersion
  uint32_t flags;            // none defined yet: must be 0
  uint64_t metadata_offset;  // kHeaderSize in format version 1
  uint64_t metadata_size;
  uint64_t weight_offset;  // first multiple of kWeightSectionAlignment >= metadata end
  uint64_t weight_size;    // the weight section runs to the end of the file
  uint64_t file_size;      // total bytes; a truncated file is caught by this
  uint64_t checksum;       // see file_checksum(): covers the header fields too
};
static_assert(sizeof(FileHeader) == kHeaderSize, "header is exactly 64 bytes");
static_assert(offsetof(FileHeader, checksum) == 56, "checksum is the last header field");

// The checksum of a whole file (`size` bytes): XXH3-64 of the first 56 header bytes (every
// field but the checksum itself), seeded with XXH3-64 of the bytes after the header. So a
// flipped bit anywhere, the header's sizes and offsets included, is caught.
uint64_t file_checksum(const uint8_t* file, size_t size);
// The same, from the header fields and the digest of the bytes after the header.
uint64_t combine_checksum(const void* header_fields_56_bytes, uint64_t body_digest);

}  // namespace kiln::model
