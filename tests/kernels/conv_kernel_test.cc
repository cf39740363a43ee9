// The oneDNN convolution kernels (src/kernels/cpu/conv.cc) against the reference kernels of
// Conv and FusedConv (src/ops, validated on the ONNX conformance data), on shapes that hit
// their edge cases: odd spatial sizes, channel counts not divisible by 16, groups and
// depthwise, strides, asymmetric and auto pads, dilations, 1x1 and 7x7 kernels, batches of 1
// and 3, 1-D and 3-D, every activation, with and without bias and residual; plus the
// fallbacks (what the kernel does not take, inputs it was not prepared for) and concurrent runs.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "layout_test_util.h"
#include "ops/elementwise_common.h"
#include "ops/layout.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

using testing::block_by_definition;

using ir::Attribute;

// Deterministic values in [-1, 1) (a 32-bit LCG), different per seed.
Tensor rnd(const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = static_cast<float>(static_cast<double>(s >> 8) / (1u << 24) * 2.0 - 1.0);
  }
  return t;
}

const KernelFactory* onednn_factory(const std::string& domain, const std::string& op) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(domain, op, DeviceKind::kCpu))
    if (f->name == "onednn") return f;
  return nullptr;
}

struct ConvCase {
  ConvCase() = default;
  ConvCase(std::string n, std::vector<int64_t> x_dims, std::vector<int64_t> w_dims, ir::AttributeMap a = {},
           bool b = false, bool z = false, std::string act = "", std::vector<float> p = {})
      : name(std::move(n)), x(std::move(x_dims)), w(std::move(w_dims)), attrs(std::move(a)), bias(b), residual(z),
        activation(std::move(act)), params(std::move(p)) {}

  std::string name;
  std::vector<int64_t> x, w;
  ir::AttributeMap attrs;
  bool bias = false;
  bool residual = false;      // FusedConv's Z
  std::string activation;     // FusedConv's activation ("" none)
  std::vector<float> params;  // activation_params
  std::string precision;      // FusedConv's precision ("" none: float32)
  bool fused() const { return residual || !activation.empty() || !precision.empty(); }
};

// A one-node graph for a case: X (and Z) typed graph inputs, W and B initializers, Y inferred.
struct ConvGraph {
  std::unique_ptr<ir::Graph> graph = std::make_unique<ir::Graph>();
  ir::Node* node = nullptr;
  Tensor x, w, b, z;
};

Expected<ConvGraph> make_graph(const ConvCase& c, uint32_t seed) {
  ConvGraph g;
  ir::Graph& graph = *g.graph;
  g.x = rnd(c.x, seed);
  g.w = rnd(c.w, seed + 1);
  ir::Value* x = graph.get_or_add_value("X");
  x->type() = ir::TensorType{DataType::kFloat32, g.x.shape()};
  graph.inputs().push_back(x);
  ir::Value* w = graph.get_or_add_value("W");
  w->type() = ir::TensorType{DataType::kFloat32, g.w.shape()};
  w->set_initializer(g.w);
  std::vector<ir::Value*> ins{x, w};
  if (c.bias || c.residual) {
    ir::Value* b = nullptr;
    if (c.bias) {
      g.b = rnd({c.w[0]}, seed + 2);
      b = graph.get_or_add_value("B");
      b->type() = ir::TensorType{DataType::kFloat32, g.b.shape()};
      b->set_initializer(g.b);
    }
    ins.push_back(b);
  }
  ir::Value* z = nullptr;
  if (c.residual) {
    z = graph.get_or_add_value("Z");
    graph.inputs().push_back(z);
    ins.push_back(z);
  }
  ir::Value* y = graph.get_or_add_value("Y");
  graph.outputs().push_back(y);
  const bool fused = c.fused();
  g.node = graph.add_node(c.name, fused ? "FusedConv" : "Conv", fused ? ops::kKilnDomain : ops::kOnnxDomain,
                          fused ? ops::kKilnOpset : 11, ins, {y});
  g.node->attrs() = c.attrs;
  if (!c.activation.empty()) g.node->attrs()["activation"] = Attribute::from_string(c.activation);
  if (!c.params.empty()) g.node->attrs()["activation_params"] = Attribute::from_floats(c.params);
  if (!c.precision.empty()) g.node->attrs()["precision"] = Attribute::from_string(c.precision);
  if (z) {
    // Z has Y's shape: infer Y's shape from a plain Conv first.
    ir::Graph probe_graph;
    ir::Value* px = probe_graph.get_or_add_value("X");
    px->type() = x->type();
    ir::Value* pw = probe_graph.get_or_add_value("W");
    pw->type() = w->type();
    ir::Value* py = probe_graph.get_or_add_value("Y");
    ir::Node* probe = probe_graph.add_node("probe", "Conv", ops::kOnnxDomain, 11, {px, pw}, {py});
    probe->attrs() = c.attrs;
    KILN_RETURN_IF_ERROR(ops::infer_node(*probe));
    g.z = rnd(py->shape().static_dims(), seed + 3);
    z->type() = ir::TensorType{DataType::kFloat32, g.z.shape()};
  }
  KILN_RETURN_IF_ERROR(ops::infer_node(*g.node));
  return g;
}

std::vector<RuntimeValue> input_values(const ConvGraph& g) {
  std::vector<RuntimeValue> v{RuntimeValue(g.x), RuntimeValue(g.w)};
  if (g.node->inputs().size() > 2) v.push_back(g.b.defined() ? RuntimeValue(g.b) : RuntimeValue());
  if (g.node->inputs().size() > 3) v.push_back(RuntimeValue(g.z));
  return v;
}

