// The paged KV cache's storage (kv_cache.h).
#include "llm/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace kiln::llm {
namespace {

// Stores n floats at dst in the pool's element type. bf16 rounds to nearest even (ties to
// even, NaN kept a NaN) with core's float_to_bf16: not Highway 1.0's DemoteTo, which truncates.
void store_row(const float* src, int64_t n, DataType dtype, std::byte* dst) {
  if (dtype == DataType::kFloat32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* out = reinterpret_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(src[i]);
}

}  // namespace

bool kv_dtype_supported(DataType dtype) { return dtype == DataType::kFloat32 || dtype == DataType::kBFloat16; }

std::optional<DataType> kv_dtype_from_name(std::string_view name) {
  if (name == "fp32" || name == "float32") return DataType::kFloat32;
  if (name == "bf16" || name == "bfloat16") return DataType::kBFloat16;
  return std::nullopt;
}

const char* kv_dtype_name(DataType dtype) { return dtype == DataType::kBFloat16 ? "bf16" : "fp32"; }

Expected<std::unique_ptr<KvCache>> KvCache::create(int64_t layers, int64_t kv_heads, int64_t head_dim,
                                                   int64_t num_blocks, int64_t block_size, DataType dtype,
                                                   bool zero_filled) {
  if (layers <= 0 || kv_heads <= 0 || head_dim <= 0 || num_blocks <= 0 || block_size <= 0)
    return invalid_argument("KV cache: layers, heads, head_dim, blocks and block size must be positive");
  if (!kv_dtype_supported(dtype))
    return invalid_argument("KV cache: element type %s is not supported (fp32 or bf16)", dtype_name(dtype));
  std::unique_ptr<KvCache> cache(new KvCache(num_blocks, block_size));
  cache->dtype_ = dtype;
  cache->row_ = kv_heads * head_dim;
  cache->elem_bytes_ = dtype == DataType::kBFloat16 ? 2 : 4;
  const size_t bytes = static_cast<size_t>(num_blocks * block_size * cache->row_ * cache->elem_bytes_);
  for (int64_t l = 0; l < layers; ++l) {
    // Not zeroed unless asked: attention reads only slots written before, and untouched pages
    // of a large pool then cost nothing (zeroing 256 MiB took most of a short run).
    auto k = std::unique_ptr<std::byte[]>(zero_filled ? new (std::nothrow) std::byte[bytes]()
                                                      : new (std::nothrow) std::byte[bytes]);
    auto v = std::unique_ptr<std::byte[]>(zero_filled ? new (std::nothrow) std::byte[bytes]()
                                                      : new (std::nothrow) std::byte[bytes]);
    if (!k || !v)
      return resource_exhausted(
          "KV cache: cannot allocate %lld blocks (%lld MiB)", (long long)num_blocks,
          (long long)(block_bytes(layers, kv_heads, head_dim, block_size, dtype) * num_blocks >> 20));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  return cache;
}

void KvCache::write(int64_t layer, const int32_t* table, int64_t pos, const float* k, const float* v) {
  const int64_t bs = blocks_.block_size();
  const int64_t slot = static_cast<int64_t>(table[pos / bs]) * bs + pos % bs;
  const int64_t offset = slot * row_ * elem_bytes_;
  store_row(k, row_, dtype_, k_[layer].get() + offset);
  store_row(v, row_, dtype_, v_[layer].get() + offset);
}

void KvCache::copy_block(int32_t src, int32_t dst) {
  const int64_t bytes = blocks_.block_size() * row_ * elem_bytes_;
  for (size_t l = 0; l < k_.size(); ++l) {
    std::memcpy(k_[l].get() + dst * bytes, k_[l].get() + src * bytes, static_cast<size_t>(bytes));
    std::memcpy(v_[l].get() + dst * bytes, v_[l].get() + src * bytes, static_cast<size_t>(bytes));
  }
}

}  // namespace kiln::llm
