// The tiled FusedElementwise kernel (src/kernels/cpu/fused_elementwise.cc) against the
// reference kernel, which runs the body op by op through the graph executor (each op's
// reference kernel validated on the ONNX conformance data): long chains, every op the kernel
// compiles, scalar constants, scalar, row and channel broadcasts, sizes that are not a
// multiple of the tile, NaN through Max/Min, lone ONNX elementwise ops; and what it leaves to
// the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"
#include "runtime/graph_executor.h"

namespace kiln::kernels {
namespace {

using ir::Attribute;

Tensor rnd(const std::vector<int64_t>& dims, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  uint32_t s = seed * 2654435761u + 99u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    t.data<float>()[i] = lo + (hi - lo) * static_cast<float>(static_cast<double>(s >> 8) / (1u << 24));
  }
  return t;
}

struct BodyOp {
  std::string op;
  std::vector<std::string> in;
  std::string out;
  ir::AttributeMap attrs;
  int64_t opset = 13;
};

// A graph with one FusedElementwise node: inputs named x0, x1, ... of the given shapes, a
// body of `ops` reading b0, b1, ... (and the scalar constants `consts`: name -> value).
struct Model {
  std::shared_ptr<ir::Graph> graph = std::make_shared<ir::Graph>();
  ir::Node* node = nullptr;
};

Model make_model(const std::vector<std::vector<int64_t>>& shapes, const std::vector<BodyOp>& ops,
                 const std::vector<std::pair<std::string, float>>& consts = {},
                 DataType dtype = DataType::kFloat32) {
  Model m;
  auto body = std::make_shared<ir::Graph>("body");
  for (size_t i = 0; i < shapes.size(); ++i) {
    ir::Value* b = body->get_or_add_value("b" + std::to_string(i));
    b->type() = ir::TensorType{dtype, Shape::from_static(shapes[i])};
    body->inputs().push_back(b);
  }
  for (const auto& [name, value] : consts) {
    ir::Value* c = body->get_or_add_value(name);
    ir::Node* n = body->add_node(name + "_const", "Constant", "", 13, {}, {c});
    n->attrs()["value_float"] = Attribute::from_float(value);
  }
  for (const BodyOp& op : ops) {
    std::vector<ir::Value*> in;
    for (const std::string& n : op.in) in.push_back(n.empty() ? nullptr : body->get_or_add_value(n));
    ir::Node* n = body->add_node(op.out, op.op, "", op.opset, in, {body->get_or_add_value(op.out)});
    n->attrs() = op.attrs;
  }
  body->outputs().push_back(body->find_value(ops.back().out));
  std::vector<ir::Value*> inputs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ir::Value* x = m.graph->get_or_add_value("x" + std::to_string(i));
    x->type() = ir::TensorType{dtype, Shape::from_static(shapes[i])};
    m.graph->inputs().push_back(x);
    inputs.push_back(x);
  }
  ir::Value* y = m.graph->get_or_add_value("y");
  m.graph->outputs().push_back(y);
  m.node = m.graph->add_node("fused", "FusedElementwise", ops::kKilnDomain, ops::kKilnOpset, inputs, {y});
  m.node->attrs()["body"] = Attribute::from_graph(body);
  m.graph->opset_imports()[""] = 13;
  m.graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  EXPECT_TRUE(ops::infer_node(*m.node).ok());
  return m;
}

