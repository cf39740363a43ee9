// Element-wise compute expressions of custom ops (include/kiln/custom_op.h, docs/dsl.md):
// the S-expression text a plugin registers and a .kiln stores, parsed into a tree, checked,
// printed, with attributes bound to constants, evaluated per element (the reference), and
// recognised as a fused activation when it is one (so it can end a convolution's epilogue).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::ops {

struct CustomExpr {
  enum class Kind { kInput, kConst, kAttr, kCall };
  Kind kind = Kind::kConst;
  int input = 0;      // kInput: x<input>
  double value = 0;   // kConst
  std::string name;   // kAttr: the attribute; kCall: the function (add, sigmoid, lt, ...)
  std::vector<CustomExpr> args;
};

// Parses `text`. Errors (invalid argument) give the offset and what was expected; function
// names, their arities and where comparisons may stand are checked here. Inputs x0..x7.
Expected<CustomExpr> parse_custom_expr(std::string_view text);

// The highest input index read, plus one (0 for an expression of constants only).
int custom_expr_inputs(const CustomExpr& e);

// Checks that every attribute named is in `attrs`.
Status check_custom_expr_attrs(const CustomExpr& e, const std::vector<std::string>& attrs);

// `e` with each attribute replaced by its value in `values` (every one must be there).
CustomExpr bind_custom_expr(const CustomExpr& e, const std::map<std::string, double>& values);

// The text form, which parse_custom_expr reads back (constants printed to float precision).
std::string custom_expr_text(const CustomExpr& e);

// The value for one element (float32 arithmetic, libm functions; attributes must be bound).
// Comparisons give 1 or 0.
float eval_custom_expr(const CustomExpr& e, const float* x);

// When `e` is act(x0) for an activation of docs/fused-ops.md's table that a convolution or
// matmul epilogue runs (Relu, Sigmoid, Tanh, Swish with its beta, ...): its `activation`
// name and `activation_params`. Attributes must be bound.
bool custom_expr_activation(const CustomExpr& e, std::string* name, std::vector<float>* params);

// For fusion pattern names in the compile report: " (custom my.ops::PSwish)" when `nodes`
// holds a kiln DslElementwise (its `custom_op`), else "".
std::string custom_op_pattern_note(const std::vector<ir::Node*>& nodes);

class KernelContext;
// The reference kernel of a custom element-wise op (ops/dsl_elementwise.cc): `e` (attributes
// bound) per element of the NumPy broadcast of the node's float32 inputs into output 0.
Status run_custom_elementwise(KernelContext& ctx, const CustomExpr& e);

}  // namespace kiln::ops
