// Tests of Transpose/DepthToSpace/SpaceToDepth, Slice, and Concat/Split/Tile/Pad
// (src/ops/transpose.cc, slice.cc, concat_split.cc); expected values from NumPy.
#include <limits>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

using ir::TensorType;

TEST(TransposeTest, PermutesAndReversesByDefault) {
  Tensor x = iota_f({2, 3, 4});
  expect_tensor(run1("Transpose", 13, {x}, {{"perm", attr_ints({1, 0, 2})}}), {3, 2, 4},
                {0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11, 20, 21, 22, 23});
  expect_tensor(run1("Transpose", 13, {x}), {4, 3, 2},
                {0, 12, 4, 16, 8, 20, 1, 13, 5, 17, 9, 21, 2, 14, 6, 18, 10, 22, 3, 15, 7, 19, 11, 23});
  Tensor s = run1("Transpose", 13, {strs({2, 2}, {"a", "b", "c", "d"})});
  EXPECT_EQ(str_values(s), (std::vector<std::string>{"a", "c", "b", "d"}));
  EXPECT_NE(run_error("Transpose", 13, {x}, {{"perm", attr_ints({0, 0, 1})}}).find("permutation"),
            std::string::npos);
}

TEST(TransposeTest, DepthToSpaceBothModesAndSpaceToDepth) {
  Tensor x = iota_f({1, 8, 1, 2});
  expect_tensor(run1("DepthToSpace", 13, {x}, {{"blocksize", attr_i(2)}}), {1, 2, 2, 4},
                {0, 4, 1, 5, 8, 12, 9, 13, 2, 6, 3, 7, 10, 14, 11, 15});
  expect_tensor(run1("DepthToSpace", 13, {x}, {{"blocksize", attr_i(2)}, {"mode", attr_s("CRD")}}), {1, 2, 2, 4},
                {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15});
  expect_tensor(run1("SpaceToDepth", 13, {iota_f({1, 1, 4, 4})}, {{"blocksize", attr_i(2)}}), {1, 4, 2, 2},
                {0, 2, 8, 10, 1, 3, 9, 11, 4, 6, 12, 14, 5, 7, 13, 15});
  EXPECT_NE(run_error("DepthToSpace", 13, {iota_f({1, 6, 1, 1})}, {{"blocksize", attr_i(2)}}), "");
  EXPECT_NE(run_error("SpaceToDepth", 13, {iota_f({1, 1, 3, 4})}, {{"blocksize", attr_i(2)}}), "");
}

TEST(SliceTest, Opset10InputsWithAxesAndNegativeEnds) {
  Tensor x = iota_f({3, 4, 5});
  Tensor y = run1("Slice", 13, {x, i64({0, 1}), i64({2, -1}), i64({0, 2})}, {}, {1, 2, 3});
  expect_tensor(y, {2, 4, 3}, {1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18, 21, 22, 23, 26, 27, 28, 31, 32, 33, 36, 37, 38});
  // x[1:1000, :, ::3]
  y = run1("Slice", 13, {x, i64({1, 0}), i64({1000, 1000}), i64({0, 2}), i64({1, 3})});
  expect_tensor(y, {2, 4, 2}, {20, 23, 25, 28, 30, 33, 35, 38, 40, 43, 45, 48, 50, 53, 55, 58});
}

TEST(SliceTest, NegativeStepsClampLikeNumpy) {
  Tensor x = iota_f({3, 4, 5});
  // x[:, -1::-2, :]
  Tensor y = run1("Slice", 13, {x, i64({-1}), i64({std::numeric_limits<int64_t>::min()}), i64({1}), i64({-2})});
  expect_tensor(y, {3, 2, 5}, {15, 16, 17, 18, 19, 5, 6, 7, 8, 9, 35, 36, 37, 38, 39, 25, 26, 27, 28, 29,
                               55, 56, 57, 58, 59, 45, 46, 47, 48, 49});
  // x[::-1, 2:0:-1, 4:-6:-2]
  y = run1("Slice", 13, {x, i64({-1, 2, 4}), i64({std::numeric_limits<int64_t>::min(), 0, -6}), i64({0, 1, 2}),
                         i64({-1, -1, -2})}, {}, {1, 2, 3, 4});
  expect_tensor(y, {3, 2, 3}, {54, 52, 50, 49, 47, 45, 34, 32, 30, 29, 27, 25, 14, 12, 10, 9, 7, 5});
}

TEST(SliceTest, Opset1AttributesStringsAndErrors) {
  Tensor y = run1("Slice", 9, {iota_f({3, 4})}, {{"starts", attr_ints({1})}, {"ends", attr_ints({3})},
                                                 {"axes", attr_ints({1})}});
  expect_tensor(y, {3, 2}, {1, 2, 5, 6, 9, 10});
  Tensor s = run1("Slice", 13, {strs({4}, {"a", "b", "c", "d"}), i64({3}), i64({0}), i64({0}), i64({-1})});
  EXPECT_EQ(str_values(s), (std::vector<std::string>{"d", "c", "b"}));
  Tensor x = iota_f({3, 4});
  EXPECT_NE(run_error("Slice", 13, {x, i64({0}), i64({1}), i64({0}), i64({0})}).find("step"), std::string::npos);
  EXPECT_NE(run_error("Slice", 13, {x, i64({0, 0}), i64({1, 1}), i64({0, 0})}).find("repeated"), std::string::npos);
  EXPECT_NE(run_error("Slice", 13, {x, i64({0}), i64({1}), i64({2})}).find("out of range"), std::string::npos);
  EXPECT_NE(run_error("Slice", 13, {x, i64({0}), i64({1, 2})}), "");
}