std::vector<const RuntimeValue*> input_ptrs(const ConvGraph& g, const std::vector<RuntimeValue>& v) {
  std::vector<const RuntimeValue*> p;
  for (size_t i = 0; i < v.size(); ++i) p.push_back(g.node->input(i) ? &v[i] : nullptr);
  return p;
}

Expected<Tensor> run_reference(const ConvGraph& g) {
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*g.node));
  std::vector<RuntimeValue> in = input_values(g);
  std::vector<RuntimeValue> out(1);
  ops::KernelContext ctx(*g.node, input_ptrs(g, in), &out);
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  return out[0].tensor();
}

Expected<Tensor> run_kernel(const Kernel& k, const ConvGraph& g, const std::vector<RuntimeValue>& in) {
  std::vector<RuntimeValue> out(1);
  ops::KernelContext ctx(*g.node, input_ptrs(g, in), &out);
  KILN_RETURN_IF_ERROR(k.run(ctx));
  return out[0].tensor();
}

// Terms summed into one output: C/group * kernel products, the bias and Z.
int64_t terms(const ConvCase& c) {
  int64_t k = c.w[1];
  for (size_t d = 2; d < c.w.size(); ++d) k *= c.w[d];
  return k + 2;
}

// |kernel - reference| <= 1e-5 max|ref| + K eps. The relative part covers the activations'
// approximations in oneDNN (a few ulp of the result). The absolute floor covers the sums:
// both sides add K terms (inputs and weights in [-1, 1), so each term is at most 1) in
// different orders (oneDNN's blocked accumulation vs im2col + GEMM); the rounding error of a
// K-term float32 sum grows like K * eps * max|term| for sequential accumulation, and an
// output near zero (cancellation) gets no help from the relative part.
// `nan_to_bounds`: where the reference is NaN the kernel may give a value in [lo, hi] (Clip's
// documented deviation, onednn_util.h).
void expect_close(const Tensor& got, const Tensor& want, const ConvCase& c, const float* nan_to_bounds = nullptr) {
  ASSERT_EQ(got.dims(), want.dims()) << c.name;
  double max_ref = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) max_ref = std::max(max_ref, std::fabs((double)want.data<float>()[i]));
  const double tol = 1e-5 * max_ref + static_cast<double>(terms(c)) * FLT_EPSILON;
  int64_t bad = 0;
  double worst = 0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const float g = got.data<float>()[i], w = want.data<float>()[i];
    if (std::isnan(g) && std::isnan(w)) continue;
    if (nan_to_bounds && std::isnan(w) && g >= nan_to_bounds[0] && g <= nan_to_bounds[1]) continue;
    const double d = std::fabs((double)got.data<float>()[i] - (double)want.data<float>()[i]);
    if (!(d <= tol)) ++bad;
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  EXPECT_EQ(bad, 0) << c.name << ": " << bad << " of " << want.num_elements() << " outside " << tol
                    << "; worst at " << worst_i << ": got " << got.data<float>()[worst_i] << ", want "
                    << want.data<float>()[worst_i];
}

// Prepares the oneDNN kernel for the case, runs it and the reference, compares. `nan_at`:
// an input position set to NaN (-1: none).
void check_case(const ConvCase& c, uint32_t seed = 1, int64_t nan_at = -1, const float* nan_to_bounds = nullptr) {
  SCOPED_TRACE(c.name);
  auto g = make_graph(c, seed);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  if (nan_at >= 0) g->x.data<float>()[nan_at] = NAN;
  const KernelFactory* f = onednn_factory(g->node->domain(), g->node->op_type());
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*g->node).ok());
  auto k = f->prepare(*g->node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  const std::string impl = (*k)->implementation();
  EXPECT_EQ(impl.rfind("onednn:", 0), 0u) << impl;
  auto want = run_reference(*g);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  std::vector<RuntimeValue> in = input_values(*g);
  auto got = run_kernel(**k, *g, in);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  expect_close(*got, *want, c, nan_to_bounds);
  // A second run on the same kernel gives the same result (nothing carried over).
  auto again = run_kernel(**k, *g, in);
  ASSERT_TRUE(again.ok());
  expect_close(*again, *want, c, nan_to_bounds);
}

ir::AttributeMap attrs(std::initializer_list<std::pair<const char*, std::vector<int64_t>>> ints,
                       const char* auto_pad = nullptr) {
  ir::AttributeMap m;
  for (const auto& [name, v] : ints) {
    if (std::string(name) == "group")
      m[name] = Attribute::from_int(v[0]);
    else
      m[name] = Attribute::from_ints(v);
  }
  if (auto_pad) m["auto_pad"] = Attribute::from_string(auto_pad);
  return m;
}

