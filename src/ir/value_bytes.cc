// Value sizes in bytes and the check that the largest fits in memory.
#include "ir/value_bytes.h"

#include <cstdint>
#include <limits>

namespace kiln::ir {

size_t dims_bytes(DataType dtype, const std::vector<int64_t>& dims) {
  size_t bytes = dtype_bytes(dtype, 1);
  for (int64_t d : dims) {
    size_t next = 0;
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(d), &next)) return std::numeric_limits<size_t>::max();
    bytes = next;
  }
  return bytes;
}

size_t static_value_bytes(const Value& v) {
  const Shape& s = v.shape();
  if (!s.has_rank() || !s.is_static() || v.dtype() == DataType::kUndefined || v.dtype() == DataType::kString)
    return 0;
  std::vector<int64_t> dims;
  for (const Dim& d : s.dims()) dims.push_back(d.value);
  return dims_bytes(v.dtype(), dims);
}

LargestValue largest_value(const Graph& graph) {
  LargestValue out;
  for (const auto& v : graph.values()) {
    if (v->has_initializer()) continue;
    size_t bytes = static_value_bytes(*v);
    if (bytes > out.bytes) out = {v.get(), bytes};
  }
  return out;
}

std::string bytes_text(size_t bytes) {
  if (bytes == std::numeric_limits<size_t>::max()) return "more than 2^64 bytes";
  static const char* kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  return str_format("%zu bytes (%.3g %s)", bytes, v, kUnits[u]);
}

Status check_values_fit(const Graph& graph, size_t memory_bytes, const char* memory_name) {
  LargestValue big = largest_value(graph);
  if (!big.value || big.bytes <= memory_bytes) return ok_status();
  return resource_exhausted("value '%s' (%s) needs %s, more than %s memory (%s): give smaller input shapes",
                            big.value->name().c_str(), big.value->type().to_string().c_str(),
                            bytes_text(big.bytes).c_str(), memory_name, bytes_text(memory_bytes).c_str());
}

}  // namespace kiln::ir
