// The oneDNN int8 convolution kernels (src/kernels/cpu/qlinear_conv.cc) against the reference
// kernels of QLinearConv (src/ops/qlinear.cc, validated on the ONNX conformance data) and
// FusedQLinearConv: uint8 and int8 X and Y, per-tensor and per-channel weight scales, zero
// points, bias, strides, pads, dilations, groups and depthwise, 1-D and 3-D, Relu and Clip in
// the epilogue; plus what the kernel refuses and inputs it was not prepared for.
//
// Both sides sum the same integers exactly; they differ only in how the int32 result is
// rescaled (the reference in double, oneDNN in float32), so an output may land one
// quantisation step away where the scaled value is within float32 rounding of a .5 tie.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
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

uint32_t next(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}

// Deterministic int8 / uint8 values over the type's whole range.
Tensor rnd_x8(DataType t, const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor out = Tensor::make(t, dims);
  uint32_t s = seed * 2654435761u + 7u;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const uint32_t v = next(s) & 0xff;
    if (t == DataType::kUInt8)
      out.data<uint8_t>()[i] = static_cast<uint8_t>(v);
    else
      out.data<int8_t>()[i] = static_cast<int8_t>(static_cast<int>(v) - 128);
  }
  return out;
}

Tensor scalar_f32(float v) {
  Tensor t = Tensor::make(DataType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

Tensor scalar_x8(DataType t, int v) {
  Tensor out = Tensor::make(t, {});
  if (t == DataType::kUInt8)
    out.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  else
    out.data<int8_t>()[0] = static_cast<int8_t>(v);
  return out;
}

struct QConvCase {
  std::string name;
  std::vector<int64_t> x, w;
  ir::AttributeMap attrs;
  DataType x_type = DataType::kUInt8, y_type = DataType::kUInt8;
  int x_zp = 128, y_zp = 120;
  bool per_channel = true;
  bool bias = true;
  std::string activation;  // FusedQLinearConv's ("" = plain QLinearConv)
  std::vector<float> params;
};

struct QConvGraph {
  std::unique_ptr<ir::Graph> graph = std::make_unique<ir::Graph>();
  ir::Node* node = nullptr;
  std::vector<Tensor> inputs;  // 0..8, undefined where absent
};

// A one-node graph: X a typed graph input, every other input an initializer.
QConvGraph make_graph(const QConvCase& c, uint32_t seed, bool expect_inferred = true) {
  QConvGraph g;
  ir::Graph& graph = *g.graph;
  const int64_t c_out = c.w[0];
  Tensor w_scale = Tensor::make(DataType::kFloat32, c.per_channel ? std::vector<int64_t>{c_out} : std::vector<int64_t>{});
  uint32_t s = seed;
  // The output scale a calibrated model would have: y_scale about the range of acc * sx * sw.
  int64_t k = c.w[1];
  for (size_t d = 2; d < c.w.size(); ++d) k *= c.w[d];
  for (int64_t i = 0; i < w_scale.num_elements(); ++i)
    w_scale.data<float>()[i] = 0.002f * (1.0f + static_cast<float>(next(s) % 1000) / 1000.0f);
  const float x_scale = 0.02f;
  const float y_scale = static_cast<float>(x_scale * 0.003 * 128 * 128 * std::sqrt(static_cast<double>(k)) / 40.0);
  Tensor bias = Tensor::make(DataType::kInt32, {c_out});
  for (int64_t i = 0; i < c_out; ++i) bias.data<int32_t>()[i] = static_cast<int32_t>(next(s) % 20001) - 10000;
  Tensor w_zp = Tensor::make(DataType::kInt8, w_scale.dims());  // zeros
  g.inputs = {rnd_x8(c.x_type, c.x, seed + 1),
              scalar_f32(x_scale),
              scalar_x8(c.x_type, c.x_zp),
              rnd_x8(DataType::kInt8, c.w, seed + 2),
              w_scale,
              w_zp,
              scalar_f32(y_scale),
              scalar_x8(c.y_type, c.y_zp),
              c.bias ? bias : Tensor()};
  const char* names[] = {"x", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "B"};
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    if (!g.inputs[i].defined()) continue;
    ir::Value* v = graph.get_or_add_value(names[i]);
    v->type() = ir::TensorType{g.inputs[i].dtype(), g.inputs[i].shape()};
    if (i == 0)
      graph.inputs().push_back(v);
    else
      v->set_initializer(g.inputs[i]);
    ins.push_back(v);
  }
  ir::Value* y = graph.get_or_add_value("y");
  graph.outputs().push_back(y);
  const bool fused = !c.activation.empty();
  g.node = graph.add_node(c.name, fused ? "FusedQLinearConv" : "QLinearConv", fused ? ops::kKilnDomain : ops::kOnnxDomain,
                          fused ? ops::kKilnOpset : 10, ins, {y});
  g.node->attrs() = c.attrs;
  if (fused) g.node->attrs()["activation"] = Attribute::from_string(c.activation);
  if (!c.params.empty()) g.node->attrs()["activation_params"] = Attribute::from_floats(c.params);
  if (expect_inferred) {
    Status st = ops::infer_node(*g.node);
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  return g;
}

Expected<Tensor> run(const QConvGraph& g, const std::vector<Tensor>& inputs, const Kernel* k) {
  std::vector<RuntimeValue> in;
  for (const Tensor& t : inputs) in.push_back(t.defined() ? RuntimeValue(t) : RuntimeValue());
  std::vector<const RuntimeValue*> ptrs;
  for (size_t i = 0; i < in.size(); ++i) ptrs.push_back(inputs[i].defined() ? &in[i] : nullptr);
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
  return t.dtype() == DataType::kUInt8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

const KernelFactory* onednn_factory(const ir::Node& node) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "onednn") return f;
  return nullptr;
}

void check_case(const QConvCase& c) {
  SCOPED_TRACE(c.name);
  QConvGraph g = make_graph(c, 3);
  const KernelFactory* f = onednn_factory(*g.node);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*g.node).ok());
  auto k = f->prepare(*g.node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  EXPECT_EQ((*k)->implementation().rfind("onednn:", 0), 0u) << (*k)->implementation();
  std::printf("%-24s %s\n", c.name.c_str(), (*k)->implementation().c_str());
  auto want = run(g, g.inputs, nullptr);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto got = run(g, g.inputs, k->get());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->dims(), want->dims());
  ASSERT_EQ(got->dtype(), want->dtype());
  int64_t off_by_one = 0, worse = 0, distinct = 0;
  for (int64_t i = 0; i < want->num_elements(); ++i) {
    const double d = std::fabs(element(*got, i) - element(*want, i));
    off_by_one += d == 1;
    worse += d > 1;
    distinct += element(*want, i) != element(*want, 0);
  }
  EXPECT_EQ(worse, 0) << "outputs more than one step from the reference";
  // Ties within float32 rounding are rare: at most 1% of the outputs (and 2 on tiny outputs).
  EXPECT_LE(off_by_one, std::max<int64_t>(2, want->num_elements() / 100));
  // The case exercises the arithmetic: not every output saturated to one value.
  EXPECT_GT(distinct, 0);
}

