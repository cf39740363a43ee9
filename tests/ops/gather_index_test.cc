// Tests of the gather/scatter ops and the index ops (src/ops/gather_scatter.cc,
// index_ops.cc); expected values from NumPy.
#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

TEST(GatherTest, NegativeIndicesOnEitherAxis) {
  Tensor d = iota_f({3, 4});
  expect_tensor(run1("Gather", 13, {d, i64({0, 2, 2, 1}, {2, 2})}), {2, 2, 4},
                {0, 1, 2, 3, 8, 9, 10, 11, 8, 9, 10, 11, 4, 5, 6, 7});
  Tensor idx32 = Tensor::from_vector<int32_t>({0, -1, 2, 1}, {2, 2});
  expect_tensor(run1("Gather", 13, {d, idx32}, {{"axis", attr_i(1)}}), {3, 2, 2},
                {0, 3, 2, 1, 4, 7, 6, 5, 8, 11, 10, 9});
  // Scalar index removes the axis.
  expect_tensor(run1("Gather", 13, {d, Tensor::scalar<int64_t>(-1)}), {4}, {8, 9, 10, 11});
}

TEST(GatherTest, StringsBoolsAndOutOfRange) {
  Tensor s = strs({3}, {"zero", "one", "two"});
  EXPECT_EQ(str_values(run1("Gather", 13, {s, i64({2, -3, 1})})), (std::vector<std::string>{"two", "zero", "one"}));
  Tensor b = Tensor::from_vector<bool>({true, false, false});
  EXPECT_EQ(int_values(run1("Gather", 13, {b, i64({1, 0})})), (std::vector<int64_t>{0, 1}));
  std::string e = run_error("Gather", 13, {iota_f({3, 4}), i64({3})});
  EXPECT_NE(e.find("index 3 is out of range"), std::string::npos) << e;
  EXPECT_NE(run_error("Gather", 13, {iota_f({3, 4}), i64({-4})}), "");
  EXPECT_NE(run_error("Gather", 13, {iota_f({3, 4}), make<float>({1}, {0})}).find("int32 or int64"), std::string::npos);
}

TEST(GatherTest, GatherElementsAlongEachAxis) {
  expect_tensor(run1("GatherElements", 13, {make<float>({2, 2}, {1, 2, 3, 4}), i64({0, 0, 1, 0}, {2, 2})},
                     {{"axis", attr_i(1)}}),
                {2, 2}, {1, 1, 4, 3});
  expect_tensor(run1("GatherElements", 13, {make<float>({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}),
                                            i64({1, 2, 0, 2, 0, -3}, {2, 3})}),
                {2, 3}, {4, 8, 3, 7, 2, 3});
  EXPECT_NE(run_error("GatherElements", 13, {iota_f({2, 2}), i64({2, 0, 0, 0}, {2, 2})}), "");
}

TEST(GatherTest, GatherNdWithAndWithoutBatchDims) {
  Tensor d = iota_f({2, 2, 2});
  expect_tensor(run1("GatherND", 13, {d, i64({0, 1, 1, 0}, {2, 2})}), {2, 2}, {2, 3, 4, 5});
  expect_tensor(run1("GatherND", 13, {d, i64({1, 0}, {2, 1})}, {{"batch_dims", attr_i(1)}}), {2, 2}, {2, 3, 4, 5});
  EXPECT_NE(run_error("GatherND", 13, {d, i64({0, 2}, {1, 2})}), "");
  EXPECT_NE(run_error("GatherND", 13, {d, i64({0, 0, 0, 0}, {1, 4})}), "");
}

TEST(ScatterTest, ScatterNdReplacesAndAccumulates) {
  Tensor d = make<float>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  expect_tensor(run1("ScatterND", 13, {d, i64({4, 3, 1, 7}, {4, 1}), make<float>({4}, {9, 10, 11, 12})}), {8},
                {1, 11, 3, 10, 9, 6, 7, 12});
  expect_tensor(run1("ScatterND", 16, {d, i64({4, 4, 1}, {3, 1}), make<float>({3}, {10, 20, 5})},
                     {{"reduction", attr_s("add")}}),
                {8}, {1, 7, 3, 4, 35, 6, 7, 8});
  EXPECT_NE(run_error("ScatterND", 13, {d, i64({8}, {1, 1}), make<float>({1}, {0})}), "");
  EXPECT_NE(run_error("ScatterND", 13, {d, i64({1}, {1, 1}), make<float>({2}, {0, 0})}), "");
  EXPECT_NE(run_error("ScatterND", 13, {d, i64({1}, {1, 1}), make<float>({1}, {0})}, {{"reduction", attr_s("add")}}),
            "");
}