TEST(OnednnConvTest, PlainConvShapes) {
  const std::vector<ConvCase> cases = {
      {"3x3 pad1 c3->5 odd", {1, 3, 7, 9}, {5, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true},
      {"1x1 c17->33 batch3", {3, 17, 5, 5}, {33, 17, 1, 1}, {}, true},
      {"1x1 stride2 c33->17", {1, 33, 9, 7}, {17, 33, 1, 1}, attrs({{"strides", {2, 2}}}), false},
      {"7x7 stride2 pad3 c3->16", {1, 3, 23, 19}, {16, 3, 7, 7}, attrs({{"strides", {2, 2}}, {"pads", {3, 3, 3, 3}}}),
       true},
      {"3x3 stride2 asym pads", {1, 5, 11, 10}, {17, 5, 3, 3}, attrs({{"strides", {2, 2}}, {"pads", {0, 1, 2, 0}}}),
       true},
      {"3x3 dilation2 pad2", {1, 17, 13, 11}, {5, 17, 3, 3}, attrs({{"dilations", {2, 2}}, {"pads", {2, 2, 2, 2}}}),
       true},
      {"dilation2 stride2 asym", {3, 5, 15, 12}, {33, 5, 3, 2},
       attrs({{"dilations", {2, 1}}, {"strides", {2, 2}}, {"pads", {1, 0, 2, 1}}}), false},
      {"group2 c34->18", {1, 34, 9, 9}, {18, 17, 3, 3}, attrs({{"group", {2}}, {"pads", {1, 1, 1, 1}}}), true},
      {"depthwise c33 3x3", {3, 33, 13, 11}, {33, 1, 3, 3}, attrs({{"group", {33}}, {"pads", {1, 1, 1, 1}}}), true},
      {"depthwise c32 stride2", {1, 32, 15, 15}, {32, 1, 3, 3},
       attrs({{"group", {32}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}), true},
      {"depthwise multiplier2 c5->10", {1, 5, 8, 9}, {10, 1, 5, 5}, attrs({{"group", {5}}, {"pads", {2, 2, 2, 2}}}),
       false},
      {"auto_pad SAME_UPPER stride2", {1, 5, 10, 9}, {17, 5, 4, 3}, attrs({{"strides", {2, 2}}}, "SAME_UPPER"), true},
      {"auto_pad SAME_LOWER", {1, 5, 10, 9}, {16, 5, 4, 4}, attrs({}, "SAME_LOWER"), true},
      {"auto_pad VALID", {1, 3, 10, 9}, {5, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}, "VALID"), false},
      {"no pad 5x5 big channels", {1, 64, 12, 12}, {96, 64, 5, 5}, {}, true},
      {"1-D", {3, 5, 17}, {17, 5, 3}, attrs({{"pads", {1, 2}}, {"strides", {2}}}), true},
      {"1-D depthwise dilated", {1, 16, 21}, {16, 1, 3}, attrs({{"group", {16}}, {"dilations", {2}}}), true},
      {"3-D", {1, 3, 5, 6, 7}, {17, 3, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1, 1, 1}}}), true},
      {"3-D stride2 group", {2, 4, 7, 6, 5}, {6, 2, 3, 1, 3}, attrs({{"group", {2}}, {"strides", {2, 1, 2}}}), false},
  };
  for (const ConvCase& c : cases) check_case(c);
}

TEST(OnednnConvTest, FusedConvEveryActivationWithAndWithoutBiasAndResidual) {
  struct Act {
    const char* name;
    std::vector<float> params;
  };
  const std::vector<Act> acts = {{"", {}},
                                 {"Relu", {}},
                                 {"LeakyRelu", {}},
                                 {"LeakyRelu", {0.3f}},
                                 {"Clip", {}},
                                 {"Clip", {-0.5f, 1.5f}},
                                 {"Clip", {0.0f, 6.0f}},
                                 {"HardSigmoid", {}},
                                 {"HardSigmoid", {0.3f, 0.4f}},
                                 {"HardSwish", {}},
                                 {"Sigmoid", {}},
                                 {"Tanh", {}},
                                 {"Silu", {}},
                                 {"Gelu", {}},
                                 {"GeluTanh", {}}};
  struct Shape {
    const char* name;
    std::vector<int64_t> x, w;
    ir::AttributeMap attrs;
  };
  const std::vector<Shape> shapes = {
      {"3x3 c17->33 batch3", {3, 17, 9, 7}, {33, 17, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})},
      {"depthwise c33 stride2", {1, 33, 11, 11}, {33, 1, 3, 3},
       attrs({{"group", {33}}, {"strides", {2, 2}}, {"pads", {1, 0, 1, 1}}})},
      {"1x1 c64->48", {1, 64, 7, 7}, {48, 64, 1, 1}, {}},
  };
  for (const Shape& s : shapes) {
    for (const Act& a : acts) {
      for (int variant = 0; variant < 4; ++variant) {
        ConvCase c;
        c.bias = variant & 1;
        c.residual = variant & 2;
        c.activation = a.name;
        c.params = a.params;
        if (!c.fused()) continue;  // a plain Conv: covered above
        c.name = std::string(s.name) + " act=" + a.name + (c.bias ? " +B" : "") + (c.residual ? " +Z" : "");
        c.x = s.x;
        c.w = s.w;
        c.attrs = s.attrs;
        check_case(c, static_cast<uint32_t>(variant) + 7);
      }
    }
  }
}

