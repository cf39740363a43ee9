// Tests of the ai.onnx.ml ops LabelEncoder, ArrayFeatureExtractor, Binarizer and
// TreeEnsemble; expected values from the ONNX node test data and the ONNX reference.
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// Runs one ai.onnx.ml node (inference, then the kernel) and returns its single output.
Expected<Tensor> run_ml(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
                        ir::AttributeMap attrs) {
  ir::Graph g;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ir::Value* v = g.get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{inputs[i].dtype(), inputs[i].shape()};
    ins.push_back(v);
  }
  ir::Node* n = g.add_node("n", op, "ai.onnx.ml", opset, ins, {g.get_or_add_value("out")});
  n->attrs() = std::move(attrs);
  KILN_RETURN_IF_ERROR(infer_node(*n));
  KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*n));
  std::vector<RuntimeValue> in_values(inputs.begin(), inputs.end());
  std::vector<const RuntimeValue*> in_ptrs;
  for (const RuntimeValue& v : in_values) in_ptrs.push_back(&v);
  std::vector<RuntimeValue> outs(1);
  KernelContext ctx(*n, in_ptrs, &outs);
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  const ir::TensorType& t = n->outputs()[0]->type();
  if (t.dtype != outs[0].tensor().dtype())
    return internal_error("inferred dtype differs from the kernel's");
  return outs[0].tensor();
}

Tensor ml1(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs,
           ir::AttributeMap attrs) {
  auto r = run_ml(op, opset, inputs, std::move(attrs));
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().to_string();
  return r.ok() ? *r : Tensor();
}

ir::Attribute strings_attr(std::vector<std::string> v) {
  ir::Attribute a;
  a.kind = ir::AttrKind::kStrings;
  a.strings = std::move(v);
  return a;
}

TEST(MlOpsTest, LabelEncoderMapsWithDefaults) {
  Tensor x = strs({5}, {"a", "b", "d", "c", "g"});
  ir::AttributeMap a = {{"keys_strings", strings_attr({"a", "b", "c"})},
                        {"values_int64s", attr_ints({0, 1, 2})}};
  Tensor y = ml1("LabelEncoder", 4, {x}, a);
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(int_values(y), (std::vector<int64_t>{0, 1, -1, 2, -1}));
  a["default_int64"] = attr_i(42);
  EXPECT_EQ(int_values(ml1("LabelEncoder", 2, {x}, a)), (std::vector<int64_t>{0, 1, 42, 2, 42}));
  // Tensor-valued attributes (opset 4) choose the output type.
  Tensor values = Tensor::make(DataType::kInt16, {3});
  for (int i = 0; i < 3; ++i) values.data<int16_t>()[i] = static_cast<int16_t>(i);
  Tensor fallback = Tensor::make(DataType::kInt16, {1});
  fallback.data<int16_t>()[0] = 42;
  ir::AttributeMap t = {{"keys_tensor", ir::Attribute::from_tensor(strs({3}, {"a", "b", "c"}))},
                        {"values_tensor", ir::Attribute::from_tensor(values)},
                        {"default_tensor", ir::Attribute::from_tensor(fallback)}};
  Tensor z = ml1("LabelEncoder", 4, {x}, t);
  EXPECT_EQ(z.dtype(), DataType::kInt16);
  EXPECT_EQ(int_values(z), (std::vector<int64_t>{0, 1, 42, 2, 42}));
  // Float keys to strings, default "_Unused".
  ir::AttributeMap f = {{"keys_floats", ir::Attribute::from_floats({1.5f, -2.0f})},
                        {"values_strings", strings_attr({"x", "y"})}};
  EXPECT_EQ(str_values(ml1("LabelEncoder", 2, {make<float>({3}, {-2.0f, 0.0f, 1.5f})}, f)),
            (std::vector<std::string>{"y", "_Unused", "x"}));
  a["values_int64s"] = attr_ints({0, 1});
  EXPECT_FALSE(run_ml("LabelEncoder", 2, {x}, a).ok());
}

