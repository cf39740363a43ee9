// Reading ONNX test-data files and comparing Kiln's outputs with them, for
// `kiln conformance`: dtype and shape exact; floating point within
// atol + rtol * |expected| (rtol 1e-3, atol 1e-5; NaN equals NaN; infinities exact);
// integers, bools and strings exact. Outputs of random ops are checked for dtype, shape
// and range only, since their values cannot match. Also the comparison of a model with
// itself at two -O levels (`kiln conformance --check-levels`, `kiln compare`).
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

// How far a value computed by the optimised graph is from the same value computed by the
// reference (-O0) graph. Floating point is compared relative to the largest magnitude of the
// reference: error = max|got - ref| / (atol + rtol * max|ref|), so 1 is the tolerance (NaN
// equals NaN, infinities must match exactly); other dtypes must be equal.
inline constexpr double kLevelRtol = 1e-4;
// Lets values that are all (nearly) zero differ by rounding noise.
inline constexpr double kLevelAtol = 1e-6;

struct ValueDiff {
  // Empty when the two values have the same kind, dtype and shape; otherwise what differs.
  std::string mismatch;
  double max_abs = 0;  // max |got - ref|; inf where NaN/inf positions or exact values differ
  double max_ref = 0;  // max |ref| over its finite elements
  double error = 0;    // max_abs / (atol + rtol * max_ref); inf for unequal exact values
  std::string got_shape, ref_shape;  // "float32[1,64,56,56]", for reports
  bool within() const { return mismatch.empty() && error <= 1; }
};

ValueDiff diff_values(const RuntimeValue& got, const RuntimeValue& ref, double rtol, double atol);

// Test hook of the level comparisons, applied to the optimised graph only, so that tests can
// show a divergence being found: with KILN_DEBUG_PERTURB_NODE=NAME set, the first output of
// node NAME gets KILN_DEBUG_PERTURB_DELTA (default 1e-2) added (an Add node is inserted; the
// value keeps its name). Returns what was done ("" when the variable is not set); errors
// when there is no such node or its output is not floating point.
Expected<std::string> apply_debug_perturbation(ir::Graph& graph);

}  // namespace kiln::tools
