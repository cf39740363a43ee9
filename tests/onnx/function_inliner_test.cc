// Unit tests of model-local function inlining: calls expand into renamed body nodes with
// bound attributes, run to the values NumPy gives, nest, and fail cleanly on bad calls.
#include "frontend/onnx/function_inliner.h"

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <string>
#include <vector>

#include "frontend/onnx/onnx_importer.h"
#include "runtime/graph_executor.h"

namespace kiln::frontend {
namespace {

onnx::ModelProto parse_text(const char* text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  return m;
}

// custom.F(X, B) -> (Z, Y): Y = LeakyRelu<alpha = @alpha>(X); Z = Add(Y, B).
onnx::FunctionProto leaky_add_function() {
  onnx::FunctionProto f;
  f.set_name("F");
  f.set_domain("custom");
  f.add_input("X");
  f.add_input("B");
  f.add_output("Z");
  f.add_output("Y");
  f.add_attribute("alpha");
  onnx::OperatorSetIdProto* op = f.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  onnx::NodeProto* relu = f.add_node();
  relu->set_op_type("LeakyRelu");
  relu->set_name("act");
  relu->add_input("X");
  relu->add_output("Y");
  onnx::AttributeProto* a = relu->add_attribute();
  a->set_name("alpha");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_ref_attr_name("alpha");
  onnx::NodeProto* add = f.add_node();
  add->set_op_type("Add");
  add->add_input("Y");
  add->add_input("B");
  add->add_output("Z");
  return f;
}

// custom.G(X, B) -> (Z): Z = custom.F<alpha = 0.5>(X, B), a call inside a function.
onnx::FunctionProto nested_function() {
  onnx::FunctionProto g;
  g.set_name("G");
  g.set_domain("custom");
  g.add_input("X");
  g.add_input("B");
  g.add_output("Z");
  onnx::NodeProto* call = g.add_node();
  call->set_op_type("F");
  call->set_domain("custom");
  call->add_input("X");
  call->add_input("B");
  call->add_output("Z");
  onnx::AttributeProto* a = call->add_attribute();
  a->set_name("alpha");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(0.5f);
  return g;
}

Expected<ImportResult> import_model(const onnx::ModelProto& m) {
  std::string bytes = m.SerializeAsString();
  return import_onnx_bytes(bytes.data(), bytes.size());
}

std::vector<float> run(const ImportResult& r, const std::vector<float>& x, const std::vector<float>& b) {
  auto executor = rt::GraphExecutor::create(r.graph);
  EXPECT_TRUE(executor.ok()) << executor.status().to_string();
  if (!executor.ok()) return {};
  std::vector<rt::NamedValue> inputs{{"X", RuntimeValue(Tensor::from_vector<float>(x))},
                                     {"B", RuntimeValue(Tensor::from_vector<float>(b))}};
  std::vector<RuntimeValue> outputs;
  Status st = (*executor)->run(inputs, &outputs);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok() || outputs.empty()) return {};
  const Tensor& t = outputs[0].tensor();
  return std::vector<float>(t.data<float>(), t.data<float>() + t.num_elements());
}

TEST(FunctionInliner, CallsExpandWithBoundAttributes) {
  // T = F<alpha = 0.5>(X, B); U = F(T, B): the second call leaves alpha to LeakyRelu's 0.01.
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
g (float[2] X, float[2] B) => (float[2] U) {
  T = custom.F <alpha = 0.5> (X, B)
  U = custom.F (T, B)
}
)");
  *m.add_functions() = leaky_add_function();
  auto r = import_model(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& nodes = r->graph->nodes();
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0]->op_type(), "LeakyRelu");
  EXPECT_FLOAT_EQ(nodes[0]->attr_float("alpha", 0), 0.5f);
  EXPECT_FALSE(nodes[2]->has_attr("alpha"));
  EXPECT_EQ(nodes[1]->outputs()[0]->name(), "T");
  // Two calls, two distinct copies of the body's inner value Y.
  EXPECT_NE(nodes[0]->outputs()[0]->name(), nodes[2]->outputs()[0]->name());
  // X = [-4, 4], B = [1, 1]: T = [-2 + 1, 4 + 1] = [-1, 5]; U = [-0.01 + 1, 5 + 1].
  std::vector<float> u = run(*r, {-4, 4}, {1, 1});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_FLOAT_EQ(u[0], 0.99f);
  EXPECT_FLOAT_EQ(u[1], 6.0f);
}

TEST(FunctionInliner, NestedCallsExpand) {
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
g (float[2] X, float[2] B) => (float[2] U) {
  U = custom.G (X, B)
}
)");
  *m.add_functions() = leaky_add_function();
  *m.add_functions() = nested_function();
  auto r = import_model(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->graph->nodes().size(), 2u);
  std::vector<float> u = run(*r, {-4, 4}, {1, 1});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_FLOAT_EQ(u[0], -1.0f);
  EXPECT_FLOAT_EQ(u[1], 5.0f);
}

TEST(FunctionInliner, BadCallsAreErrors) {
  // Recursion.
  onnx::ModelProto m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
g (float[2] X, float[2] B) => (float[2] U) {
  U = custom.G (X, B)
}
)");
  onnx::FunctionProto g = nested_function();
  g.mutable_node(0)->set_op_type("G");
  *m.add_functions() = g;
  auto r = import_model(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("nest deeper"), std::string::npos) << r.status().to_string();

  // More inputs than the function takes.
  m = parse_text(R"(
<ir_version: 8, opset_import: ["" : 17, "custom" : 1]>
g (float[2] X, float[2] B) => (float[2] U) {
  U = custom.F (X, B, X)
}
)");
  *m.add_functions() = leaky_add_function();
  r = import_model(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("function 'F' takes 2"), std::string::npos) << r.status().to_string();

  // Defined twice.
  m.clear_functions();
  *m.add_functions() = leaky_add_function();
  *m.add_functions() = leaky_add_function();
  EXPECT_FALSE(import_model(m).ok());
}

}  // namespace
}  // namespace kiln::frontend
