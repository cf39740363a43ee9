// The SIMD DynamicQuantizeLinear kernel (src/kernels/cpu/dynamic_quantize_linear.cc) against
// the reference kernel (src/ops/quantize.cc, validated on the ONNX node tests): all three
// outputs bit for bit over sizes around the vector width and the parallel chunk, ranges all
// positive / all negative / mixed / all zero, NaN; plus a hand-computed case from the ONNX
// spec and what the kernel refuses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace kiln::kernels {
namespace {

using namespace kiln::kernels::testing;

Built dql_graph(const Tensor& x) {
  Built b;
  b.graph = std::make_shared<ir::Graph>();
  b.inputs = {x};
  ir::Value* v = b.graph->get_or_add_value("x");
  v->type() = ir::TensorType{x.dtype(), x.shape()};
  b.graph->inputs().push_back(v);
  std::vector<ir::Value*> outs;
  for (const char* name : {"y", "y_scale", "y_zero_point"}) {
    outs.push_back(b.graph->get_or_add_value(name));
    b.graph->outputs().push_back(outs.back());
  }
  b.node = b.graph->add_node("n", "DynamicQuantizeLinear", ops::kOnnxDomain, 11, {v}, outs);
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

// The three outputs of fn on b's node.
Expected<std::vector<Tensor>> run3(const Built& b, const std::function<Status(ops::KernelContext&)>& fn) {
  RuntimeValue in = b.inputs[0];
  std::vector<const RuntimeValue*> ptrs = {&in};
  std::vector<RuntimeValue> outputs(3);
  ops::KernelContext ctx(*b.node, ptrs, &outputs);
  KILN_RETURN_IF_ERROR(fn(ctx));
  return std::vector<Tensor>{outputs[0].tensor(), outputs[1].tensor(), outputs[2].tensor()};
}

void expect_matches_reference(const Tensor& x, const std::string& what) {
  Built b = dql_graph(x);
  const KernelFactory* f = simd_factory(*b.node);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*b.node).ok()) << what;
  auto k = f->prepare(*b.node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const ops::KernelFn& ref = ops::schema_for(*b.node).value()->kernel_fn();
  auto want = run3(b, ref);
  auto got = run3(b, [&](ops::KernelContext& ctx) { return (*k)->run(ctx); });
  ASSERT_TRUE(want.ok() && got.ok()) << what;
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ((*got)[i].dtype(), (*want)[i].dtype()) << what << " output " << i;
    ASSERT_EQ((*got)[i].dims(), (*want)[i].dims()) << what << " output " << i;
    ASSERT_EQ(std::memcmp((*got)[i].raw_data(), (*want)[i].raw_data(), (*got)[i].size_bytes()), 0)
        << what << " output " << i;
  }
}

TEST(DynamicQuantizeKernelTest, MatchesTheReferenceBitForBit) {
  struct Range {
    float lo, hi;
  };
  const Range ranges[] = {{-3.0f, 5.0f}, {0.5f, 7.0f}, {-9.0f, -0.25f}, {-1e-3f, 1e-3f}, {-100.0f, 1.0f}};
  for (const Range& r : ranges)
    for (int64_t n : {1, 7, 15, 16, 17, 33, 64, 1001, 16384, 16385, 70001}) {
      std::mt19937 rng(static_cast<uint32_t>(n));
      Tensor x = random_tensor({n}, rng, r.lo, r.hi);
      if (n > 3) x.data<float>()[n / 2] = std::nanf("");
      expect_matches_reference(x, "range " + std::to_string(r.lo) + ".." + std::to_string(r.hi) + " n " +
                                      std::to_string(n));
    }
  expect_matches_reference(Tensor::make(DataType::kFloat32, {4, 8}), "all zero");  // scale 1, zero point 0
}

TEST(DynamicQuantizeKernelTest, ComputesTheSpecExample) {
  // The ONNX spec's example: x = [0, 2, -3, -2.5, 1.34, 0.5] -> scale 5/255, zero point 153,
  // y = [153, 255, 0, 26, 221, 179].
  Tensor x = Tensor::from_vector<float>({0.0f, 2.0f, -3.0f, -2.5f, 1.34f, 0.5f}, {6});
  Built b = dql_graph(x);
  auto k = simd_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(k.ok());
  auto got = run3(b, [&](ops::KernelContext& ctx) { return (*k)->run(ctx); });
  ASSERT_TRUE(got.ok());
  const std::vector<uint8_t> want = {153, 255, 0, 26, 221, 179};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*got)[0].data<uint8_t>()[i], want[i]) << i;
  EXPECT_FLOAT_EQ(*(*got)[1].data<float>(), 5.0f / 255.0f);
  EXPECT_EQ(*(*got)[2].data<uint8_t>(), 153);
}

TEST(DynamicQuantizeKernelTest, RefusesNonFloatInputWithAReason) {
  Built b = dql_graph(Tensor::make(DataType::kFloat32, {4}));
  b.node->input(0)->type() = ir::TensorType{DataType::kFloat16, Shape({4})};
  Status st = simd_factory(*b.node)->applicable(*b.node);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("only float32"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace kiln::kernels