ir::AttributeMap attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> ints) {
  ir::AttributeMap m;
  for (const auto& [name, v] : ints)
    m[name] = std::string(name) == "group" ? Attribute::from_int(v[0]) : Attribute::from_ints(v);
  return m;
}

TEST(OnednnQLinearConvTest, Geometries) {
  std::vector<QConvCase> cases = {
      {"3x3 pad1 c3->5", {1, 3, 7, 9}, {5, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})},
      {"1x1 c17->33 batch3", {3, 17, 5, 5}, {33, 17, 1, 1}, {}},
      {"7x7 stride2 pad3", {1, 3, 23, 19}, {16, 3, 7, 7}, attrs({{"strides", {2, 2}}, {"pads", {3, 3, 3, 3}}})},
      {"asym pads stride2", {1, 5, 11, 10}, {17, 5, 3, 3}, attrs({{"strides", {2, 2}}, {"pads", {0, 1, 2, 0}}})},
      {"dilation2", {1, 17, 13, 11}, {5, 17, 3, 3}, attrs({{"dilations", {2, 2}}, {"pads", {2, 2, 2, 2}}})},
      {"group2", {1, 34, 9, 9}, {18, 17, 3, 3}, attrs({{"group", {2}}, {"pads", {1, 1, 1, 1}}})},
      {"depthwise c32 stride2", {1, 32, 15, 15}, {32, 1, 3, 3},
       attrs({{"group", {32}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}})},
      {"depthwise 5x5 c240 (PP-LCNet)", {1, 240, 12, 80}, {240, 1, 5, 5},
       attrs({{"group", {240}}, {"pads", {2, 2, 2, 2}}})},
      {"1-D", {2, 8, 30}, {12, 8, 5}, attrs({{"pads", {2, 2}}})},
      {"3-D", {1, 4, 6, 7, 5}, {8, 4, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1, 1, 1}}})},
      {"big channels", {1, 64, 14, 14}, {128, 64, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})},
  };
  for (const QConvCase& c : cases) check_case(c);
}