TEST(SliceTest, InferenceKeepsSymbolsOnFullSlices) {
  Tensor starts = i64({0, 1}), ends = i64({std::numeric_limits<int64_t>::max(), 3}), axes = i64({0, 1});
  auto t = infer_op("Slice", 13,
                    {TensorType{DataType::kFloat32, Shape{Dim::symbolic("n"), 10}}, TensorType{DataType::kInt64, Shape{2}},
                     TensorType{DataType::kInt64, Shape{2}}, TensorType{DataType::kInt64, Shape{2}}},
                    {}, {nullptr, &starts, &ends, &axes});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)[0].shape.to_string(), "[n,2]");
}

TEST(ConcatTest, JoinsAlongAxisForNumbersAndStrings) {
  Tensor a = iota_f({2, 3});
  Tensor b = make<float>({2, 2}, {100, 101, 102, 103});
  expect_tensor(run1("Concat", 13, {a, b}, {{"axis", attr_i(-1)}}), {2, 5}, {0, 1, 2, 100, 101, 3, 4, 5, 102, 103});
  Tensor s = run1("Concat", 13, {strs({1, 2}, {"a", "b"}), strs({2, 2}, {"c", "d", "e", "f"})}, {{"axis", attr_i(0)}});
  EXPECT_EQ(s.dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(str_values(s), (std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  Tensor bo = run1("Concat", 13, {Tensor::from_vector<bool>({true}), Tensor::from_vector<bool>({false, true})},
                   {{"axis", attr_i(0)}});
  EXPECT_EQ(int_values(bo), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_NE(run_error("Concat", 13, {a, iota_f({3, 2})}, {{"axis", attr_i(1)}}), "");
  EXPECT_NE(run_error("Concat", 13, {a, b}, {{"axis", attr_i(2)}}).find("out of range"), std::string::npos);
}

TEST(SplitTest, SplitAttributeInputAndNumOutputs) {
  Tensor x = iota_f({2, 6});
  auto r = run_op("Split", 11, {x}, {{"axis", attr_i(1)}, {"split", attr_ints({1, 3, 2})}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[1], {2, 3}, {1, 2, 3, 7, 8, 9});
  r = run_op("Split", 13, {x, i64({1, 3, 2})}, {{"axis", attr_i(1)}}, 3, {1});
  ASSERT_TRUE(r.ok());
  expect_tensor((*r)[2], {2, 2}, {4, 5, 10, 11});
  r = run_op("Split", 13, {x}, {{"axis", attr_i(1)}}, 2);
  ASSERT_TRUE(r.ok());
  expect_tensor((*r)[1], {2, 3}, {3, 4, 5, 9, 10, 11});
  // Opset 18: 7 elements into 3 parts -> 3, 3, 1.
  r = run_op("Split", 18, {iota_f({7})}, {{"num_outputs", attr_i(3)}}, 3);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[2], {1}, {6});
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{3}));
  EXPECT_NE(run_error("Split", 13, {x, i64({1, 1})}, {{"axis", attr_i(1)}}, 2).find("sums"), std::string::npos);
  EXPECT_NE(run_error("Split", 13, {iota_f({7})}, {}, 2).find("equal"), std::string::npos);
}

TEST(TileTest, RepeatsEachAxis) {
  Tensor y = run1("Tile", 13, {iota_f({2, 3}), i64({2, 2})}, {}, {1});
  expect_tensor(y, {4, 6}, {0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5, 0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5});
  EXPECT_NE(run_error("Tile", 13, {iota_f({2, 3}), i64({2})}), "");
  EXPECT_NE(run_error("Tile", 13, {iota_f({2, 3}), i64({2, -1})}), "");
}

TEST(PadTest, AllModesMatchNumpyPad) {
  Tensor x = make<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor pads = i64({1, 2, 0, 1});  // np.pad(x, ((1, 0), (2, 1)))
  expect_tensor(run1("Pad", 13, {x, pads, scalar<float>(9)}, {}, {1}), {3, 6},
                {9, 9, 9, 9, 9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 4, 5, 6, 9});
  expect_tensor(run1("Pad", 13, {x, pads}, {{"mode", attr_s("reflect")}}), {3, 6},
                {6, 5, 4, 5, 6, 5, 3, 2, 1, 2, 3, 2, 6, 5, 4, 5, 6, 5});
  expect_tensor(run1("Pad", 13, {x, pads}, {{"mode", attr_s("edge")}}), {3, 6},
                {1, 1, 1, 2, 3, 3, 1, 1, 1, 2, 3, 3, 4, 4, 4, 5, 6, 6});
  expect_tensor(run1("Pad", 19, {x, pads}, {{"mode", attr_s("wrap")}}), {3, 6},
                {5, 6, 4, 5, 6, 4, 2, 3, 1, 2, 3, 1, 5, 6, 4, 5, 6, 4});
  // Opset 2 attributes; negative pads crop.
  expect_tensor(run1("Pad", 2, {x}, {{"pads", attr_ints({0, 1, 0, -1})}}), {2, 3}, {0, 1, 2, 0, 4, 5});
  // Opset 18 axes input: pad only axis 1 (1 before, 0 after).
  expect_tensor(run1("Pad", 18, {x, i64({1, 0}), Tensor(), i64({-1})}), {2, 4}, {0, 1, 2, 3, 0, 4, 5, 6});
  EXPECT_NE(run_error("Pad", 13, {x, i64({1, 2})}), "");
  EXPECT_NE(run_error("Pad", 13, {x, i64({0, -4, 0, 0})}).find("negative"), std::string::npos);
  EXPECT_NE(run_error("Pad", 13, {x, pads}, {{"mode", attr_s("wrap")}}), "");
}

}  // namespace
}  // namespace kiln::ops::testing