Tensor run(const Model& m, const std::vector<Tensor>& xs, bool fast) {
  set_fast_kernels_enabled(fast);
  auto exec = rt::GraphExecutor::create(m.graph);
  reset_fast_kernels_enabled();
  EXPECT_TRUE(exec.ok()) << exec.status().to_string();
  if (!exec.ok()) return {};
  std::vector<rt::NamedValue> in;
  for (size_t i = 0; i < xs.size(); ++i) in.push_back({"x" + std::to_string(i), RuntimeValue(xs[i])});
  std::vector<RuntimeValue> out;
  Status s = (*exec)->run(in, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok() ? out[0].tensor() : Tensor();
}

// Same float32 formulas on both sides: equal, or both NaN (transcendental ops go through the
// same libm calls; FMA contraction may differ by an ulp in a*x+b).
void expect_match(const Model& m, const std::vector<Tensor>& xs, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_TRUE(select_kernel(*m.node)) << "the fast kernel does not take " << what;
  Tensor want = run(m, xs, false);
  Tensor got = run(m, xs, true);
  ASSERT_EQ(got.dims(), want.dims());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const float w = want.data<float>()[i], g = got.data<float>()[i];
    if (std::isnan(w)) {
      ASSERT_TRUE(std::isnan(g)) << "element " << i;
      continue;
    }
    ASSERT_LE(std::fabs(g - w), 2e-7f * std::max(1.f, std::fabs(w))) << "element " << i << ": " << g << " vs " << w;
  }
}

TEST(FusedElementwiseKernelTest, LongChainOfAdds) {
  std::vector<BodyOp> ops;
  std::string prev = "b0";
  for (int i = 0; i < 300; ++i) {
    ops.push_back({"Add", {prev, "b0"}, "t" + std::to_string(i)});
    prev = "t" + std::to_string(i);
  }
  for (int64_t n : {1, 64, 1023, 1024, 1025, 70001}) {
    Model m = make_model({{1, n}}, ops);
    expect_match(m, {rnd({1, n}, 1)}, "chain of 300 Adds over " + std::to_string(n));
  }
}

TEST(FusedElementwiseKernelTest, EveryOpWithConstantsAndBroadcasts) {
  ir::AttributeMap leaky{{"alpha", Attribute::from_float(0.1f)}};
  ir::AttributeMap hsig{{"alpha", Attribute::from_float(0.3f)}, {"beta", Attribute::from_float(0.4f)}};
  ir::AttributeMap clip6{{"min", Attribute::from_float(-0.5f)}, {"max", Attribute::from_float(1.5f)}};
  const std::vector<BodyOp> ops{
      {"Mul", {"b0", "half"}, "a"},       {"Add", {"a", "b1"}, "b"},          {"Sub", {"b", "b2"}, "c"},
      {"Div", {"c", "three"}, "d"},       {"Max", {"d", "b0"}, "e"},          {"Min", {"e", "b1"}, "f"},
      {"Relu", {"f"}, "g"},               {"LeakyRelu", {"c"}, "h", leaky},   {"Add", {"g", "h"}, "i"},
      {"HardSigmoid", {"i"}, "j", hsig},  {"Clip", {"i"}, "k", clip6, 6},     {"Clip", {"d", "lo", "hi"}, "l"},
      {"Sigmoid", {"l"}, "m"},            {"Tanh", {"k"}, "n"},               {"Exp", {"j"}, "o"},
      {"Abs", {"c"}, "p"},                {"Sqrt", {"p"}, "q"},               {"Neg", {"q"}, "r"},
      {"Reciprocal", {"o"}, "s"},         {"Erf", {"m"}, "t"},                {"Add", {"n", "r"}, "u"},
      {"Mul", {"u", "s"}, "v"},           {"Add", {"v", "t"}, "w"}};
  const std::vector<std::pair<std::string, float>> consts{{"half", 0.5f}, {"three", 3.f}, {"lo", -0.25f}, {"hi", 0.75f}};
  // b1 a row broadcast (the trailing dim), b2 a scalar.
  Model m = make_model({{2, 3, 517}, {517}, {1}}, ops, consts);
  expect_match(m, {rnd({2, 3, 517}, 2), rnd({517}, 3), rnd({1}, 4)}, "every op");
}

TEST(FusedElementwiseKernelTest, NanThroughMaxMinAndRelu) {
  const std::vector<BodyOp> ops{{"Max", {"b0", "b1"}, "a"}, {"Min", {"a", "b1"}, "b"}, {"Relu", {"b"}, "c"}};
  Model m = make_model({{40}, {40}}, ops);
  Tensor x0 = rnd({40}, 5), x1 = rnd({40}, 6);
  for (int i = 0; i < 40; i += 3) x0.data<float>()[i] = NAN;
  for (int i = 0; i < 40; i += 5) x1.data<float>()[i] = NAN;
  expect_match(m, {x0, x1}, "NaN");
}

