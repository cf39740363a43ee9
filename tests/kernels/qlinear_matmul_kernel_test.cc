// The oneDNN int8 matmul kernels (src/kernels/cpu/qlinear_matmul.cc) against the reference
// kernels of QLinearMatMul (src/ops/qlinear.cc, validated on the ONNX conformance data) and
// kiln FusedQLinearMatMul (src/ops/fused_qlinear.cc: MatMulInteger's exact products, then
// the bias, scales and activation): uint8 / int8 A and Y, float32 Y, per-tensor and
// per-column B scales, bias, Relu and Clip, 2-D and 3-D A.
//
// Both sides sum the same integers exactly and differ only in rescaling (double against
// float32): a quantised output may land one step away at a rounding tie; a float32 output
// agrees to float32 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

using ir::Attribute;

Tensor rnd_x8(DataType t, const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor out = Tensor::make(t, dims);
  uint32_t s = seed * 2654435761u + 11u;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    const int v = static_cast<int>((s >> 8) & 0xff);
    if (t == DataType::kUInt8)
      out.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else
      out.data<int8_t>()[i] = static_cast<int8_t>(v - 128);
  }
  return out;
}

Tensor scalar(DataType t, double v) {
  Tensor out = Tensor::make(t, {});
  if (t == DataType::kFloat32) out.data<float>()[0] = static_cast<float>(v);
  if (t == DataType::kUInt8) out.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  if (t == DataType::kInt8) out.data<int8_t>()[0] = static_cast<int8_t>(v);
  return out;
}

struct QMatMulCase {
  std::string name;
  std::vector<int64_t> a;  // [..., M, K]
  int64_t n = 0;
  bool fused = true;
  DataType a_type = DataType::kUInt8, y_type = DataType::kUInt8;  // y float32: dequantised
  bool per_column = true, bias = true;
  std::string activation;
  std::vector<float> params;
};

struct QMatMulGraph {
  std::unique_ptr<ir::Graph> graph = std::make_unique<ir::Graph>();
  ir::Node* node = nullptr;
  std::vector<Tensor> inputs;
};

QMatMulGraph make_graph(const QMatMulCase& c) {
  QMatMulGraph g;
  const int64_t k = c.a.back();
  Tensor b_scale = Tensor::make(DataType::kFloat32, c.per_column ? std::vector<int64_t>{c.n} : std::vector<int64_t>{});
  for (int64_t i = 0; i < b_scale.num_elements(); ++i) b_scale.data<float>()[i] = 0.002f * (1.0f + 0.01f * (i % 37));
  const double a_scale = 0.03;
  // About the range of acc * a_scale * b_scale over 256 levels.
  const double y_scale = a_scale * 0.002 * 128 * 128 * std::sqrt(static_cast<double>(k)) / 60.0;
  Tensor bias = Tensor::make(DataType::kInt32, {c.n});
  for (int64_t i = 0; i < c.n; ++i) bias.data<int32_t>()[i] = static_cast<int32_t>((i * 7919) % 30001) - 15000;
  const bool quantised_y = c.y_type != DataType::kFloat32;
  g.inputs = {rnd_x8(c.a_type, c.a, 1),
              scalar(DataType::kFloat32, a_scale),
              scalar(c.a_type, c.a_type == DataType::kUInt8 ? 131 : -7),
              rnd_x8(DataType::kInt8, {k, c.n}, 2),
              b_scale,
              Tensor::make(DataType::kInt8, b_scale.dims()),
              quantised_y ? scalar(DataType::kFloat32, y_scale) : Tensor(),
              quantised_y ? scalar(c.y_type, c.y_type == DataType::kUInt8 ? 100 : 3) : Tensor(),
              c.fused && c.bias ? bias : Tensor()};
  if (!c.fused) g.inputs.resize(8);
  ir::Graph& graph = *g.graph;
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (!g.inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = graph.get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{g.inputs[i].dtype(), g.inputs[i].shape()};
    if (i == 0)
      graph.inputs().push_back(v);
    else
      v->set_initializer(g.inputs[i]);
    ins.push_back(v);
  }
  while (!ins.empty() && !ins.back()) ins.pop_back();
  ir::Value* y = graph.get_or_add_value("y");
  graph.outputs().push_back(y);
  g.node = graph.add_node(c.name, c.fused ? "FusedQLinearMatMul" : "QLinearMatMul",
                          c.fused ? ops::kKilnDomain : ops::kOnnxDomain, c.fused ? ops::kKilnOpset : 10, ins, {y});
  if (!c.activation.empty()) g.node->attrs()["activation"] = Attribute::from_string(c.activation);
  if (!c.params.empty()) g.node->attrs()["activation_params"] = Attribute::from_floats(c.params);
  Status st = ops::infer_node(*g.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return g;
}

Expected<Tensor> run(const QMatMulGraph& g, const Kernel* k) {
  std::vector<RuntimeValue> in;
  std::vector<const RuntimeValue*> ptrs;
  in.reserve(g.inputs.size());
  for (const Tensor& t : g.inputs) in.push_back(t.defined() ? RuntimeValue(t) : RuntimeValue());
  for (size_t i = 0; i < in.size(); ++i) ptrs.push_back(g.inputs[i].defined() ? &in[i] : nullptr);
  while (!ptrs.empty() && !ptrs.back()) ptrs.pop_back();
  std::vector<RuntimeValue> out(1);
  ops::KernelContext ctx(*g.node, ptrs, &out);
  if (k) {
    KILN_RETURN_IF_ERROR(k->run(ctx));
  } else {
    KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*g.node));
    KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  }
  return out[0].tensor();
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kUInt8: return t.data<uint8_t>()[i];
    case DataType::kInt8: return t.data<int8_t>()[i];
    default: return t.data<float>()[i];
  }
}

