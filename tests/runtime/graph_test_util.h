// Helpers shared by the runtime tests: typed values and element dumps.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::rt::test_util {

// The value `name` of `g` (created if needed) with the given type.
inline ir::Value* val(ir::Graph& g, const std::string& name, DataType dt, Shape s) {
  ir::Value* v = g.get_or_add_value(name);
  v->type() = ir::TensorType{dt, std::move(s)};
  return v;
}

// Every element of `t` as a double.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.element_as_double(i));
  return out;
}

}  // namespace kiln::rt::test_util
