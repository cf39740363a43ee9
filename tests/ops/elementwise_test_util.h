// Test helpers for the element-wise op families: run one node through the registry
// (inference, then the reference kernel) and compare tensors with expected values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/registry.h"

namespace kiln::ops::testing {

// A one-node graph: inputs "in0".."inN" (an undefined Tensor is an omitted input), outputs
// "out0".."outM". Inputs marked constant become initializers (seen by inference).
struct OneNode {
  std::unique_ptr<ir::Graph> graph = std::make_unique<ir::Graph>();
  ir::Node* node = nullptr;
};

inline OneNode make_node(const std::string& op, int64_t opset, const std::vector<ir::TensorType>& inputs,
                         ir::AttributeMap attrs = {}, int num_outputs = 1,
                         const std::vector<const Tensor*>& constants = {}) {
  OneNode n;
  std::vector<ir::Value*> ins, outs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].dtype == DataType::kUndefined) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = n.graph->get_or_add_value("in" + std::to_string(i));
    v->type() = inputs[i];
    if (i < constants.size() && constants[i]) v->set_initializer(*constants[i]);
    ins.push_back(v);
  }
  for (int i = 0; i < num_outputs; ++i) outs.push_back(n.graph->get_or_add_value("out" + std::to_string(i)));
  n.node = n.graph->add_node("n", op, "", opset, ins, outs);
  n.node->attrs() = std::move(attrs);
  return n;
}

// Output types inferred for `op` on inputs of the given types.
inline Expected<std::vector<ir::TensorType>> infer_op(const std::string& op, int64_t opset,
                                                      const std::vector<ir::TensorType>& inputs,
                                                      ir::AttributeMap attrs = {},
                                                      const std::vector<const Tensor*>& constants = {}) {
  OneNode n = make_node(op, opset, inputs, std::move(attrs), 1, constants);
  KILN_RETURN_IF_ERROR(infer_node(*n.node));
  std::vector<ir::TensorType> out;
  for (ir::Value* v : n.node->outputs()) out.push_back(v->type());
  return out;
}

// Runs `op` on `inputs`: inference first (inputs typed by the tensors; `constant_inputs`
// lists inputs inference may read), then the kernel. Fails if the kernel's outputs disagree
// with what inference promised.
inline Expected<std::vector<Tensor>> run_op(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
                                            ir::AttributeMap attrs = {}, int num_outputs = 1,
                                            std::vector<int> constant_inputs = {}) {
  std::vector<ir::TensorType> types;
  std::vector<const Tensor*> constants(inputs.size(), nullptr);
  for (const Tensor& t : inputs) types.push_back(t.defined() ? ir::TensorType{t.dtype(), t.shape()} : ir::TensorType{});
  for (int i : constant_inputs) constants[static_cast<size_t>(i)] = &inputs[static_cast<size_t>(i)];
  OneNode n = make_node(op, opset, types, std::move(attrs), num_outputs, constants);
  KILN_RETURN_IF_ERROR(infer_node(*n.node));
  KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*n.node));
  std::vector<RuntimeValue> in_values(inputs.begin(), inputs.end());
  std::vector<const RuntimeValue*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) ins.push_back(inputs[i].defined() ? &in_values[i] : nullptr);
  std::vector<RuntimeValue> out_values(static_cast<size_t>(num_outputs));
  KernelContext ctx(*n.node, ins, &out_values);
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  std::vector<Tensor> outs;
  for (RuntimeValue& v : out_values) outs.push_back(v.is_tensor() ? v.tensor() : Tensor());
  for (int i = 0; i < num_outputs; ++i) {
    const ir::TensorType& t = n.node->outputs()[static_cast<size_t>(i)]->type();
    const Tensor& o = outs[static_cast<size_t>(i)];
    if (t.dtype != o.dtype())
      return internal_error("output %d: inferred %s, kernel gave %s", i, dtype_name(t.dtype), dtype_name(o.dtype()));
    if (t.shape.is_static() && t.shape.static_dims() != o.dims())
      return internal_error("output %d: inferred %s, kernel gave %s", i, t.shape.to_string().c_str(),
                            dims_to_string(o.dims()).c_str());
  }
  return outs;
}

// Runs a one-output op and returns its result, failing the test on error.
inline Tensor run1(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
                   ir::AttributeMap attrs = {}, std::vector<int> constant_inputs = {}) {
  auto r = run_op(op, opset, inputs, std::move(attrs), 1, std::move(constant_inputs));
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().to_string();
  return r.ok() ? (*r)[0] : Tensor();
}

template <typename T>
Tensor make(std::vector<int64_t> dims, const std::vector<T>& values) {
  return Tensor::from_vector<T>(values, dims.empty() ? std::vector<int64_t>{} : dims);
}

template <typename T>
Tensor scalar(T v) {
  return Tensor::scalar<T>(v);
}

// Expects dims and every element within atol + rtol * |expected| (exact for rtol = atol = 0);
// NaN matches NaN.
inline void expect_tensor(const Tensor& got, const std::vector<int64_t>& dims, const std::vector<double>& expected,
                          double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.dims(), dims);
  ASSERT_EQ(got.num_elements(), static_cast<int64_t>(expected.size()));
  for (int64_t i = 0; i < got.num_elements(); ++i) {
    double g = got.element_as_double(i), e = expected[static_cast<size_t>(i)];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(g)) << "element " << i;
    } else if (std::isinf(e)) {
      EXPECT_EQ(g, e) << "element " << i;
    } else {
      EXPECT_NEAR(g, e, atol + rtol * std::abs(e)) << "element " << i;
    }
  }
}

inline ir::Attribute attr_i(int64_t v) { return ir::Attribute::from_int(v); }
inline ir::Attribute attr_f(float v) { return ir::Attribute::from_float(v); }
inline ir::Attribute attr_s(std::string v) { return ir::Attribute::from_string(std::move(v)); }
inline ir::Attribute attr_ints(std::vector<int64_t> v) { return ir::Attribute::from_ints(std::move(v)); }

}  // namespace kiln::ops::testing