// The activation's post-affine (activation_post_scale / _shift: PP-LCNetV3's learnable
// a * act(y) + b) on the shapes of oneDNN's three conv kernels, after the activations it
// follows in models and one it does not, with and without a residual.
TEST(OnednnConvTest, FusedConvPostAffine) {
  struct Shape {
    const char* name;
    std::vector<int64_t> x, w;
    ir::AttributeMap attrs;
  };
  const std::vector<Shape> shapes = {
      {"3x3 c17->33", {1, 17, 9, 7}, {33, 17, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}})},
      {"depthwise 5x5 c24", {1, 24, 12, 20}, {24, 1, 5, 5}, attrs({{"group", {24}}, {"pads", {2, 2, 2, 2}}})},
      {"1x1 c64->48", {1, 64, 7, 7}, {48, 64, 1, 1}, {}},
  };
  const float affines[][2] = {{0.75f, 0.0f}, {1.0f, -0.25f}, {1.3f, 0.2f}};
  for (const Shape& s : shapes)
    for (const char* act : {"HardSwish", "Relu", "Sigmoid"})
      for (const auto& a : affines)
        for (bool z : {false, true}) {
          ConvCase c(std::string(s.name) + " " + act + " *" + std::to_string(a[0]) + " +" +
                         std::to_string(a[1]) + (z ? " +Z" : ""),
                     s.x, s.w, s.attrs, true, z, act);
          if (a[0] != 1.0f) c.attrs["activation_post_scale"] = Attribute::from_float(a[0]);
          if (a[1] != 0.0f) c.attrs["activation_post_shift"] = Attribute::from_float(a[1]);
          check_case(c, 11);
        }
  // HardSigmoid is a linear post-op already; with a shift the kernel declines (the reference
  // kernel runs the node).
  ConvCase c("1x1 HardSigmoid +shift", shapes[2].x, shapes[2].w, {}, true, false, "HardSigmoid");
  c.attrs["activation_post_shift"] = Attribute::from_float(0.5f);
  auto g = make_graph(c, 3);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const KernelFactory* f = onednn_factory(g->node->domain(), g->node->op_type());
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(f->applicable(*g->node).ok());
}