TEST(OnednnQLinearConvTest, TypesZeroPointsAndBias) {
  QConvCase base{"", {1, 16, 9, 9}, {24, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})};
  QConvCase c = base;
  c.name = "s8 x, s8 y";
  c.x_type = c.y_type = DataType::kInt8;
  c.x_zp = -3;
  c.y_zp = 5;
  check_case(c);
  c = base;
  c.name = "u8 x, s8 y, zero zero points";
  c.y_type = DataType::kInt8;
  c.x_zp = c.y_zp = 0;
  check_case(c);
  c = base;
  c.name = "per-tensor w_scale, no bias";
  c.per_channel = false;
  c.bias = false;
  check_case(c);
}

TEST(OnednnQLinearConvTest, ActivationsInTheEpilogue) {
  QConvCase base{"", {1, 16, 9, 9}, {24, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})};
  QConvCase c = base;
  c.name = "Relu";
  c.activation = "Relu";
  check_case(c);
  c.name = "Relu s8";
  c.y_type = DataType::kInt8;
  c.y_zp = -20;
  check_case(c);
  c = base;
  c.name = "Clip (Relu6)";
  c.activation = "Clip";
  c.params = {0.0f, 6.0f};
  check_case(c);
  c.name = "Clip narrow";
  c.params = {-1.0f, 0.5f};
  check_case(c);
}

TEST(OnednnQLinearConvTest, RefusesWhatItCannotRun) {
  QConvCase c{"asymmetric weights", {1, 8, 5, 5}, {8, 8, 3, 3}, {}};
  QConvGraph g = make_graph(c, 1);
  const KernelFactory* f = onednn_factory(*g.node);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*g.node).ok());
  // A non-zero weight zero point.
  Tensor w_zp = Tensor::make(DataType::kInt8, {8});
  w_zp.data<int8_t>()[3] = 1;
  g.node->input(5)->set_initializer(w_zp);
  EXPECT_FALSE(f->applicable(*g.node).ok());
  // A zero output scale is the reference kernel's to define.
  g.node->input(5)->set_initializer(Tensor::make(DataType::kInt8, {8}));
  ASSERT_TRUE(f->applicable(*g.node).ok());
  Tensor zero = Tensor::make(DataType::kFloat32, {});
  g.node->input(1)->set_initializer(zero);
  EXPECT_FALSE(f->applicable(*g.node).ok());
}

TEST(OnednnQLinearConvTest, OnlyMonotonicClampsAreActivations) {
  // A Sigmoid is not a clamp of quantised values: the op refuses it, naming the node.
  QConvCase s{"sigmoid", {1, 8, 5, 5}, {8, 8, 3, 3}, {}};
  s.activation = "Sigmoid";
  QConvGraph g = make_graph(s, 1, /*expect_inferred=*/false);
  Status st = ops::infer_node(*g.node);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'sigmoid'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Relu or Clip"), std::string::npos) << st.message();
}

TEST(OnednnQLinearConvTest, OtherInputsRunTheReference) {
  QConvCase c{"fed scale", {1, 8, 6, 6}, {8, 8, 3, 3}, {}};
  QConvGraph g = make_graph(c, 2);
  const KernelFactory* f = onednn_factory(*g.node);
  auto k = f->prepare(*g.node);
  ASSERT_TRUE(k.ok());
  // A caller feeds another x_scale: the kernel's prepared scales do not apply.
  std::vector<Tensor> in = g.inputs;
  in[1] = scalar_f32(0.05f);
  auto want = run(g, in, nullptr);
  auto got = run(g, in, k->get());
  ASSERT_TRUE(want.ok() && got.ok());
  for (int64_t i = 0; i < want->num_elements(); ++i) ASSERT_EQ(element(*got, i), element(*want, i)) << i;
}

}  // namespace
}  // namespace kiln::kernels
