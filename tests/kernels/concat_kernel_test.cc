// Kiln's Concat kernel (src/kernels/cpu/concat.cc) against the reference kernel: every axis of
// 1-D to 4-D inputs (negative axes too), inputs of different extents along the axis (one of
// them 1), one input, every element size, many rows over several threads; and what it declines.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "simd_test_util.h"

namespace kiln::kernels {
namespace {

using testing::Built;
using testing::Dims;

const KernelFactory* concat_factory() {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(ops::kOnnxDomain, "Concat", DeviceKind::kCpu))
    if (f->name == "kiln") return f;
  return nullptr;
}

// A Concat of inputs of `dims` along `axis`; with data unless `no_data`.
Built build_concat(DataType dtype, const std::vector<Dims>& dims, int64_t axis, bool no_data = false) {
  Built b;
  b.graph = std::make_shared<ir::Graph>();
  std::vector<ir::Value*> ins;
  std::mt19937 rng(11);
  for (size_t i = 0; i < dims.size(); ++i) {
    ir::Value* v = b.graph->get_or_add_value("x" + std::to_string(i));
    v->type() = ir::TensorType{dtype, Shape::from_static(dims[i])};
    b.graph->inputs().push_back(v);
    ins.push_back(v);
    if (no_data) continue;
    b.inputs.push_back(testing::random_bytes(dtype, dims[i], rng));
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("c", "Concat", ops::kOnnxDomain, 13, ins, {y});
  b.node->attrs()["axis"] = ir::Attribute::from_int(axis);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

void expect_same_as_reference(const Built& b, const std::string& what) {
  testing::expect_bytes_match_reference(concat_factory(), b, what);
}

TEST(ConcatKernel, EveryAxisOf1DTo4D) {
  const Dims base = {3, 4, 5, 6};
  for (size_t rank = 1; rank <= 4; ++rank) {
    for (int64_t axis = 0; axis < static_cast<int64_t>(rank); ++axis) {
      std::vector<Dims> dims;
      for (int64_t extent : {2, 1, 7}) {
        Dims d(base.begin(), base.begin() + static_cast<long>(rank));
        d[static_cast<size_t>(axis)] = extent;
        dims.push_back(d);
      }
      const std::string what = "rank " + std::to_string(rank) + " axis " + std::to_string(axis);
      expect_same_as_reference(build_concat(DataType::kFloat32, dims, axis), what);
      expect_same_as_reference(build_concat(DataType::kFloat32, dims, axis - static_cast<int64_t>(rank)),
                               what + " (negative)");
    }
  }
}

TEST(ConcatKernel, OneInputManyRowsAndEveryElementSize) {
  expect_same_as_reference(build_concat(DataType::kFloat32, {{4, 5}}, 1), "one input");
  expect_same_as_reference(build_concat(DataType::kFloat32, {{1, 96, 160, 160}, {1, 96, 160, 160}}, 1),
                           "PP-OCRv4 det's FPN concat size");
  expect_same_as_reference(build_concat(DataType::kFloat32, {{5000, 3}, {5000, 1}}, 1), "5000 rows");
  for (DataType t : {DataType::kUInt8, DataType::kBool, DataType::kFloat16, DataType::kInt32,
                     DataType::kInt64, DataType::kFloat64})
    expect_same_as_reference(build_concat(t, {{3, 2, 4}, {3, 5, 4}}, 1), dtype_name(t));
}

TEST(ConcatKernel, NotApplicable) {
  const KernelFactory* f = concat_factory();
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->applicable(*build_concat(DataType::kString, {{2}, {3}}, 0, true).node).ok());
  EXPECT_FALSE(f->applicable(*build_concat(DataType::kInt4, {{2, 2}, {2, 2}}, 0, true).node).ok());
}

}  // namespace
}  // namespace kiln::kernels