TEST(FusedElementwiseKernelTest, LeavesOtherBodiesToTheReference) {
  // Pow is not compiled; a per-channel [C,1,1] operand is not a row broadcast; float64.
  Model pow = make_model({{8}, {8}}, {{"Pow", {"b0", "b1"}, "a"}});
  EXPECT_EQ(select_kernel(*pow.node), nullptr);
  // [4, 1, 3] over [2, 4, 5, 3]: the non-1 dims are not one contiguous run.
  Model gap = make_model({{2, 4, 5, 3}, {4, 1, 3}}, {{"Add", {"b0", "b1"}, "a"}});
  EXPECT_EQ(select_kernel(*gap.node), nullptr);
  Model f64 = make_model({{8}, {8}}, {{"Add", {"b0", "b1"}, "a"}}, {}, DataType::kFloat64);
  EXPECT_EQ(select_kernel(*f64.node), nullptr);
  // ... and they still run, on the reference kernel.
  Tensor got = run(gap, {rnd({2, 4, 5, 3}, 7), rnd({4, 1, 3}, 8)}, true);
  EXPECT_EQ(got.dims(), (std::vector<int64_t>{2, 4, 5, 3}));
}

// Channel-vector broadcasts ([C, 1, 1] over [N, C, H, W]) across tile boundaries.
TEST(FusedElementwiseKernelTest, ChannelBroadcast) {
  Model m = make_model({{2, 24, 13, 11}, {24, 1, 1}, {1, 24, 1, 1}},
                       {{"Mul", {"b0", "b1"}, "a"}, {"Add", {"a", "b2"}, "b"}, {"Relu", {"b"}, "c"}});
  expect_match(m, {rnd({2, 24, 13, 11}, 9), rnd({24, 1, 1}, 10), rnd({1, 24, 1, 1}, 11)}, "channel broadcast");
}

// Lone ONNX elementwise nodes run as one-instruction programs.
TEST(FusedElementwiseKernelTest, SingleOnnxOps) {
  struct Case {
    std::string op;
    std::vector<std::vector<int64_t>> shapes;
    ir::AttributeMap attrs;
  };
  const std::vector<Case> cases{
      {"Add", {{1, 16, 9, 9}, {1, 16, 1, 1}}, {}}, {"Sub", {{5, 7}, {7}}, {}},
      {"Mul", {{3, 2050}, {1}}, {}},               {"Div", {{4, 33}, {4, 33}}, {}},
      {"Relu", {{1000}}, {}},                      {"Sigmoid", {{3, 500}}, {}},
      {"Tanh", {{77}}, {}},
      {"HardSigmoid", {{64}}, {{"alpha", Attribute::from_float(0.25f)}, {"beta", Attribute::from_float(0.4f)}}},
  };
  for (const Case& c : cases) {
    Model m;
    std::vector<ir::Value*> ins;
    std::vector<Tensor> xs;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      ir::Value* x = m.graph->get_or_add_value("x" + std::to_string(i));
      x->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(c.shapes[i])};
      m.graph->inputs().push_back(x);
      ins.push_back(x);
      xs.push_back(rnd(c.shapes[i], 20 + static_cast<uint32_t>(i)));
    }
    ir::Value* y = m.graph->get_or_add_value("y");
    m.graph->outputs().push_back(y);
    m.node = m.graph->add_node("n", c.op, "", 13, ins, {y});
    m.node->attrs() = c.attrs;
    m.graph->opset_imports()[""] = 13;
    ASSERT_TRUE(ops::infer_node(*m.node).ok());
    expect_match(m, xs, c.op);
  }
}

}  // namespace
}  // namespace kiln::kernels
