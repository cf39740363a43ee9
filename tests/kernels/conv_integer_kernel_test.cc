// The oneDNN ConvInteger kernel (src/kernels/cpu/conv_integer.cc) against the reference kernel
// (src/ops/qlinear.cc): int32 outputs equal with weights packed as W - w_zp and with the
// weight correction (zero points that leave W - w_zp outside int8), x's zero point a constant
// or given at run time (two runs, two values, one prepared kernel), groups; plus what the
// kernel refuses. tests/quant/conv_integer_test.py holds the kernel to the ONNX backend tests
// and to NumPy.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace kiln::kernels {
namespace {

using namespace kiln::kernels::testing;

const KernelFactory* conv_integer_factory(const ir::Node& node) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "onednn") return f;
  return nullptr;
}

void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), DataType::kInt32) << what;
  ASSERT_EQ(got.dims(), want.dims()) << what;
  ASSERT_EQ(std::memcmp(got.raw_data(), want.raw_data(), got.size_bytes()), 0) << what;
}

// X a graph input; W and w_zero_point constants; x_zero_point a graph input when `x_zp_input`.
void expect_matches_reference(const Dims& x_dims, const Dims& w_dims, DataType xt, DataType wt, const Tensor& w_zp,
                              bool x_zp_input, ir::AttributeMap attrs) {
  std::mt19937 rng(static_cast<uint32_t>(x_dims[1] * 31 + w_dims[0]));
  Tensor x = random_bytes(xt, x_dims, rng);
  Tensor w = random_bytes(wt, w_dims, rng);
  std::vector<Tensor> inputs = {x, w, scalar_x8(xt, xt == DataType::kUInt8 ? 131 : -9), w_zp};
  std::vector<size_t> graph_inputs = {0};
  if (x_zp_input) graph_inputs.push_back(2);
  Built built = make_quant_graph("ConvInteger", ops::kOnnxDomain, 10, inputs, graph_inputs, attrs);
  const std::string what = "X " + dims_to_string(x_dims) + " W " + dims_to_string(w_dims);
  const KernelFactory* f = conv_integer_factory(*built.node);
  ASSERT_NE(f, nullptr);
  auto kernel = f->prepare(*built.node);
  ASSERT_TRUE(kernel.ok()) << what << ": " << kernel.status().to_string();
  EXPECT_EQ((*kernel)->implementation().rfind("onednn:", 0), 0u) << (*kernel)->implementation();
  for (int zp : {131, 7}) {
    // A graph input takes a new value per run; a constant is the initializer the kernel packed.
    if (!x_zp_input && zp != 131) break;
    if (x_zp_input) built.inputs[2] = scalar_x8(xt, xt == DataType::kUInt8 ? zp : zp - 140);
    auto got = run_kernel(**kernel, *built.node, built.inputs);
    auto want = run_reference(*built.node, built.inputs);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
    ASSERT_TRUE(want.ok()) << what << ": " << want.status().to_string();
    expect_equal(*got, *want, what + " x_zp " + std::to_string(zp));
  }
}

ir::AttributeMap conv_attrs(std::vector<int64_t> pads, std::vector<int64_t> strides, int64_t group) {
  ir::AttributeMap a;
  a["pads"] = ir::Attribute::from_ints(std::move(pads));
  a["strides"] = ir::Attribute::from_ints(std::move(strides));
  a["group"] = ir::Attribute::from_int(group);
  return a;
}

TEST(ConvIntegerKernelTest, EqualsTheReferenceKernel) {
  std::mt19937 rng(3);
  const auto u8 = DataType::kUInt8, s8 = DataType::kInt8;
  // uint8 W, zero point 128: packed as W - 128, no correction; x_zp at run time.
  expect_matches_reference({1, 8, 9, 9}, {16, 8, 3, 3}, u8, u8, scalar_x8(u8, 128), true, conv_attrs({1, 1, 1, 1}, {1, 1}, 1));
  // Per-channel zero points outside int8's reach: the correction, with groups and strides.
  expect_matches_reference({2, 12, 10, 7}, {18, 4, 3, 2}, u8, u8, random_bytes(u8, {18}, rng), true,
                           conv_attrs({0, 1, 2, 0}, {2, 1}, 3));
  // int8 X and W, a constant x_zp, depthwise with the correction.
  expect_matches_reference({1, 16, 8, 8}, {16, 1, 3, 3}, s8, s8, random_bytes(s8, {16}, rng), false,
                           conv_attrs({1, 1, 1, 1}, {1, 1}, 16));
}

TEST(ConvIntegerKernelTest, RefusesWithAReason) {
  std::mt19937 rng(5);
  Tensor x = random_bytes(DataType::kUInt8, {1, 4, 6, 6}, rng);
  Tensor w = random_bytes(DataType::kUInt8, {8, 4, 3, 3}, rng);
  // W given at run time.
  Built runtime_w = make_quant_graph("ConvInteger", ops::kOnnxDomain, 10, {x, w}, {0, 1});
  Status s = conv_integer_factory(*runtime_w.node)->applicable(*runtime_w.node);
  EXPECT_NE(s.to_string().find("W is not constant"), std::string::npos) << s.to_string();
  // x_zero_point per channel.
  Built per_channel = make_quant_graph("ConvInteger", ops::kOnnxDomain, 10,
                                       {x, w, random_bytes(DataType::kUInt8, {4}, rng)}, {0, 2});
  s = conv_integer_factory(*per_channel.node)->applicable(*per_channel.node);
  EXPECT_NE(s.to_string().find("a scalar only"), std::string::npos) << s.to_string();
  // w_zero_point given at run time.
  Built runtime_wzp = make_quant_graph("ConvInteger", ops::kOnnxDomain, 10,
                                       {x, w, scalar_x8(DataType::kUInt8, 1), scalar_x8(DataType::kUInt8, 2)}, {0, 3});
  s = conv_integer_factory(*runtime_wzp.node)->applicable(*runtime_wzp.node);
  EXPECT_NE(s.to_string().find("w_zero_point is not constant"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln::kernels
