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
    Tensor t = Tensor::make(dtype, dims[i]);
    auto* bytes = static_cast<unsigned char*>(t.raw_data());
    for (size_t k = 0; k < t.size_bytes(); ++k) bytes[k] = static_cast<unsigned char>(rng());
    if (dtype == DataType::kBool)
      for (size_t k = 0; k < t.size_bytes(); ++k) bytes[k] &= 1;
    b.inputs.push_back(t);
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
  const KernelFactory* f = concat_factory();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*b.node)) << what;
  auto k = f->prepare(*b.node);
  ASSERT_TRUE(k.ok()) << what << ": " << k.status().to_string();
  auto want = testing::run_reference(*b.node, b.inputs);
  auto got = testing::run_kernel(**k, *b.node, b.inputs);
  ASSERT_TRUE(want.ok() && got.ok()) << what;
  ASSERT_EQ(got->dims(), want->dims()) << what;
  EXPECT_EQ(std::memcmp(got->raw_data(), want->raw_data(), want->size_bytes()), 0) << what;
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
  EXPECT_FALSE(f->applicable(*build_concat(DataType::kString, {{2}, {3}}, 0, true).node));
  EXPECT_FALSE(f->applicable(*build_concat(DataType::kInt4, {{2, 2}, {2, 2}}, 0, true).node));
}

}  // namespace
}  // namespace kiln::kernels