TEST(MlOpsTest, ArrayFeatureExtractorAndBinarizer) {
  Tensor x = make<float>({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  expect_tensor(ml1("ArrayFeatureExtractor", 1, {x, i64({0, 1})}, {}), {3, 2}, {0, 1, 4, 5, 8, 9},
                0, 0);
  expect_tensor(ml1("ArrayFeatureExtractor", 1, {x, i64({3})}, {}), {3, 1}, {3, 7, 11}, 0, 0);
  EXPECT_FALSE(run_ml("ArrayFeatureExtractor", 1, {x, i64({4})}, {}).ok());
  expect_tensor(ml1("Binarizer", 1, {make<float>({4}, {-1.0f, 1.0f, 1.5f, 3.0f})},
                    {{"threshold", attr_f(1.0f)}}),
                {4}, {0, 0, 1, 1}, 0, 0);
}

ir::AttributeMap single_tree() {
  // The ONNX node test ai_onnx_ml_tree_ensemble_single_tree.
  return {
      {"aggregate_function", attr_i(1)},
      {"leaf_targetids", attr_ints({0, 1, 0, 1})},
      {"leaf_weights", ir::Attribute::from_tensor(make<double>({4}, {5.23, 12.12, -12.23, 7.21}))},
      {"n_targets", attr_i(2)},
      {"nodes_falseleafs", attr_ints({0, 1, 1})},
      {"nodes_falsenodeids", attr_ints({2, 2, 3})},
      {"nodes_featureids", attr_ints({0, 0, 0})},
      {"nodes_modes", ir::Attribute::from_tensor(make<uint8_t>({3}, {0, 0, 0}))},
      {"nodes_splits", ir::Attribute::from_tensor(make<double>({3}, {3.14, 1.2, 4.2}))},
      {"nodes_trueleafs", attr_ints({0, 1, 1})},
      {"nodes_truenodeids", attr_ints({1, 0, 1})},
      {"post_transform", attr_i(0)},
      {"tree_roots", attr_ints({0})}};
}

TEST(MlOpsTest, TreeEnsembleSingleTree) {
  Tensor x = make<double>({3, 2}, {1.2, 3.4, -0.12, 1.66, 4.14, 1.77});
  expect_tensor(ml1("TreeEnsemble", 5, {x}, single_tree()), {3, 2}, {5.23, 0, 5.23, 0, 0, 12.12},
                1e-12, 0);
  // Logistic post transform: 1 / (1 + exp(-v)).
  ir::AttributeMap a = single_tree();
  a["post_transform"] = attr_i(2);
  expect_tensor(ml1("TreeEnsemble", 5, {x}, a), {3, 2},
                {0.9946749823142578, 0.5, 0.9946749823142578, 0.5, 0.5, 0.9999945506021924}, 1e-12,
                0);
}

TEST(MlOpsTest, TreeEnsembleSetMembership) {
  // The ONNX node test ai_onnx_ml_tree_ensemble_set_membership.
  ir::AttributeMap a = {
      {"aggregate_function", attr_i(1)},
      {"leaf_targetids", attr_ints({0, 1, 2, 3})},
      {"leaf_weights", ir::Attribute::from_tensor(make<float>({4}, {1, 10, 1000, 100}))},
      {"membership_values",
       ir::Attribute::from_tensor(make<float>({8}, {1.2f, 3.7f, 8, 9, NAN, 12, 7, NAN}))},
      {"n_targets", attr_i(4)},
      {"nodes_falseleafs", attr_ints({1, 0, 1})},
      {"nodes_falsenodeids", attr_ints({2, 2, 3})},
      {"nodes_featureids", attr_ints({0, 0, 0})},
      {"nodes_modes", ir::Attribute::from_tensor(make<uint8_t>({3}, {0, 6, 6}))},
      {"nodes_splits", ir::Attribute::from_tensor(make<float>({3}, {11, 232344, NAN}))},
      {"nodes_trueleafs", attr_ints({0, 1, 1})},
      {"nodes_truenodeids", attr_ints({1, 0, 1})},
      {"post_transform", attr_i(0)},
      {"tree_roots", attr_ints({0})}};
  Tensor x = make<float>({6, 1}, {1.2f, 3.4f, -0.12f, NAN, 12, 7});
  expect_tensor(ml1("TreeEnsemble", 5, {x}, a), {6, 4},
                {1, 0, 0, 0, 0, 0, 0, 100, 0, 0, 0, 100, 0, 0, 1000, 0, 0, 0, 1000, 0, 0, 10, 0, 0},
                0, 0);
  a["nodes_truenodeids"] = attr_ints({1, 7, 1});
  EXPECT_FALSE(run_ml("TreeEnsemble", 5, {x}, a).ok());
}

}  // namespace
}  // namespace kiln::ops