TEST(ScatterTest, ScatterElementsWithReductions) {
  Tensor data = make<float>({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
  Tensor upd = make<float>({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f});
  expect_tensor(run1("ScatterElements", 13, {data, i64({1, 0, 2, 0, 2, 1}, {2, 3}), upd}), {3, 3},
                {2.0, 1.100000023841858, 0.0, 1.0, 0.0, 2.200000047683716, 0.0, 2.0999999046325684, 1.2000000476837158});
  expect_tensor(run1("ScatterElements", 16, {make<float>({1, 5}, {1, 2, 3, 4, 5}), i64({1, 3, -2}, {1, 3}),
                                              make<float>({1, 3}, {1.1f, 2.1f, 3.0f})},
                     {{"axis", attr_i(1)}, {"reduction", attr_s("mul")}}),
                {1, 5}, {1.0, 2.200000047683716, 3.0, 25.19999885559082, 5.0});
  expect_tensor(run1("ScatterElements", 18, {make<float>({4}, {5, 1, 5, 1}), i64({0, 1, 1}),
                                              make<float>({3}, {3, 4, 0})},
                     {{"reduction", attr_s("max")}}),
                {4}, {5, 4, 5, 1});
  EXPECT_NE(run_error("ScatterElements", 13, {data, i64({3, 0, 0}, {1, 3}), make<float>({1, 3}, {1, 1, 1})}), "");
}

TEST(OneHotTest, NegativeAndOutOfRangeIndices) {
  Tensor vals = make<float>({2}, {2, 7});
  expect_tensor(run1("OneHot", 11, {i64({0, -1, 2, 5}), scalar<int64_t>(4), vals}, {}, {1}), {4, 4},
                {7, 2, 2, 2, 2, 2, 2, 7, 2, 2, 7, 2, 2, 2, 2, 2});
  expect_tensor(run1("OneHot", 11, {i64({0, -1, 2, 5}), scalar<float>(4), vals}, {{"axis", attr_i(0)}}), {4, 4},
                {7, 2, 2, 2, 2, 2, 2, 2, 2, 2, 7, 2, 2, 7, 2, 2});
  EXPECT_NE(run_error("OneHot", 11, {i64({0}), scalar<int64_t>(4), make<float>({3}, {0, 1, 2})}), "");
}

TEST(IndexOpsTest, NonZeroListsCoordinates) {
  Tensor y = run1("NonZero", 13, {make<float>({2, 2}, {1, 0, 1, 1})});
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(int_values(y), (std::vector<int64_t>{0, 1, 1, 0, 0, 1}));
}

TEST(IndexOpsTest, TopKLargestSmallestAndTies) {
  Tensor x = make<float>({3, 4}, {0, 1, 2, 3, 7, 6, 5, 4, 8, 11, 10, 9});
  auto r = run_op("TopK", 11, {x, i64({3})}, {}, 2, {1});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {3, 3}, {3, 2, 1, 7, 6, 5, 11, 10, 9});
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{3, 2, 1, 0, 1, 2, 1, 2, 3}));
  r = run_op("TopK", 11, {x, i64({2})}, {{"axis", attr_i(0)}, {"largest", attr_i(0)}}, 2);
  ASSERT_TRUE(r.ok());
  expect_tensor((*r)[0], {2, 4}, {0, 1, 2, 3, 7, 6, 5, 4});
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1}));
  r = run_op("TopK", 1, {i64({3, 1, 3, 2, 1})}, {{"k", attr_i(3)}}, 2);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_NE(run_error("TopK", 11, {x, i64({5})}, {}, 2).find("out of range"), std::string::npos);
}

TEST(IndexOpsTest, CumSumExclusiveReverse) {
  Tensor x = make<double>({5}, {1, 2, 3, 4, 5});
  expect_tensor(run1("CumSum", 14, {x, scalar<int64_t>(0)}), {5}, {1, 3, 6, 10, 15});
  expect_tensor(run1("CumSum", 14, {x, scalar<int32_t>(0)}, {{"exclusive", attr_i(1)}}), {5}, {0, 1, 3, 6, 10});
  expect_tensor(run1("CumSum", 14, {x, scalar<int64_t>(-1)}, {{"reverse", attr_i(1)}}), {5}, {15, 14, 12, 9, 5});
  expect_tensor(run1("CumSum", 14, {x, scalar<int64_t>(0)}, {{"reverse", attr_i(1)}, {"exclusive", attr_i(1)}}), {5},
                {14, 12, 9, 5, 0});
  EXPECT_EQ(int_values(run1("CumSum", 14, {i64({0, 1, 2, 3, 4, 5}, {2, 3}), scalar<int64_t>(1)})),
            (std::vector<int64_t>{0, 1, 3, 3, 7, 12}));
  EXPECT_NE(run_error("CumSum", 14, {x, scalar<int64_t>(1)}), "");
}

TEST(IndexOpsTest, TriluUpperAndLower) {
  Tensor x = make<float>({3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  expect_tensor(run1("Trilu", 14, {x, scalar<int64_t>(1)}), {3, 4}, {0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  expect_tensor(run1("Trilu", 14, {x, scalar<int64_t>(-1)}, {{"upper", attr_i(0)}}), {3, 4},
                {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  expect_tensor(run1("Trilu", 14, {x, scalar<int64_t>(-1)}), {3, 4}, {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12});
  EXPECT_NE(run_error("Trilu", 14, {make<float>({2}, {1, 2})}), "");
}

TEST(IndexOpsTest, CompressWithAndWithoutAxis) {
  Tensor x = make<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  auto cond = [](std::vector<bool> v) { return Tensor::from_vector<bool>(v); };
  expect_tensor(run1("Compress", 11, {x, cond({false, true, true})}, {{"axis", attr_i(0)}}), {2, 2}, {3, 4, 5, 6});
  expect_tensor(run1("Compress", 11, {x, cond({false, true})}, {{"axis", attr_i(1)}}), {3, 1}, {2, 4, 6});
  expect_tensor(run1("Compress", 11, {x, cond({false, true, false, false, true})}), {2}, {2, 5});
  EXPECT_NE(run_error("Compress", 11, {x, cond({false, false, false, true})}, {{"axis", attr_i(0)}}), "");
}

TEST(IndexOpsTest, ReverseSequenceTimeMajor) {
  Tensor x = make<float>({4, 4}, {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15});
  expect_tensor(run1("ReverseSequence", 10, {x, i64({4, 3, 2, 1})}), {4, 4},
                {3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15});
  EXPECT_NE(run_error("ReverseSequence", 10, {x, i64({5, 1, 1, 1})}), "");
}

}  // namespace
}  // namespace kiln::ops::testing
