// The compile-time-shaped kernels of Reshape, Flatten, Squeeze, Unsqueeze (kernels/cpu/view_ops.cc)
// and TransData (kernels/cpu/trans_data.cc) against the reference kernels: the same dims and
// bytes on shapes with -1 and 0 in Reshape's target, every Flatten axis, negative axes, dims of
// 1, both layout directions at C0 8 and 16 and several element sizes; a view shares its input's
// storage; and what they decline (a shape input known only at run time, dynamic shapes).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "ops/layout.h"
#include "simd_test_util.h"

namespace kiln::kernels {
namespace {

using testing::Built;
using testing::Dims;

const KernelFactory* kiln_factory(const std::string& domain, const std::string& op) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(domain, op, DeviceKind::kCpu))
    if (f->name == "kiln") return f;
  return nullptr;
}

// A node of `op` on input x (`dtype`, `dims`), extra inputs given as int64 constants (an empty
// vector: an omitted input), attributes as given; types inferred.
Built view_node(const std::string& domain, const std::string& op, int64_t opset, DataType dtype, const Dims& dims,
                const std::vector<std::vector<int64_t>>& constant_inputs, const ir::AttributeMap& attrs,
                bool constants_are_initializers = true) {
  Built b;
  b.graph = std::make_shared<ir::Graph>();
  ir::Value* x = b.graph->get_or_add_value("x");
  x->type() = ir::TensorType{dtype, Shape::from_static(dims)};
  b.graph->inputs().push_back(x);
  std::vector<ir::Value*> inputs = {x};
  for (size_t i = 0; i < constant_inputs.size(); ++i) {
    ir::Value* c = b.graph->get_or_add_value("c" + std::to_string(i));
    Tensor t = Tensor::from_vector(constant_inputs[i]);
    c->type() = ir::TensorType{DataType::kInt64, t.shape()};
    if (constants_are_initializers) {
      c->set_initializer(t);
    } else {
      b.graph->inputs().push_back(c);
    }
    inputs.push_back(c);
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("n", op, domain, opset, inputs, {y});
  b.node->attrs() = attrs;
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::mt19937 rng(3);
  b.inputs = {testing::random_bytes(dtype, dims, rng)};
  for (const auto& c : constant_inputs) b.inputs.push_back(Tensor::from_vector(c));
  return b;
}

void expect_view_matches(const Built& b, const std::string& op, const std::string& what) {
  const KernelFactory* f = kiln_factory(ops::kOnnxDomain, op);
  testing::expect_bytes_match_reference(f, b, what);
  auto k = f->prepare(*b.node);
  ASSERT_TRUE(k.ok());
  auto got = testing::run_kernel(**k, *b.node, b.inputs);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->raw_data(), b.inputs[0].raw_data()) << what << ": a view shares the input's storage";
}

TEST(ViewKernel, ReshapeTargetsWithInferredAndCopiedDims) {
  struct Case {
    Dims in;
    std::vector<int64_t> target;
  };
  for (const Case& c : std::vector<Case>{{{2, 3, 4}, {6, 4}},
                                         {{2, 3, 4}, {-1}},
                                         {{2, 3, 4}, {0, -1}},
                                         {{1, 128, 768}, {1, 128, 12, 64}},
                                         {{5, 7}, {7, 1, 5}},
                                         {{1}, {1, 1, 1}}})
    expect_view_matches(view_node(ops::kOnnxDomain, "Reshape", 14, DataType::kFloat32, c.in, {c.target}, {}),
                        "Reshape", dims_to_string(c.in) + " -> " + dims_to_string(c.target));
}

TEST(ViewKernel, FlattenEveryAxis) {
  const Dims in = {2, 3, 5, 7};
  for (int64_t axis = -4; axis <= 4; ++axis) {
    ir::AttributeMap attrs;
    attrs["axis"] = ir::Attribute::from_int(axis);
    expect_view_matches(view_node(ops::kOnnxDomain, "Flatten", 13, DataType::kUInt8, in, {}, attrs), "Flatten",
                        "axis " + std::to_string(axis));
  }
}

TEST(ViewKernel, SqueezeAndUnsqueezeWithConstantAxes) {
  expect_view_matches(view_node(ops::kOnnxDomain, "Squeeze", 13, DataType::kFloat32, {1, 3, 1, 5}, {{0, -2}}, {}),
                      "Squeeze", "axes 0,-2");
  expect_view_matches(view_node(ops::kOnnxDomain, "Squeeze", 13, DataType::kInt64, {1, 3, 1, 5}, {}, {}), "Squeeze",
                      "all dims of 1");
  expect_view_matches(view_node(ops::kOnnxDomain, "Unsqueeze", 13, DataType::kFloat16, {3, 5}, {{0, 3}}, {}),
                      "Unsqueeze", "axes 0,3");
  ir::AttributeMap axes;
  axes["axes"] = ir::Attribute::from_ints({-1});
  expect_view_matches(view_node(ops::kOnnxDomain, "Unsqueeze", 11, DataType::kFloat32, {3, 5}, {}, axes),
                      "Unsqueeze", "opset 11, axes -1");
}

TEST(ViewKernel, DeclinesWhatIsKnownOnlyAtRunTime) {
  const KernelFactory* f = kiln_factory(ops::kOnnxDomain, "Reshape");
  ASSERT_NE(f, nullptr);
  // A shape input fed at run time (its value unknown when the kernel is prepared).
  Built fed = view_node(ops::kOnnxDomain, "Reshape", 14, DataType::kFloat32, {2, 3}, {{3, 2}}, {}, false);
  EXPECT_FALSE(f->applicable(*fed.node).ok());
  // A dynamic input shape.
  Built b = view_node(ops::kOnnxDomain, "Reshape", 14, DataType::kFloat32, {2, 3}, {{-1}}, {});
  b.node->input(0)->type().shape = Shape({Dim(), Dim(3)});
  EXPECT_FALSE(f->applicable(*b.node).ok());
}

Built trans_data_node(DataType dtype, const Dims& dims, bool to_block, int64_t c0) {
  ir::AttributeMap attrs;
  attrs["src_format"] = ir::Attribute::from_string(to_block ? ops::kFormatPlain : ops::kFormatBlocked);
  attrs["dst_format"] = ir::Attribute::from_string(to_block ? ops::kFormatBlocked : ops::kFormatPlain);
  attrs["c0"] = ir::Attribute::from_int(c0);
  return view_node(ops::kKilnDomain, "TransData", 1, dtype, dims, {}, attrs);
}

TEST(TransDataKernel, BothDirectionsMatchTheReference) {
  const KernelFactory* f = kiln_factory(ops::kKilnDomain, "TransData");
  for (int64_t c0 : {8, 16})
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kUInt8, DataType::kFloat64}) {
      const std::string what = std::string(dtype_name(dtype)) + " c0 " + std::to_string(c0);
      testing::expect_bytes_match_reference(f, trans_data_node(dtype, {2, 2 * c0, 5, 3}, true, c0), "to blocked " + what);
      testing::expect_bytes_match_reference(f, trans_data_node(dtype, {1, 3, 7, 1, c0}, false, c0), "to plain " + what);
    }
}

}  // namespace
}  // namespace kiln::kernels