// Activation values: the random conv outputs (|y| up to ~5) cover both sides of every
// activation's bends; residual added, the range grows. Large inputs also check saturation.
TEST(OnednnConvTest, ActivationsOnWideRange) {
  for (const char* act : {"Sigmoid", "Tanh", "Silu", "Gelu", "GeluTanh", "HardSwish", "HardSigmoid"}) {
    ConvCase c{std::string("wide ") + act, {1, 40, 6, 6}, {8, 40, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, true,
               act};
    check_case(c, 3);
  }
}

// A NaN in X spreads to the outputs whose window reads it; the activations then treat it as
// the reference does (docs/fused-ops.md: Relu maps NaN to 0), except Clip, which keeps a NaN
// in ONNX but gives one of its bounds in oneDNN (the deviation onednn_util.h documents).
TEST(OnednnConvTest, NanInput) {
  for (const char* act : {"", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip"}) {
    for (bool z : {false, true}) {
      if (!*act && !z) continue;  // not a FusedConv
      // 6x6 outputs: below the Winograd threshold (WinogradSpreadsNonFiniteWithinItsTile).
      ConvCase c{std::string("NaN ") + act + (z ? " +Z" : ""), {1, 17, 6, 6}, {8, 17, 3, 3},
                 attrs({{"pads", {1, 1, 1, 1}}}), true, z, act};
      const bool clip = std::string(act) == "Clip";
      if (clip) c.params = {-0.5f, 6.0f};
      const float bounds[2] = {-0.5f, 6.0f};
      check_case(c, 4, 3 * 36 + 20, clip ? bounds : nullptr);
    }
  }
}

TEST(OnednnConvTest, NotApplicable) {
  // HardSwish with parameters oneDNN 2.6 cannot express, and Clip with lo > hi.
  for (const auto& [act, params] : std::vector<std::pair<const char*, std::vector<float>>>{
           {"HardSwish", {0.2f, 0.5f}}, {"Clip", {1.0f, -1.0f}}}) {
    ConvCase c{"unmapped", {1, 3, 5, 5}, {4, 3, 3, 3}, {}, false, false, act, params};
    auto g = make_graph(c, 1);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_FALSE(onednn_factory(ops::kKilnDomain, "FusedConv")->applicable(*g->node).ok()) << act;
  }
  // Weights that are not constant.
  {
    ConvCase c{"dynamic W", {1, 3, 5, 5}, {4, 3, 3, 3}, {}};
    auto g = make_graph(c, 1);
    ASSERT_TRUE(g.ok());
    g->node->input(1)->clear_initializer();
    EXPECT_FALSE(onednn_factory("", "Conv")->applicable(*g->node).ok());
  }
  // A symbolic batch dim.
  {
    ConvCase c{"symbolic", {1, 3, 5, 5}, {4, 3, 3, 3}, {}};
    auto g = make_graph(c, 1);
    ASSERT_TRUE(g.ok());
    g->node->input(0)->type().shape[0] = Dim::symbolic("N");
    EXPECT_FALSE(onednn_factory("", "Conv")->applicable(*g->node).ok());
  }
  // float64.
  {
    ConvCase c{"f64", {1, 3, 5, 5}, {4, 3, 3, 3}, {}};
    auto g = make_graph(c, 1);
    ASSERT_TRUE(g.ok());
    g->node->input(0)->type().dtype = DataType::kFloat64;
    EXPECT_FALSE(onednn_factory("", "Conv")->applicable(*g->node).ok());
  }
}

// Inputs other than those prepared for (another shape, a W fed in place of the initializer's)
// run the reference kernel, with its result and its errors.
TEST(OnednnConvTest, UnpreparedInputsRunTheReference) {
  ConvCase c{"fallback", {1, 3, 7, 7}, {5, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true};
  auto g = make_graph(c, 5);
  ASSERT_TRUE(g.ok());
  auto k = onednn_factory("", "Conv")->prepare(*g->node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  // Another W (same shape, other values): the reference result for that W.
  ConvGraph other = std::move(*g);
  other.w = rnd(c.w, 99);
  auto want = run_reference(other);
  ASSERT_TRUE(want.ok());
  auto got = run_kernel(**k, other, input_values(other));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  expect_close(*got, *want, c);
  // Another X shape: the reference runs (and its shape checks apply).
  other.x = rnd({1, 3, 9, 8}, 3);
  want = run_reference(other);
  ASSERT_TRUE(want.ok());
  got = run_kernel(**k, other, input_values(other));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->dims(), (std::vector<int64_t>{1, 5, 9, 8}));
  expect_close(*got, *want, c);
  other.x = rnd({1, 4, 9, 8}, 3);  // wrong channel count: the reference's error, not a crash
  EXPECT_FALSE(run_kernel(**k, other, input_values(other)).ok());
}

// One prepared kernel run from several threads at once gives every thread the right result.
TEST(OnednnConvTest, ConcurrentRuns) {
  ConvCase c{"concurrent", {2, 17, 14, 14}, {32, 17, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, true, "Relu"};
  auto g = make_graph(c, 11);
  ASSERT_TRUE(g.ok());
  auto k = onednn_factory(ops::kKilnDomain, "FusedConv")->prepare(*g->node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  auto want = run_reference(*g);
  ASSERT_TRUE(want.ok());
  std::vector<RuntimeValue> in = input_values(*g);
  constexpr int kThreads = 4;
  std::vector<Tensor> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        auto y = run_kernel(**k, *g, in);
        if (!y.ok()) return;
        results[t] = *y;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_TRUE(results[t].defined()) << "thread " << t;
    expect_close(results[t], *want, c);
  }
}

// The threads of this process (Linux: /proc/self/task).
int process_threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') ++n;
    closedir(d);
  }
  return n;
}

// Preparing a kernel packs its weights on one thread: a loading thread that ran a parallel
// region would keep an OpenMP team (an idle worker thread), and libgomp, counting more threads
// than cores, then makes every stream's workers sleep between kernels (a futex wake-up per
// kernel; PP-OCRv4 rec at 2 threads ran ~1.7x slower). So preparing on a fresh thread, with
// several threads configured, starts no thread.
TEST(OnednnConvTest, PreparingStartsNoThread) {
  const int saved = set_thread_num_threads_override(0);
  const int saved_threads = num_threads();
  set_num_threads(2);
  int before = -1, after = -1;
  bool prepared = false;
  std::thread loader([&] {
    ConvCase c{"pack", {1, 64, 14, 14}, {64, 64, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, false, "Relu"};
    auto g = make_graph(c, 5);
    if (!g.ok()) return;
    before = process_threads();
    auto k = onednn_factory(ops::kKilnDomain, "FusedConv")->prepare(*g->node);
    after = process_threads();
    prepared = k.ok();
  });
  loader.join();
  set_num_threads(saved_threads);
  set_thread_num_threads_override(saved);
  ASSERT_TRUE(prepared);
  ASSERT_GT(before, 0);
  EXPECT_EQ(after, before);
}

// FusedConv with blocked X and/or Y (and Z) on the oneDNN kernel and on the reference kernel
// equals the plain FusedConv's reference result, blocked by definition.
// Gives g's node the formats (NC1HWC0 with c0 channels per block where asked) and blocks X
// (and Z, with Y) by definition to match.
void set_formats(ConvGraph& g, bool x_blocked, bool y_blocked, int64_t c0) {
  ir::Node* n = g.node;
  n->attrs()["x_format"] = Attribute::from_string(x_blocked ? ops::kFormatBlocked : ops::kFormatPlain);
  n->attrs()["y_format"] = Attribute::from_string(y_blocked ? ops::kFormatBlocked : ops::kFormatPlain);
  n->attrs()["c0"] = Attribute::from_int(c0);
  if (x_blocked) {
    g.x = block_by_definition(g.x, c0);
    n->input(0)->type().shape = g.x.shape();
  }
  if (g.z.defined() && y_blocked) {
    g.z = block_by_definition(g.z, c0);
    n->input(3)->type().shape = g.z.shape();
  }
  ASSERT_TRUE(ops::infer_node(*n).ok());
}

TEST(OnednnConvTest, BlockedLayouts) {
  struct Case {
    ConvCase conv;
    bool x_blocked, y_blocked;
    int64_t c0;
  };
  const std::vector<Case> cases{
      {{"x8y8", {1, 16, 9, 7}, {24, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, true, "Relu"}, true, true, 8},
      {{"x16y16", {2, 32, 6, 6}, {16, 32, 1, 1}, {}, true, true, "Clip", {0.f, 6.f}}, true, true, 16},
      // A residual on a map of >= 14x14 is read by a binary post-op (conv.cc), not copied.
      {{"x16y16 residual 16x15", {1, 32, 16, 15}, {48, 32, 1, 1}, {}, true, true, "Relu"}, true, true, 16},
      {{"x8y8 residual 3x3 stride2", {1, 16, 31, 29}, {16, 16, 3, 3}, attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}),
        false, true, "Relu"},
       true, true, 8},
      {{"plain_in", {1, 3, 11, 11}, {16, 3, 3, 3}, attrs({{"strides", {2, 2}}}), true, false, "Relu"}, false, true, 8},
      {{"plain_out", {1, 16, 5, 5}, {5, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), false, false, "Sigmoid"}, true,
       false, 8},
      {{"depthwise", {1, 16, 8, 8}, {16, 1, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}, {"group", {16}}}), true, true,
        "HardSwish"},
       true, true, 8},
  };
  for (const Case& bc : cases) {
    const ConvCase& c = bc.conv;
    SCOPED_TRACE(c.name);
    auto plain = make_graph(c, 21);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    auto want_plain = run_reference(*plain);
    ASSERT_TRUE(want_plain.ok()) << want_plain.status().to_string();
    const Tensor want = bc.y_blocked ? block_by_definition(*want_plain, bc.c0) : *want_plain;

    // The same node with formats, X (and Z) blocked by definition.
    ConvGraph g = std::move(*plain);
    ir::Node* n = g.node;
    set_formats(g, bc.x_blocked, bc.y_blocked, bc.c0);
    EXPECT_EQ(n->output(0)->shape().static_dims(), want.dims());
    auto ref = run_reference(g);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    expect_close(*ref, want, c);
    const KernelFactory* f = onednn_factory(ops::kKilnDomain, "FusedConv");
    ASSERT_TRUE(f->applicable(*n).ok());
    auto k = f->prepare(*n);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    auto got = run_kernel(**k, g, input_values(g));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_close(*got, want, c);
  }
}

