// The size of a graph's values in bytes, with overflow saturating: how a shape that cannot
// fit in memory is refused at compile and at load, before anything is allocated or a kernel
// prepared for it (issue 24: oneDNN spends minutes creating a primitive for such shapes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::ir {

// Bytes of a tensor of `dtype` and `dims` (all >= 0), SIZE_MAX when that overflows.
size_t dims_bytes(DataType dtype, const std::vector<int64_t>& dims);

// Bytes of `v` when its shape is static and its dtype known, SIZE_MAX when that overflows;
// 0 otherwise (a dynamic value, sized at run time).
size_t static_value_bytes(const Value& v);

// The largest value of `graph` (top level, initializers left out) by static_value_bytes.
struct LargestValue {
  const Value* value = nullptr;
  size_t bytes = 0;
};
LargestValue largest_value(const Graph& graph);

// "1.6e+17 bytes (149 PB)"-style text for an error message.
std::string bytes_text(size_t bytes);

// kResourceExhausted naming the largest value, its type and bytes when it alone exceeds
// `memory_bytes` (`memory_name` says whose memory, e.g. "the device's").
Status check_values_fit(const Graph& graph, size_t memory_bytes, const char* memory_name);

}  // namespace kiln::ir
