// Tests of the shape ops (src/ops/shape_ops.cc); expected values from NumPy.
#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

using ir::Attribute;
using ir::TensorType;

TEST(ShapeOpsTest, ShapeGivesDimsAndHonoursStartEnd) {
  Tensor x = iota_f({2, 3, 4});
  EXPECT_EQ(int_values(run1("Shape", 13, {x})), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(int_values(run1("Shape", 15, {x}, {{"start", attr_i(1)}})), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(int_values(run1("Shape", 15, {x}, {{"end", attr_i(-1)}})), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(int_values(run1("Shape", 15, {x}, {{"start", attr_i(-10)}, {"end", attr_i(10)}})),
            (std::vector<int64_t>{2, 3, 4}));
  auto t = infer_op("Shape", 13, {TensorType{DataType::kFloat32, Shape{Dim::symbolic("b"), 7, 9}}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, (Shape{3}));
  EXPECT_EQ((*t)[0].dtype, DataType::kInt64);
}

TEST(ShapeOpsTest, SizeCountsElements) {
  Tensor y = run1("Size", 13, {iota_f({2, 3, 4})});
  EXPECT_EQ(y.rank(), 0);
  EXPECT_EQ(y.data<int64_t>()[0], 24);
}

TEST(ShapeOpsTest, ReshapeResolvesZeroAndMinusOne) {
  Tensor y = run1("Reshape", 13, {iota_f({2, 3, 4}), i64({0, -1, 2})}, {}, {1});
  expect_tensor(y, {2, 6, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  // allowzero=1 (opset 14): 0 is a real extent.
  Tensor e = run1("Reshape", 14, {iota_f({0, 3}), i64({3, 0})}, {{"allowzero", attr_i(1)}});
  EXPECT_EQ(e.dims(), (std::vector<int64_t>{3, 0}));
}

TEST(ShapeOpsTest, ReshapeMovesStringsAndBools) {
  Tensor s = strs({2, 2}, {"a", "bb", "", "ccc"});
  Tensor y = run1("Reshape", 13, {s, i64({4})});
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{4}));
  EXPECT_EQ(str_values(y), (std::vector<std::string>{"a", "bb", "", "ccc"}));
  Tensor b = Tensor::from_vector<bool>({true, false, true, true, false, false}, {2, 3});
  Tensor yb = run1("Reshape", 5, {b, i64({3, -1})});
  EXPECT_EQ(yb.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(int_values(yb), (std::vector<int64_t>{1, 0, 1, 1, 0, 0}));
}

TEST(ShapeOpsTest, ReshapeRejectsBadShapes) {
  Tensor x = iota_f({2, 3});
  EXPECT_NE(run_error("Reshape", 13, {x, i64({4, 2})}).find("cannot reshape"), std::string::npos);
  EXPECT_NE(run_error("Reshape", 13, {x, i64({-1, -1})}).find("more than one -1"), std::string::npos);
  EXPECT_NE(run_error("Reshape", 13, {x, i64({-2, 3})}).find("negative"), std::string::npos);
  EXPECT_NE(run_error("Reshape", 13, {x, i64({0, 0, 0})}).find("rank"), std::string::npos);
  EXPECT_NE(run_error("Reshape", 14, {x, i64({0, -1})}, {{"allowzero", attr_i(1)}}).find("allowzero"),
            std::string::npos);
  // The error names the node.
  EXPECT_NE(run_error("Reshape", 13, {x, i64({5})}).find("'n' (Reshape)"), std::string::npos);
}

TEST(ShapeOpsTest, ReshapeInferenceUsesConstantShapeAndKeepsSymbols) {
  Tensor target = i64({0, -1, 64});
  auto t = infer_op("Reshape", 13,
                    {TensorType{DataType::kFloat32, Shape{Dim::symbolic("batch"), 128, 768}},
                     TensorType{DataType::kInt64, Shape{3}}},
                    {}, {nullptr, &target});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  // -1 is what is left of the input's extents: batch * 128 * 768 / (batch * 64).
  EXPECT_EQ((*t)[0].shape.to_string(), "[batch,1536,64]");
  Tensor full = i64({2, -1});
  t = infer_op("Reshape", 13,
               {TensorType{DataType::kFloat32, Shape{4, 6}}, TensorType{DataType::kInt64, Shape{2}}}, {},
               {nullptr, &full});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape, (Shape{2, 12}));
  // Unknown shape values: rank from the shape input's length.
  t = infer_op("Reshape", 13, {TensorType{DataType::kFloat32, Shape{4, 6}}, TensorType{DataType::kInt64, Shape{3}}});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)[0].shape.rank(), 3);
  EXPECT_FALSE((*t)[0].shape[0].is_static());
}

TEST(ShapeOpsTest, FlattenSplitsAtAxis) {
  EXPECT_EQ(run1("Flatten", 13, {iota_f({2, 3, 4})}, {{"axis", attr_i(2)}}).dims(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(run1("Flatten", 13, {iota_f({2, 3, 4})}, {{"axis", attr_i(-1)}}).dims(), (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(run1("Flatten", 13, {iota_f({2, 3, 4})}, {{"axis", attr_i(0)}}).dims(), (std::vector<int64_t>{1, 24}));
  EXPECT_NE(run_error("Flatten", 13, {iota_f({2, 3})}, {{"axis", attr_i(3)}}), "");
}

TEST(ShapeOpsTest, SqueezeWithAttributeInputAndNoAxes) {
  Tensor x = iota_f({1, 3, 1, 2});
  EXPECT_EQ(run1("Squeeze", 11, {x}, {{"axes", attr_ints({-2})}}).dims(), (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(run1("Squeeze", 13, {x, i64({0, 2})}, {}, {1}).dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(run1("Squeeze", 13, {x}).dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_NE(run_error("Squeeze", 13, {x, i64({1})}).find("not 1"), std::string::npos);
  EXPECT_NE(run_error("Squeeze", 13, {x, i64({4})}).find("out of range"), std::string::npos);
}

TEST(ShapeOpsTest, UnsqueezeInsertsAxes) {
  Tensor x = iota_f({3, 2});
  EXPECT_EQ(run1("Unsqueeze", 11, {x}, {{"axes", attr_ints({0, -1})}}).dims(), (std::vector<int64_t>{1, 3, 2, 1}));
  EXPECT_EQ(run1("Unsqueeze", 13, {x, i64({1, 3})}, {}, {1}).dims(), (std::vector<int64_t>{3, 1, 2, 1}));
  EXPECT_NE(run_error("Unsqueeze", 13, {x, i64({1, 1})}).find("repeated"), std::string::npos);
  EXPECT_NE(run_error("Unsqueeze", 13, {x, i64({5})}).find("out of range"), std::string::npos);
  // Rank-0 input becomes [1].
  EXPECT_EQ(run1("Unsqueeze", 13, {scalar<float>(2.f), i64({0})}).dims(), (std::vector<int64_t>{1}));
}

TEST(ShapeOpsTest, ExpandBroadcastsBothWays) {
  Tensor x = make<float>({3, 1}, {1, 2, 3});
  Tensor y = run1("Expand", 13, {x, i64({2, 1, 6})}, {}, {1});
  expect_tensor(y, {2, 3, 6}, {1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
                               1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3});
  Tensor s = run1("Expand", 13, {strs({1, 2}, {"x", "y"}), i64({2, 1})});
  EXPECT_EQ(str_values(s), (std::vector<std::string>{"x", "y", "x", "y"}));
  EXPECT_NE(run_error("Expand", 13, {x, i64({4, 2})}).find("broadcast"), std::string::npos);
}

TEST(ShapeOpsTest, IdentityAndDropoutPassThrough) {
  Tensor s = strs({2}, {"p", "q"});
  EXPECT_EQ(str_values(run1("Identity", 16, {s})), (std::vector<std::string>{"p", "q"}));
  auto r = run_op("Dropout", 13, {iota_f({2, 2})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 2}, {0, 1, 2, 3});
  EXPECT_EQ((*r)[1].dtype(), DataType::kBool);
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{1, 1, 1, 1}));
  r = run_op("Dropout", 7, {iota_f({3})}, {{"ratio", attr_f(0.3f)}}, 2);
  ASSERT_TRUE(r.ok());
  expect_tensor((*r)[1], {3}, {1, 1, 1});
  // Training mode runs (legacy_opset_test checks its mask); a ratio of 1 is an error.
  EXPECT_NE(run_error("Dropout", 13, {iota_f({2}), scalar<float>(1.0f), scalar<bool>(true)}).find("ratio"),
            std::string::npos);
}

TEST(ShapeOpsTest, ConstantOfShapeFillsValue) {
  Tensor y = run1("ConstantOfShape", 9, {i64({2, 3})}, {{"value", Attribute::from_tensor(Tensor::from_vector<int64_t>({7}))}}, {0});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(int_values(y), (std::vector<int64_t>(6, 7)));
  Tensor z = run1("ConstantOfShape", 9, {i64({2})});
  expect_tensor(z, {2}, {0, 0});
  Tensor e = run1("ConstantOfShape", 9, {i64({}, {0})});
  EXPECT_EQ(e.rank(), 0);
  EXPECT_NE(run_error("ConstantOfShape", 9, {i64({2, -1})}), "");
}

TEST(ShapeOpsTest, ConstantFromEachAttributeKind) {
  EXPECT_EQ(int_values(run1("Constant", 13, {}, {{"value_ints", attr_ints({4, 5})}})), (std::vector<int64_t>{4, 5}));
  expect_tensor(run1("Constant", 13, {}, {{"value_float", attr_f(2.5f)}}), {}, {2.5});
  Attribute ss;
  ss.kind = ir::AttrKind::kStrings;
  ss.strings = {"hi", "there"};
  EXPECT_EQ(str_values(run1("Constant", 13, {}, {{"value_strings", ss}})), (std::vector<std::string>{"hi", "there"}));
  EXPECT_EQ(str_values(run1("Constant", 13, {}, {{"value_string", attr_s("one")}})), (std::vector<std::string>{"one"}));
  expect_tensor(run1("Constant", 9, {}, {{"value", Attribute::from_tensor(iota_f({2}))}}), {2}, {0, 1});
  EXPECT_NE(run_error("Constant", 13, {}, {{"value_int", attr_i(1)}, {"value_float", attr_f(1)}}).find("exactly one"),
            std::string::npos);
  EXPECT_NE(run_error("Constant", 13, {}), "");
}

TEST(ShapeOpsTest, RangeMatchesNumpyArange) {
  expect_tensor(run1("Range", 11, {scalar<float>(1), scalar<float>(5), scalar<float>(1.5f)}, {}, {0, 1, 2}), {3},
                {1.0, 2.5, 4.0});
  Tensor r = run1("Range", 11, {scalar<int64_t>(10), scalar<int64_t>(0), scalar<int64_t>(-3)}, {}, {0, 1, 2});
  EXPECT_EQ(int_values(r), (std::vector<int64_t>{10, 7, 4, 1}));
  EXPECT_EQ(run1("Range", 11, {scalar<int32_t>(5), scalar<int32_t>(1), scalar<int32_t>(1)}).dims(),
            (std::vector<int64_t>{0}));
  EXPECT_NE(run_error("Range", 11, {scalar<int64_t>(0), scalar<int64_t>(5), scalar<int64_t>(0)}).find("delta"),
            std::string::npos);
}

TEST(ShapeOpsTest, EyeLikeWithOffsetsAndDtype) {
  expect_tensor(run1("EyeLike", 9, {iota_f({3, 4})}, {{"k", attr_i(1)}}), {3, 4},
                {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  Tensor y = run1("EyeLike", 9, {iota_f({3, 3})}, {{"k", attr_i(-1)}, {"dtype", attr_i(7)}});
  EXPECT_EQ(y.dtype(), DataType::kInt64);
  EXPECT_EQ(int_values(y), (std::vector<int64_t>{0, 0, 0, 1, 0, 0, 0, 1, 0}));
  EXPECT_NE(run_error("EyeLike", 9, {iota_f({3})}), "");
}

}  // namespace
}  // namespace kiln::ops::testing
