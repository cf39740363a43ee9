// Tests of Unique: sorted and unsorted, with and without axis, all four outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(UniqueTest, SortedFlat) {
  auto r = run_op("Unique", 11, {make<float>({6}, {2, 1, 1, 3, 4, 3})}, {}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {4}, {1, 2, 3, 4});
  expect_tensor((*r)[1], {4}, {1, 0, 3, 4});
  expect_tensor((*r)[2], {6}, {1, 0, 0, 2, 3, 2});
  expect_tensor((*r)[3], {4}, {2, 1, 2, 1});
}

TEST(UniqueTest, UnsortedFlat) {
  auto r = run_op("Unique", 11, {make<float>({6}, {2, 1, 1, 3, 4, 3})}, {{"sorted", attr_i(0)}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {4}, {2, 1, 3, 4});
  expect_tensor((*r)[1], {4}, {0, 1, 3, 4});
  expect_tensor((*r)[2], {6}, {0, 1, 1, 2, 3, 2});
  expect_tensor((*r)[3], {4}, {1, 2, 2, 1});
}

TEST(UniqueTest, SortedAxis1) {
  auto r = run_op("Unique", 11, {make<float>({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 4})}, {{"axis", attr_i(1)}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {3, 3}, {0, 0, 1, 0, 0, 1, 3, 4, 2});
  expect_tensor((*r)[1], {3}, {1, 2, 0});
  expect_tensor((*r)[2], {3}, {2, 0, 1});
  expect_tensor((*r)[3], {3}, {1, 1, 1});
}

TEST(UniqueTest, IntRowsAxis0) {
  auto r = run_op("Unique", 11, {make<int64_t>({4, 2}, {5, 1, 2, 2, 5, 1, 0, 9})}, {{"axis", attr_i(0)}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {3, 2}, {0, 9, 2, 2, 5, 1}, 0, 0);
  expect_tensor((*r)[1], {3}, {3, 1, 0}, 0, 0);
  expect_tensor((*r)[2], {4}, {2, 1, 2, 0}, 0, 0);
  expect_tensor((*r)[3], {3}, {1, 1, 2}, 0, 0);
}


TEST(UniqueTest, Strings) {
  auto r = run_op("Unique", 11, {strs({4}, {"b", "a", "b", "c"})}, {}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(str_values((*r)[0]), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{1, 0, 3}));
  EXPECT_EQ(int_values((*r)[2]), (std::vector<int64_t>{1, 0, 1, 2}));
  EXPECT_EQ(int_values((*r)[3]), (std::vector<int64_t>{1, 2, 1}));
}

TEST(UniqueTest, BadAxis) { EXPECT_NE(run_error("Unique", 11, {iota_f({2, 2})}, {{"axis", attr_i(2)}}), ""); }

}  // namespace
}  // namespace kiln::ops::testing
