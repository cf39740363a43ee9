// Kiln's Transpose kernel (src/kernels/cpu/transpose.cc) against the reference kernel: every
// permutation of 3-D and 4-D inputs with odd extents and dims of 1 (which merge or drop), a 5-D
// heads split like BERT's, the default (reversed) permutation, every element size, and a
// single element; plus what it declines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "simd_test_util.h"

namespace kiln::kernels {
namespace {

using testing::Built;
using testing::Dims;

const KernelFactory* transpose_factory() {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(ops::kOnnxDomain, "Transpose", DeviceKind::kCpu))
    if (f->name == "kiln") return f;
  return nullptr;
}

// A Transpose of a `dtype` input of `dims`, perm given or (empty) the default, with distinct
// bytes in every element.
// The graph and node only (no input data).
Built transpose_node(DataType dtype, const Dims& dims, const std::vector<int64_t>& perm) {
  Built b;
  b.graph = std::make_shared<ir::Graph>();
  ir::Value* v = b.graph->get_or_add_value("x");
  v->type() = ir::TensorType{dtype, Shape::from_static(dims)};
  b.graph->inputs().push_back(v);
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("t", "Transpose", ops::kOnnxDomain, 13, {v}, {y});
  if (!perm.empty()) b.node->attrs()["perm"] = ir::Attribute::from_ints(perm);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

Built build_transpose(DataType dtype, const Dims& dims, const std::vector<int64_t>& perm) {
  Built b = transpose_node(dtype, dims, perm);
  std::mt19937 rng(7);
  b.inputs = {testing::random_bytes(dtype, dims, rng)};
  return b;
}

void expect_same_as_reference(const Built& b, const std::string& what) {
  testing::expect_bytes_match_reference(transpose_factory(), b, what);
}

std::string describe(const Dims& dims, const std::vector<int64_t>& perm) {
  std::string s = dims_to_string(dims) + " perm";
  for (int64_t p : perm) s += " " + std::to_string(p);
  return s;
}

TEST(TransposeKernel, EveryPermutationOf3DAnd4D) {
  for (const Dims& dims : {Dims{3, 5, 7}, Dims{2, 3, 5, 7}, Dims{1, 3, 1, 7}, Dims{4, 1, 9, 2}}) {
    std::vector<int64_t> perm(dims.size());
    std::iota(perm.begin(), perm.end(), 0);
    do {
      Built b = build_transpose(DataType::kFloat32, dims, perm);
      expect_same_as_reference(b, describe(dims, perm));
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
}

TEST(TransposeKernel, HeadsSplitDefaultPermAndOneElement) {
  expect_same_as_reference(build_transpose(DataType::kFloat32, {1, 33, 12, 64}, {0, 2, 1, 3}),
                           "BERT heads split");
  expect_same_as_reference(build_transpose(DataType::kFloat32, {1, 12, 33, 64}, {0, 2, 3, 1}),
                           "K transposed");
  expect_same_as_reference(build_transpose(DataType::kFloat32, {2, 3, 4, 5, 6}, {4, 0, 3, 1, 2}),
                           "5-D");
  expect_same_as_reference(build_transpose(DataType::kFloat32, {5, 6, 7}, {}), "default perm");
  expect_same_as_reference(build_transpose(DataType::kFloat32, {1, 1, 1}, {2, 0, 1}),
                           "one element");
  expect_same_as_reference(build_transpose(DataType::kFloat32, {300, 257}, {1, 0}),
                           "2-D, rows over several tasks");
}

TEST(TransposeKernel, EveryElementSize) {
  for (DataType t : {DataType::kUInt8, DataType::kBool, DataType::kFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kFloat64})
    expect_same_as_reference(build_transpose(t, {3, 4, 5}, {2, 0, 1}), dtype_name(t));
}

TEST(TransposeKernel, NotApplicable) {
  const KernelFactory* f = transpose_factory();
  ASSERT_NE(f, nullptr);
  // Strings and 4-bit types stay on the reference kernel.
  EXPECT_FALSE(f->applicable(*transpose_node(DataType::kString, {2, 3}, {1, 0}).node).ok());
  EXPECT_FALSE(f->applicable(*transpose_node(DataType::kInt4, {2, 4}, {1, 0}).node).ok());
}

}  // namespace
}  // namespace kiln::kernels