void check_case(const QMatMulCase& c) {
  SCOPED_TRACE(c.name);
  QMatMulGraph g = make_graph(c);
  const KernelFactory* f = nullptr;
  for (const KernelFactory* cand :
       KernelRegistry::instance().candidates(g.node->domain(), g.node->op_type(), DeviceKind::kCpu))
    if (cand->name == "onednn") f = cand;
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*g.node).ok());
  auto k = f->prepare(*g.node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ((*k)->implementation().rfind("onednn:", 0), 0u) << (*k)->implementation();
  auto want = run(g, nullptr);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = run(g, k->get());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->dims(), want->dims());
  ASSERT_EQ(got->dtype(), want->dtype());
  int64_t off = 0, worse = 0, distinct = 0;
  double max_abs = 0;
  for (int64_t i = 0; i < want->num_elements(); ++i) max_abs = std::max(max_abs, std::fabs(element(*want, i)));
  for (int64_t i = 0; i < want->num_elements(); ++i) {
    const double d = std::fabs(element(*got, i) - element(*want, i));
    distinct += element(*want, i) != element(*want, 0);
    if (c.y_type == DataType::kFloat32) {
      worse += d > 1e-6 * max_abs;  // float32 rounding of the scale product
    } else {
      off += d == 1;
      worse += d > 1;
    }
  }
  EXPECT_EQ(worse, 0);
  EXPECT_LE(off, std::max<int64_t>(2, want->num_elements() / 100));
  EXPECT_GT(distinct, 0);
}

TEST(OnednnQLinearMatMulTest, MatchesReference) {
  std::vector<QMatMulCase> cases = {
      {"QLinearMatMul 2-D", {7, 64}, 48, false},
      {"QLinearMatMul 3-D s8", {2, 5, 96}, 33, false, DataType::kInt8, DataType::kInt8},
      {"fused bias", {16, 128}, 64},
      {"fused per-tensor no bias", {3, 40}, 24, true, DataType::kUInt8, DataType::kUInt8, false, false},
      {"fused Relu", {9, 72}, 40, true, DataType::kUInt8, DataType::kUInt8, true, true, "Relu"},
      {"fused Clip s8", {9, 72}, 40, true, DataType::kInt8, DataType::kInt8, true, true, "Clip", {-1.0f, 2.0f}},
      {"fused float32 out", {4, 3, 256}, 80, true, DataType::kUInt8, DataType::kFloat32},
      {"fused float32 out Relu", {6, 64}, 17, true, DataType::kInt8, DataType::kFloat32, true, true, "Relu"},
  };
  for (const QMatMulCase& c : cases) check_case(c);
}

TEST(OnednnQLinearMatMulTest, RefusesAsymmetricWeights) {
  QMatMulCase c{"asymmetric", {4, 32}, 16, true};
  QMatMulGraph g = make_graph(c);
  Tensor zp = Tensor::make(DataType::kInt8, {16});
  zp.data<int8_t>()[5] = 2;
  g.node->input(5)->set_initializer(zp);
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(g.node->domain(), g.node->op_type(), DeviceKind::kCpu))
    EXPECT_FALSE(f->applicable(*g.node).ok()) << f->name;
}

}  // namespace
}  // namespace kiln::kernels