// 3x3 stride-1 float32 convolutions on maps of at least 28x28 outputs take oneDNN's Winograd
// kernel where it has one (AVX-512, blocked layouts): within the same bound of the reference,
// with residual and activation post-ops, and odd sizes (the last tile is partial).
TEST(OnednnConvTest, WinogradOnLargeMaps) {
  const std::vector<ConvCase> cases = {
      {"relu", {1, 32, 30, 30}, {48, 32, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, false, "Relu"},
      {"residual odd", {1, 16, 33, 29}, {16, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, true, "Relu"},
      {"no pad", {2, 64, 30, 30}, {32, 64, 3, 3}, {}, false, false, ""},
  };
  for (ConvCase c : cases) {
    c.precision = "fp32";  // a FusedConv, which takes blocked layouts
    SCOPED_TRACE(c.name);
    auto made = make_graph(c, 41);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    auto plain_want = run_reference(*made);
    ASSERT_TRUE(plain_want.ok());
    ConvGraph g = std::move(*made);
    ir::Node* n = g.node;
    set_formats(g, true, true, 16);
    const Tensor want = block_by_definition(*plain_want, 16);
    const KernelFactory* f = onednn_factory(ops::kKilnDomain, "FusedConv");
    auto k = f->prepare(*n);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    if (__builtin_cpu_supports("avx512f")) {
      EXPECT_NE((*k)->implementation().find("wino"), std::string::npos) << (*k)->implementation();
    }
    auto got = run_kernel(**k, g, input_values(g));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_close(*got, want, c);
  }
}

// Winograd's documented deviation (conv.cc): a NaN in X reaches the outputs of the tiles whose
// transformed input holds it, a superset of those whose window holds it. Every output the
// reference makes NaN is NaN, and outputs more than 3 pixels away from the NaN agree.
TEST(OnednnConvTest, WinogradSpreadsNonFiniteWithinItsTile) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no Winograd kernel without AVX-512";
  ConvCase c{"nan", {1, 16, 12, 12}, {16, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true};
  auto g = make_graph(c, 5);
  ASSERT_TRUE(g.ok());
  const int64_t nan_h = 5, nan_w = 6;
  g->x.data<float>()[2 * 144 + nan_h * 12 + nan_w] = NAN;
  auto k = onednn_factory("", "Conv")->prepare(*g->node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  ASSERT_NE((*k)->implementation().find("wino"), std::string::npos) << (*k)->implementation();
  auto want = run_reference(*g);
  auto got = run_kernel(**k, *g, input_values(*g));
  ASSERT_TRUE(want.ok() && got.ok());
  for (int64_t o = 0; o < 16; ++o)
    for (int64_t h = 0; h < 12; ++h)
      for (int64_t w = 0; w < 12; ++w) {
        const int64_t i = (o * 12 + h) * 12 + w;
        const float wv = want->data<float>()[i], gv = got->data<float>()[i];
        if (std::isnan(wv)) {
          EXPECT_TRUE(std::isnan(gv)) << "output " << o << "," << h << "," << w;
        } else if (std::abs(h - nan_h) > 3 || std::abs(w - nan_w) > 3) {
          EXPECT_NEAR(gv, wv, 1e-4f) << "output " << o << "," << h << "," << w;
        }
      }
}

// precision bf16 / bf16x3 (the NHWC route through bf16_layout.h) against the reference, which
// rounds (splits) X and W the same way and sums in float32: the comparison is as tight as for
// float32. Plain and blocked X / Y, residuals, groups, odd channel counts, strides, batches,
// a 1-D bf16 conv (the generic route); skipped where oneDNN has no bf16 convolution.
TEST(OnednnConvTest, Bf16AndBf16x3MatchTheReference) {
  struct Case {
    ConvCase conv;
    bool x_blocked = false, y_blocked = false;
    int64_t c0 = 16;
    bool own_layout = false;  // expect oneDNN's nChw16c bf16 kernel (AVX512-BF16), not NHWC
  };
  std::vector<Case> cases;
  for (const char* precision : {"bf16", "bf16x3"}) {
    const std::string p = precision;
    auto conv = [&](std::string name, std::vector<int64_t> x, std::vector<int64_t> w, ir::AttributeMap a, bool b,
                    bool z, std::string act) {
      ConvCase c(p + " " + name, std::move(x), std::move(w), std::move(a), b, z, std::move(act));
      c.precision = p;
      return c;
    };
    cases.push_back({conv("3x3 c3->5 odd", {1, 3, 7, 9}, {5, 3, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true, false, "")});
    cases.push_back({conv("1x1 c17->33 batch3 relu", {3, 17, 5, 5}, {33, 17, 1, 1}, {}, true, false, "Relu")});
    cases.push_back({conv("stride2 residual", {1, 32, 9, 9}, {16, 32, 3, 3},
                          attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}), true, true, "Relu")});
    cases.push_back({conv("group2 c34->18", {1, 34, 9, 9}, {18, 17, 3, 3}, attrs({{"group", {2}}, {"pads", {1, 1, 1, 1}}}),
                          true, false, "")});
    cases.push_back({conv("depthwise c32", {1, 32, 8, 8}, {32, 1, 3, 3}, attrs({{"group", {32}}, {"pads", {1, 1, 1, 1}}}),
                          false, false, "")});
    cases.push_back({conv("blocked in and out residual", {2, 32, 6, 6}, {48, 32, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}),
                          true, true, "Clip"),
                     true, true, 16});
    cases.push_back({conv("blocked in plain out", {1, 16, 5, 7}, {5, 16, 1, 1}, {}, false, false, "Sigmoid"), true, false, 8});
    cases.push_back({conv("plain in blocked out", {1, 3, 11, 11}, {16, 3, 3, 3}, attrs({{"strides", {2, 2}}}), true,
                          false, ""),
                     false, true, 16});
    if (p != "bf16") continue;
    // bf16 between NC1HWC0 tensors of 16-channel blocks: X converted in its own layout, Y and
    // Z read and written as they are (conv.cc's own-layout route). Odd map sizes, a residual
    // on a map large enough for the binary post-op, strides, batches, groups.
    cases.push_back({conv("own layout c32->48 residual 15x17", {1, 32, 15, 17}, {48, 32, 3, 3},
                          attrs({{"pads", {1, 1, 1, 1}}}), true, true, "Relu"),
                     true, true, 16, true});
    cases.push_back({conv("own layout 1x1 stride2 batch2", {2, 48, 9, 9}, {32, 48, 1, 1}, attrs({{"strides", {2, 2}}}),
                          false, false, ""),
                     true, true, 16, true});
    cases.push_back({conv("own layout group2", {1, 32, 8, 8}, {32, 16, 3, 3}, attrs({{"group", {2}}, {"pads", {1, 1, 1, 1}}}),
                          true, false, "Relu"),
                     true, true, 16});
  }
  ConvCase one_d("bf16 1-D", {3, 5, 17}, {17, 5, 3}, attrs({{"pads", {1, 2}}, {"strides", {2}}}), true);
  one_d.precision = "bf16";
  cases.push_back({one_d});
  for (Case& bc : cases) {
    ConvCase& c = bc.conv;
    if (c.activation == "Clip") c.params = {-0.5f, 0.5f};
    SCOPED_TRACE(c.name);
    auto made = make_graph(c, 31);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    ConvGraph g = std::move(*made);
    ir::Node* n = g.node;
    if (bc.x_blocked || bc.y_blocked) set_formats(g, bc.x_blocked, bc.y_blocked, bc.c0);
    auto want = run_reference(g);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    const KernelFactory* f = onednn_factory(ops::kKilnDomain, "FusedConv");
    ASSERT_TRUE(f->applicable(*n).ok());
    auto k = f->prepare(*n);
    if (!k.ok()) GTEST_SKIP() << "no oneDNN bf16 convolution on this CPU: " << k.status().to_string();
    if (bc.own_layout && __builtin_cpu_supports("avx512bf16")) {
      EXPECT_NE((*k)->implementation().find("jit_bf16"), std::string::npos) << (*k)->implementation();
    }
    auto got = run_kernel(**k, g, input_values(g));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    expect_close(*got, *want, c);
  }
}

// bf16 convolutions between 16-channel blocked tensors that read a bfloat16 X or Z (another
// such convolution's output) and / or write a bfloat16 Y (y_dtype, precision_assignment):
// against the reference, which computes in float32 on X and Z as given and rounds Y to
// bfloat16 too. A
// float32 result within the float32 bound of the reference's can round to the neighbouring
// bfloat16, so a bfloat16 Y may also differ by one bfloat16 ulp (<= 2^-7 of the value).
// Residuals (a bfloat16 Y takes Z through the binary post-op on any map, a float32 one on
// large maps), strides, batches, odd sizes.
TEST(OnednnConvTest, Bf16ActivationsMatchTheReference) {
  if (!__builtin_cpu_supports("avx512bf16")) GTEST_SKIP() << "no AVX512-BF16";
  struct Case {
    ConvCase conv;
    bool x_bf16, y_bf16, z_bf16 = false;
  };
  auto conv = [](std::string name, std::vector<int64_t> x, std::vector<int64_t> w, ir::AttributeMap a, bool z,
                 std::string act) {
    ConvCase c(std::move(name), std::move(x), std::move(w), std::move(a), true, z, std::move(act));
    c.precision = "bf16";
    return c;
  };
  const std::vector<Case> cases{
      {conv("bf16 X, f32 Y, residual 15x17", {1, 32, 15, 17}, {48, 32, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true,
            "Relu"),
       true, false},
      {conv("f32 X, bf16 Y, 1x1 stride2 batch2", {2, 48, 9, 9}, {32, 48, 1, 1}, attrs({{"strides", {2, 2}}}), false, ""),
       false, true},
      {conv("bf16 X and Y, residual 7x5", {1, 16, 7, 5}, {32, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true,
            "Relu"),
       true, true},
      {conv("bf16 X and Y, residual 16x15 1x1", {1, 32, 16, 15}, {16, 32, 1, 1}, {}, true, "Relu"), true, true},
      {conv("bf16 X, Y and Z, residual 7x5", {1, 16, 7, 5}, {32, 16, 3, 3}, attrs({{"pads", {1, 1, 1, 1}}}), true,
            "Relu"),
       true, true, true},
      {conv("f32 X and Y, bf16 Z 15x17 stride2", {1, 32, 29, 33}, {16, 32, 3, 3},
            attrs({{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}), true, ""),
       false, false, true},
  };
  for (const Case& bc : cases) {
    const ConvCase& c = bc.conv;
    SCOPED_TRACE(c.name);
    auto made = make_graph(c, 51);
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    ConvGraph g = std::move(*made);
    ir::Node* n = g.node;
    set_formats(g, true, true, 16);
    if (bc.x_bf16) {
      g.x = ops::float_to_half(g.x, DataType::kBFloat16);
      n->input(0)->type().dtype = DataType::kBFloat16;
    }
    if (bc.z_bf16) {
      g.z = ops::float_to_half(g.z, DataType::kBFloat16);
      n->input(3)->type().dtype = DataType::kBFloat16;
    }
    if (bc.y_bf16) n->attrs()["y_dtype"] = Attribute::from_string("bfloat16");
    ASSERT_TRUE(ops::infer_node(*n).ok());
    ASSERT_EQ(n->output(0)->dtype(), bc.y_bf16 ? DataType::kBFloat16 : DataType::kFloat32);
    auto want = run_reference(g);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    const KernelFactory* f = onednn_factory(ops::kKilnDomain, "FusedConv");
    ASSERT_TRUE(f->applicable(*n).ok());
    auto k = f->prepare(*n);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_NE((*k)->implementation().find("jit_bf16"), std::string::npos) << (*k)->implementation();
    for (int run = 0; run < 2; ++run) {  // a second run gives the same (nothing carried over)
      auto got = run_kernel(**k, g, input_values(g));
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      ASSERT_EQ(got->dtype(), want->dtype());
      if (!bc.y_bf16) {
        expect_close(*got, *want, c);
        continue;
      }
      const Tensor got32 = ops::half_to_float(*got), want32 = ops::half_to_float(*want);
      double max_ref = 0;
      for (int64_t i = 0; i < want32.num_elements(); ++i)
        max_ref = std::max(max_ref, std::fabs((double)want32.data<float>()[i]));
      const double tol = 1e-5 * max_ref + static_cast<double>(terms(c)) * FLT_EPSILON;
      int64_t bad = 0;
      for (int64_t i = 0; i < want32.num_elements(); ++i) {
        const double w = want32.data<float>()[i], d = std::fabs(got32.data<float>()[i] - w);
        if (!(d <= tol + std::fabs(w) / 128)) ++bad;
      }
      EXPECT_EQ(bad, 0) << bad << " of " << want32.num_elements();
    }
  }
}

// TransData moves elements as the layout's definition says, both ways, and rejects what it
// cannot convert.
TEST(TransDataTest, MatchesDefinitionBothWays) {
  const ops::OpSchema* schema = ops::OpRegistry::instance().find(ops::kKilnDomain, "TransData", 1);
  ASSERT_NE(schema, nullptr);
  auto run = [&](const Tensor& x, const char* src, const char* dst, int64_t c0) -> Expected<Tensor> {
    ir::Graph graph;
    ir::Value* xv = graph.get_or_add_value("X");
    xv->type() = ir::TensorType{x.dtype(), x.shape()};
    ir::Value* yv = graph.get_or_add_value("Y");
    ir::Node* n = graph.add_node("t", "TransData", ops::kKilnDomain, 1, {xv}, {yv});
    n->attrs()["src_format"] = Attribute::from_string(src);
    n->attrs()["dst_format"] = Attribute::from_string(dst);
    n->attrs()["c0"] = Attribute::from_int(c0);
    KILN_RETURN_IF_ERROR(ops::infer_node(*n));
    std::vector<RuntimeValue> in{RuntimeValue(x)};
    std::vector<RuntimeValue> out(1);
    ops::KernelContext ctx(*n, {&in[0]}, &out);
    KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
    EXPECT_EQ(out[0].tensor().dims(), yv->shape().static_dims());
    return out[0].tensor();
  };
  for (int64_t c0 : {8, 16}) {
    const Tensor x = rnd({2, 32, 5, 3}, static_cast<uint32_t>(c0));
    auto b = run(x, ops::kFormatPlain, ops::kFormatBlocked, c0);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    const Tensor want = block_by_definition(x, c0);
    ASSERT_EQ(b->dims(), want.dims());
    for (int64_t i = 0; i < want.num_elements(); ++i) ASSERT_EQ(b->data<float>()[i], want.data<float>()[i]) << i;
    auto back = run(*b, ops::kFormatBlocked, ops::kFormatPlain, c0);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->dims(), x.dims());
    for (int64_t i = 0; i < x.num_elements(); ++i) ASSERT_EQ(back->data<float>()[i], x.data<float>()[i]) << i;
  }
  // 12 channels are not a multiple of 8; a plain tensor is not blocked; equal formats; c0 0.
  EXPECT_FALSE(run(rnd({1, 12, 2, 2}, 1), ops::kFormatPlain, ops::kFormatBlocked, 8).ok());
  EXPECT_FALSE(run(rnd({1, 16, 2, 2}, 1), ops::kFormatBlocked, ops::kFormatPlain, 8).ok());
  EXPECT_FALSE(run(rnd({1, 16, 2, 2}, 1), ops::kFormatPlain, ops::kFormatPlain, 8).ok());
  EXPECT_FALSE(run(rnd({1, 16, 2, 2}, 1), ops::kFormatPlain, ops::kFormatBlocked, 0).ok());
}

}  // namespace
}  // namespace kiln::kernels
