// Reading ONNX test-data files and comparing Kiln's outputs with them, for
// `kiln conformance`: dtype and shape exact; floating point within
// atol + rtol * |expected| (rtol 1e-3, atol 1e-5; NaN equals NaN; infinities exact);
// integers, bools and strings exact. Outputs of random ops are checked for dtype, shape
// and range only, since their values cannot match.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "core/runtime_value.h"
#include "ir/graph.h"

namespace kiln::tools {

inline constexpr double kConformanceRtol = 1e-3;
inline constexpr double kConformanceAtol = 1e-5;

// Reads a TensorProto, SequenceProto or OptionalProto file, as `declared` says.
Expected<RuntimeValue> read_test_value(const std::string& path, const ir::TensorType& declared);

// What a random op promises about its output.
struct RandomSpec {
  std::string op;            // the random op upstream of the output
  bool direct = false;       // the output is that op's own output (so its range is known)
  double low = 0, high = 1;  // RandomUniform(Like)
};

struct RandomOutputs {
  std::unordered_map<const ir::Value*, RandomSpec> specs;
  const RandomSpec* for_output(const ir::Value* v) const {
    auto it = specs.find(v);
    return it == specs.end() ? nullptr : &it->second;
  }
};

// The graph outputs that depend on a random op (RandomUniform, RandomNormal, their -Like
// forms, Bernoulli, Multinomial, Dropout in training mode).
RandomOutputs random_outputs(const ir::Graph& graph);

// OK when `got` matches `want`; otherwise says where and by how much it differs.
Status compare_values(const RuntimeValue& got, const RuntimeValue& want, const RandomSpec* random = nullptr);
Status compare_tensors(const Tensor& got, const Tensor& want, const RandomSpec* random = nullptr);

}  // namespace kiln::tools
