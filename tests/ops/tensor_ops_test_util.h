// Test helpers for the tensor/shape op families (on top of elementwise_test_util.h):
// tensors of 0..n-1, int64 lists, string tensors, and element readers.
#pragma once

#include <numeric>
#include <string>
#include <vector>

#include "elementwise_test_util.h"

namespace kiln::ops::testing {

// A float32 tensor holding 0, 1, 2, ... in row-major order.
inline Tensor iota_f(std::vector<int64_t> dims) {
  std::vector<float> v(static_cast<size_t>(num_elements(dims)));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector<float>(v, dims);
}

inline Tensor i64(std::vector<int64_t> v, std::vector<int64_t> dims = {}) {
  if (dims.empty()) dims = {static_cast<int64_t>(v.size())};
  return Tensor::from_vector<int64_t>(v, dims);
}

inline Tensor strs(std::vector<int64_t> dims, const std::vector<std::string>& v) {
  return Tensor::from_vector<std::string>(v, dims);
}

inline std::vector<std::string> str_values(const Tensor& t) {
  return std::vector<std::string>(t.data<std::string>(), t.data<std::string>() + t.num_elements());
}

inline std::vector<int64_t> int_values(const Tensor& t) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.num_elements(); ++i) out.push_back(t.element_as_int64(i));
  return out;
}

// The error of running `op`, or "" if it succeeded (for error-case tests).
inline std::string run_error(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
                             ir::AttributeMap attrs = {}, int num_outputs = 1,
                             std::vector<int> constant_inputs = {}) {
  auto r = run_op(op, opset, inputs, std::move(attrs), num_outputs, std::move(constant_inputs));
  return r.ok() ? std::string() : r.status().to_string();
}

}  // namespace kiln::ops::testing
