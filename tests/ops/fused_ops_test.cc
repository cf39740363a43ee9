// Tests of Kiln's fused operators (domain kiln, docs/fused-ops.md): each fused op is
// compared with the chain of ONNX ops it replaces, run one node at a time through the
// ONNX reference kernels (which were validated against the ONNX conformance data); plus
// inference and error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/elementwise_common.h"
#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// ---- helpers -----------------------------------------------------------------------------

// Deterministic values in [-1, 1) (a 32-bit LCG), different per seed.
Tensor rnd(std::vector<int64_t> dims, uint32_t seed, DataType dt = DataType::kFloat32) {
  Tensor t = Tensor::make(dt, dims);
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 1664525u + 1013904223u;
    const double v = static_cast<double>(s >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0;
    if (dt == DataType::kFloat32) t.data<float>()[i] = static_cast<float>(v);
    if (dt == DataType::kFloat64) t.data<double>()[i] = v;
  }
  return t;
}

// A float16 (or bfloat16) copy of a float32 tensor.
Tensor to_half(const Tensor& t, DataType dt = DataType::kFloat16) {
  Tensor out = Tensor::make(dt, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const float v = t.data<float>()[i];
    out.data<uint16_t>()[i] = dt == DataType::kFloat16 ? float_to_fp16(v) : float_to_bf16(v);
  }
  return out;
}

// A float32 copy of a float16 or bfloat16 tensor.
Tensor half_as_float(const Tensor& t) {
  Tensor out = Tensor::make(DataType::kFloat32, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const uint16_t v = t.data<uint16_t>()[i];
    out.data<float>()[i] = t.dtype() == DataType::kFloat16 ? fp16_to_float(v) : bf16_to_float(v);
  }
  return out;
}

Tensor to_double(const Tensor& t) {
  Tensor out = Tensor::make(DataType::kFloat64, t.dims());
  for (int64_t i = 0; i < t.num_elements(); ++i) out.data<double>()[i] = t.element_as_double(i);
  return out;
}

// Runs a body graph node by node through the registry (the subgraph runner the fused
// elementwise kernel needs; the runtime's GraphExecutor does the same in production).
class SequentialRunner : public SubgraphRunner {
 public:
  Expected<std::vector<RuntimeValue>> run(const ir::Graph& body, const std::vector<RuntimeValue>& inputs) override {
    std::map<const ir::Value*, RuntimeValue> vals;
    if (inputs.size() != body.inputs().size())
      return invalid_argument("body takes %zu inputs, got %zu", body.inputs().size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) vals[body.inputs()[i]] = inputs[i];
    for (const auto& v : body.values())
      if (v->has_initializer() && !vals.count(v.get())) vals[v.get()] = *v->initializer();
    for (const auto& n : body.nodes()) {
      KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*n));
      std::vector<const RuntimeValue*> ins;
      for (ir::Value* v : n->inputs()) ins.push_back(v ? &vals.at(v) : nullptr);
      std::vector<RuntimeValue> outs(static_cast<size_t>(n->num_outputs()));
      KernelContext kc(*n, ins, &outs, this);
      KILN_RETURN_IF_ERROR(schema->kernel_fn()(kc));
      for (int i = 0; i < n->num_outputs(); ++i)
        vals[n->outputs()[static_cast<size_t>(i)]] = outs[static_cast<size_t>(i)];
    }
    std::vector<RuntimeValue> out;
    for (ir::Value* v : body.outputs()) out.push_back(vals.at(v));
    return out;
  }
};

// Runs a kiln-domain op on `inputs` (undefined tensor = omitted input): inference first,
// then the reference kernel; fails if the kernel's output disagrees with inference.
// With run_inference false only the kernel runs (to test the kernel's own checks).
Expected<Tensor> run_kiln(const std::string& op, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {},
                          bool run_inference = true) {
  auto graph = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = graph->get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{inputs[i].dtype(), inputs[i].shape()};
    ins.push_back(v);
  }
  ir::Node* node = graph->add_node("n", op, kKilnDomain, kKilnOpset, ins, {graph->get_or_add_value("out")});
  node->attrs() = std::move(attrs);
  if (run_inference) KILN_RETURN_IF_ERROR(infer_node(*node));
  KILN_ASSIGN_OR_RETURN(const OpSchema* schema, schema_for(*node));
  std::vector<RuntimeValue> in_values(inputs.begin(), inputs.end());
  std::vector<const RuntimeValue*> in_ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) in_ptrs.push_back(inputs[i].defined() ? &in_values[i] : nullptr);
  std::vector<RuntimeValue> outs(1);
  SequentialRunner runner;
  KernelContext ctx(*node, in_ptrs, &outs, &runner);
  KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx));
  const Tensor& y = outs[0].tensor();
  if (!run_inference) return y;
  const ir::TensorType& t = node->outputs()[0]->type();
  if (t.dtype != y.dtype())
    return internal_error("inferred %s, kernel gave %s", dtype_name(t.dtype), dtype_name(y.dtype()));
  if (!t.shape.is_static() || t.shape.static_dims() != y.dims())
    return internal_error("inferred %s, kernel gave %s", t.shape.to_string().c_str(), dims_to_string(y.dims()).c_str());
  return y;
}

Tensor kiln1(const std::string& op, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {}) {
  auto r = run_kiln(op, inputs, std::move(attrs));
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().to_string();
  return r.ok() ? *r : Tensor();
}

std::string kiln_error(const std::string& op, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {}) {
  auto r = run_kiln(op, inputs, std::move(attrs));
  return r.ok() ? std::string() : r.status().to_string();
}

// The error of the kernel alone (no inference first), or "".
std::string kernel_error(const std::string& op, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {}) {
  auto r = run_kiln(op, inputs, std::move(attrs), false);
  return r.ok() ? std::string() : r.status().to_string();
}

// Inferred output type of a kiln op on the given input types.
Expected<ir::TensorType> infer_kiln(const std::string& op, const std::vector<ir::TensorType>& types,
                                    ir::AttributeMap attrs = {}) {
  auto graph = std::make_unique<ir::Graph>();
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].dtype == DataType::kUndefined) {
      ins.push_back(nullptr);
      continue;
    }
    ir::Value* v = graph->get_or_add_value("in" + std::to_string(i));
    v->type() = types[i];
    ins.push_back(v);
  }
  ir::Node* node = graph->add_node("n", op, kKilnDomain, kKilnOpset, ins, {graph->get_or_add_value("out")});
  node->attrs() = std::move(attrs);
  KILN_RETURN_IF_ERROR(infer_node(*node));
  return node->outputs()[0]->type();
}

// One ONNX op through its reference kernel (the oracle's building block).
Tensor onnx(const std::string& op, int64_t opset, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {}) {
  return run1(op, opset, inputs, std::move(attrs));
}

Tensor scalar_like(const Tensor& t, double v) {
  Tensor s = Tensor::make(t.dtype(), {});
  if (t.dtype() == DataType::kFloat32) s.data<float>()[0] = static_cast<float>(v);
  if (t.dtype() == DataType::kFloat64) s.data<double>()[0] = v;
  return s;
}

// The ONNX op(s) a fused activation stands for, applied to x.
Tensor onnx_activation(const std::string& name, const std::vector<float>& p, const Tensor& x) {
  if (name.empty()) return x;
  if (name == "Relu") return onnx("Relu", 14, {x});
  if (name == "LeakyRelu") return onnx("LeakyRelu", 16, {x}, {{"alpha", attr_f(p[0])}});
  if (name == "Clip") return onnx("Clip", 13, {x, scalar_like(x, p[0]), scalar_like(x, p[1])});
  if (name == "HardSigmoid") return onnx("HardSigmoid", 6, {x}, {{"alpha", attr_f(p[0])}, {"beta", attr_f(p[1])}});
  if (name == "HardSwish") {
    if (p[0] == 1.0f / 6.0f && p[1] == 0.5f) return onnx("HardSwish", 14, {x});
    return onnx("Mul", 14, {x, onnx("HardSigmoid", 6, {x}, {{"alpha", attr_f(p[0])}, {"beta", attr_f(p[1])}})});
  }
  if (name == "Sigmoid") return onnx("Sigmoid", 13, {x});
  if (name == "Tanh") return onnx("Tanh", 13, {x});
  if (name == "Silu") return onnx("Mul", 14, {x, onnx("Sigmoid", 13, {x})});
  if (name == "Gelu") return onnx("Gelu", 20, {x});
  if (name == "GeluTanh") return onnx("Gelu", 20, {x}, {{"approximate", attr_s("tanh")}});
  ADD_FAILURE() << "unknown activation " << name;
  return x;
}

struct Act {
  std::string name;
  std::vector<float> params;
};

// Every activation of the table (and none), with parameters where it takes them.
const std::vector<Act>& all_activations() {
  static const std::vector<Act> acts = {
      {"", {}},
      {"Relu", {}},
      {"LeakyRelu", {0.2f}},
      {"Clip", {-0.3f, 0.6f}},
      {"HardSigmoid", {0.3f, 0.4f}},
      {"HardSwish", {1.0f / 6.0f, 0.5f}},
      {"HardSwish", {0.25f, 0.45f}},
      {"Sigmoid", {}},
      {"Tanh", {}},
      {"Silu", {}},
      {"Gelu", {}},
      {"GeluTanh", {}},
  };
  return acts;
}

void add_activation(ir::AttributeMap& attrs, const Act& a) {
  if (a.name.empty()) return;
  attrs["activation"] = attr_s(a.name);
  if (!a.params.empty()) attrs["activation_params"] = ir::Attribute::from_floats(a.params);
}

// Expects equal dims and every element within atol + rtol * |want|.
void expect_close(const Tensor& got, const Tensor& want, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_TRUE(got.defined());
  ASSERT_TRUE(want.defined());
  ASSERT_EQ(got.dims(), want.dims());
  std::vector<double> w;
  for (int64_t i = 0; i < want.num_elements(); ++i) w.push_back(want.element_as_double(i));
  expect_tensor(got, want.dims(), w, rtol, atol);
}

bool mentions_node(const std::string& err, const char* op) {
  if (err.empty()) ADD_FAILURE() << op << ": expected an error";
  return err.find(std::string("'n' (kiln.") + op + ")") != std::string::npos;
}

// Expects the same bad input to fail in inference-then-kernel and in the kernel alone,
// both times with an error naming the node.
void expect_error(const std::string& op, const std::vector<Tensor>& inputs, ir::AttributeMap attrs = {}) {
  const std::string e1 = kiln_error(op, inputs, attrs);
  EXPECT_TRUE(mentions_node(e1, op.c_str())) << e1;
  const std::string e2 = kernel_error(op, inputs, attrs);
  EXPECT_TRUE(mentions_node(e2, op.c_str())) << e2;
}

// ---- FusedConv ---------------------------------------------------------------------------

struct ConvCase {
  std::vector<int64_t> x, w;
  bool bias, residual;
  ir::AttributeMap attrs;
};

// Conv -> [Add(Z)] -> activation through the ONNX kernels.
Tensor conv_oracle(const std::vector<Tensor>& in, const ir::AttributeMap& conv_attrs, const Act& act) {
  std::vector<Tensor> conv_in = {in[0], in[1]};
  if (in.size() > 2 && in[2].defined()) conv_in.push_back(in[2]);
  Tensor y = onnx("Conv", 11, conv_in, conv_attrs);
  if (in.size() > 3 && in[3].defined()) y = onnx("Add", 14, {y, in[3]});
  return onnx_activation(act.name, act.params, y);
}

std::vector<ConvCase> conv_cases() {
  return {
      {{1, 3, 7, 9}, {5, 3, 3, 3}, true, false, {{"pads", attr_ints({1, 1, 1, 1})}}},
      // Depthwise over 20 channels (not a multiple of 16), strided, asymmetric pads.
      {{2, 20, 6, 5},
       {20, 1, 3, 3},
       true,
       true,
       {{"group", attr_i(20)}, {"strides", attr_ints({2, 2})}, {"pads", attr_ints({0, 1, 1, 0})}}},
      // Groups of 2 channels, dilation, unequal strides, residual without bias.
      {{1, 6, 11, 10},
       {9, 2, 3, 2},
       false,
       true,
       {{"group", attr_i(3)},
        {"dilations", attr_ints({2, 1})},
        {"strides", attr_ints({1, 3})},
        {"pads", attr_ints({2, 0, 1, 1})}}},
      // 1-D with auto_pad SAME_UPPER and stride 2.
      {{2, 17, 13}, {19, 17, 5}, true, true, {{"auto_pad", attr_s("SAME_UPPER")}, {"strides", attr_ints({2})}}},
      // Pointwise (1x1) with odd channel counts.
      {{1, 18, 4, 5}, {33, 18, 1, 1}, true, true, {}},
      // 3-D, VALID.
      {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, true, true, {{"auto_pad", attr_s("VALID")}}},
  };
}

std::vector<Tensor> conv_inputs(const ConvCase& c, const Tensor& y_shape_probe, uint32_t seed) {
  std::vector<Tensor> in = {rnd(c.x, seed), rnd(c.w, seed + 1)};
  in.push_back(c.bias ? rnd({c.w[0]}, seed + 2) : Tensor());
  if (c.residual) in.push_back(rnd(y_shape_probe.dims(), seed + 3));
  while (!in.empty() && !in.back().defined()) in.pop_back();
  return in;
}

TEST(FusedConvTest, MatchesConvAddActivationForEveryActivation) {
  uint32_t seed = 1;
  for (const ConvCase& c : conv_cases()) {
    Tensor probe = onnx("Conv", 11, {rnd(c.x, 0), rnd(c.w, 0)}, c.attrs);
    for (const Act& a : all_activations()) {
      SCOPED_TRACE("x " + dims_to_string(c.x) + " w " + dims_to_string(c.w) + " activation " + a.name);
      std::vector<Tensor> in = conv_inputs(c, probe, seed++);
      ir::AttributeMap attrs = c.attrs;
      add_activation(attrs, a);
      expect_close(kiln1("FusedConv", in, attrs), conv_oracle(in, c.attrs, a));
    }
  }
}

TEST(FusedConvTest, PostAffineIsMulThenAddAfterTheActivation) {
  const ConvCase c = conv_cases()[0];
  Tensor probe = onnx("Conv", 11, {rnd(c.x, 0), rnd(c.w, 0)}, c.attrs);
  std::vector<Tensor> in = conv_inputs(c, probe, 41);
  for (const Act& a : all_activations()) {
    if (a.name.empty()) continue;
    SCOPED_TRACE("activation " + a.name);
    ir::AttributeMap attrs = c.attrs;
    add_activation(attrs, a);
    attrs["activation_post_scale"] = ir::Attribute::from_float(1.75f);
    attrs["activation_post_shift"] = ir::Attribute::from_float(-0.25f);
    Tensor want = onnx("Mul", 14, {conv_oracle(in, c.attrs, a), Tensor::scalar<float>(1.75f)});
    want = onnx("Add", 14, {want, Tensor::scalar<float>(-0.25f)});
    expect_close(kiln1("FusedConv", in, attrs), want);
  }
}

TEST(FusedConvTest, Float64AndFloat16) {
  const ConvCase c = conv_cases()[1];
  Tensor probe = onnx("Conv", 11, {rnd(c.x, 0), rnd(c.w, 0)}, c.attrs);
  std::vector<Tensor> in = conv_inputs(c, probe, 77);
  ir::AttributeMap attrs = c.attrs;
  add_activation(attrs, {"Silu", {}});
  // float64: the oracle in float64 too.
  std::vector<Tensor> in64;
  for (const Tensor& t : in) in64.push_back(to_double(t));
  Tensor y64 = kiln1("FusedConv", in64, attrs);
  EXPECT_EQ(y64.dtype(), DataType::kFloat64);
  expect_close(y64, conv_oracle(in64, c.attrs, {"Silu", {}}), 1e-12, 1e-12);
  // float16: computed in float32 and rounded once; the oracle runs in float32 on the
  // float16 values, so the two differ by the final rounding only.
  std::vector<Tensor> in16, in16f;
  for (const Tensor& t : in) {
    in16.push_back(to_half(t));
    in16f.push_back(half_as_float(in16.back()));
  }
  Tensor y16 = kiln1("FusedConv", in16, attrs);
  ASSERT_EQ(y16.dtype(), DataType::kFloat16);
  expect_close(half_as_float(y16), conv_oracle(in16f, c.attrs, {"Silu", {}}), 1e-3, 1e-3);
}

TEST(FusedConvTest, InferenceWithSymbolicBatch) {
  auto t =
      infer_kiln("FusedConv",
                 {{DataType::kFloat32, Shape{Dim::symbolic("N"), 3, 8, 8}},
                  {DataType::kFloat32, Shape{5, 3, 3, 3}},
                  {DataType::kFloat32, Shape{5}},
                  {DataType::kFloat32, Shape{Dim::symbolic("N"), 5, 4, 4}}},
                 {{"strides", attr_ints({2, 2})}, {"pads", attr_ints({1, 1, 1, 1})}, {"activation", attr_s("Relu")}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->dtype, DataType::kFloat32);
  EXPECT_EQ(t->shape.to_string(), "[N,5,4,4]");
  // X of unknown rank: the residual, which has Y's shape, gives it.
  t = infer_kiln("FusedConv", {{DataType::kFloat32, Shape::unknown_rank()},
                               {DataType::kFloat32, Shape{5, 3, 3, 3}},
                               {DataType::kUndefined, Shape()},
                               {DataType::kFloat32, Shape{2, 5, 4, 4}}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[2,5,4,4]");
}

TEST(FusedConvTest, Errors) {
  Tensor x = rnd({1, 4, 5, 5}, 1), w = rnd({6, 4, 3, 3}, 2), b = rnd({6}, 3), z = rnd({1, 6, 3, 3}, 4);
  expect_error("FusedConv", {x, w, b, z}, {{"activation", attr_s("Swish")}});
  expect_error("FusedConv", {x, w, b, z},
               {{"activation", attr_s("LeakyRelu")}, {"activation_params", ir::Attribute::from_floats({0.1f, 2})}});
  expect_error("FusedConv", {x, w, b, z},
               {{"activation", attr_s("Relu")}, {"activation_params", ir::Attribute::from_floats({1})}});
  expect_error("FusedConv", {x, w, b, z}, {{"activation_params", ir::Attribute::from_floats({1})}});
  expect_error("FusedConv", {x, w, b, z}, {{"activation", attr_i(1)}});
  // A post-affine needs an activation, and is a float.
  expect_error("FusedConv", {x, w, b, z}, {{"activation_post_scale", ir::Attribute::from_float(2)}});
  expect_error("FusedConv", {x, w, b, z},
               {{"activation", attr_s("Relu")}, {"activation_post_shift", attr_i(1)}});
  // Residual of the wrong shape (it must be Y's shape, not merely broadcastable).
  expect_error("FusedConv", {x, w, b, rnd({1, 6, 1, 3}, 5)});
  // Weight rank and channel mismatches, wrong bias length, bad group, bad pads.
  expect_error("FusedConv", {x, rnd({6, 4, 3}, 6)});
  expect_error("FusedConv", {x, rnd({6, 3, 3, 3}, 6)});
  expect_error("FusedConv", {x, w, rnd({5}, 7)});
  expect_error("FusedConv", {x, w}, {{"group", attr_i(4)}});
  expect_error("FusedConv", {x, w}, {{"pads", attr_ints({1, 1})}});
  expect_error("FusedConv", {rnd({4, 5}, 1), rnd({6, 4}, 2)});
  // Integer input.
  expect_error("FusedConv", {make<int32_t>({1, 1, 1, 1}, {1}), make<int32_t>({1, 1, 1, 1}, {1})});
  // y_dtype: float32 or bfloat16, with float32 weights only.
  expect_error("FusedConv", {x, w}, {{"y_dtype", attr_s("float16")}});
  expect_error("FusedConv", {x, w}, {{"y_dtype", attr_s("int8")}});
  expect_error("FusedConv", {to_double(x), to_double(w)}, {{"y_dtype", attr_s("bfloat16")}});
  // A bfloat16 X beside float32 weights is an activation; beside float64 ones a mismatch.
  const Tensor x_bf16 = float_to_half(x, DataType::kBFloat16);
  EXPECT_EQ(kiln1("FusedConv", {x_bf16, w}).dtype(), DataType::kFloat32);
  expect_error("FusedConv", {x_bf16, to_double(w)});
}

// ---- FusedMatMul -------------------------------------------------------------------------

// MatMul -> [Add(Bias)] -> [Add(Z)] -> activation through the ONNX kernels.
Tensor matmul_oracle(const std::vector<Tensor>& in, const Act& act) {
  Tensor y = onnx("MatMul", 13, {in[0], in[1]});
  if (in.size() > 2 && in[2].defined()) y = onnx("Add", 14, {y, in[2]});
  if (in.size() > 3 && in[3].defined()) y = onnx("Add", 14, {y, in[3]});
  return onnx_activation(act.name, act.params, y);
}

struct MatMulCase {
  std::vector<int64_t> a, b, bias, z;  // empty bias / z: omitted
};

std::vector<MatMulCase> matmul_cases() {
  return {
      {{3, 4, 5}, {5, 6}, {6}, {3, 4, 6}},
      // Batched A and B with broadcasting batch dims; Bias [1, N], Z broadcast over a batch dim.
      {{2, 1, 3, 7}, {5, 7, 4}, {1, 4}, {5, 3, 4}},
      {{2, 1, 3, 7}, {5, 7, 4}, {}, {2, 5, 3, 4}},
      // 1-D A, 1-D B.
      {{7}, {7, 3}, {3}, {}},
      {{4, 7}, {7}, {}, {4}},
      {{17, 33}, {33, 19}, {19}, {17, 1}},
  };
}

std::vector<Tensor> matmul_inputs(const MatMulCase& c, uint32_t seed) {
  std::vector<Tensor> in = {rnd(c.a, seed), rnd(c.b, seed + 1)};
  in.push_back(c.bias.empty() ? Tensor() : rnd(c.bias, seed + 2));
  in.push_back(c.z.empty() ? Tensor() : rnd(c.z, seed + 3));
  while (!in.back().defined()) in.pop_back();
  return in;
}

TEST(FusedMatMulTest, MatchesMatMulAddAddActivationForEveryActivation) {
  uint32_t seed = 100;
  for (const MatMulCase& c : matmul_cases()) {
    for (const Act& a : all_activations()) {
      SCOPED_TRACE("a " + dims_to_string(c.a) + " b " + dims_to_string(c.b) + " activation " + a.name);
      std::vector<Tensor> in = matmul_inputs(c, seed++);
      ir::AttributeMap attrs;
      add_activation(attrs, a);
      expect_close(kiln1("FusedMatMul", in, attrs), matmul_oracle(in, a));
    }
  }
}

TEST(FusedMatMulTest, Float64AndFloat16) {
  std::vector<Tensor> in = matmul_inputs(matmul_cases()[1], 5);
  ir::AttributeMap attrs = {{"activation", attr_s("Gelu")}};
  std::vector<Tensor> in64, in16, in16f;
  for (const Tensor& t : in) {
    in64.push_back(to_double(t));
    in16.push_back(to_half(t));
    in16f.push_back(half_as_float(in16.back()));
  }
  expect_close(kiln1("FusedMatMul", in64, attrs), matmul_oracle(in64, {"Gelu", {}}), 1e-12, 1e-12);
  Tensor y16 = kiln1("FusedMatMul", in16, attrs);
  ASSERT_EQ(y16.dtype(), DataType::kFloat16);
  expect_close(half_as_float(y16), matmul_oracle(in16f, {"Gelu", {}}), 1e-3, 1e-3);
  // bfloat16 (8 significant bits): one rounding at the end.
  std::vector<Tensor> inb, inbf;
  for (const Tensor& t : in) {
    inb.push_back(to_half(t, DataType::kBFloat16));
    inbf.push_back(half_as_float(inb.back()));
  }
  Tensor yb = kiln1("FusedMatMul", inb, attrs);
  ASSERT_EQ(yb.dtype(), DataType::kBFloat16);
  expect_close(half_as_float(yb), matmul_oracle(inbf, {"Gelu", {}}), 1e-2, 1e-2);
}

TEST(FusedMatMulTest, InferenceAndErrors) {
  auto t = infer_kiln("FusedMatMul", {{DataType::kFloat32, Shape{Dim::symbolic("B"), Dim::symbolic("S"), 8}},
                                      {DataType::kFloat32, Shape{8, 16}},
                                      {DataType::kFloat32, Shape{16}}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[B,S,16]");
  Tensor a = rnd({3, 4}, 1), b = rnd({4, 5}, 2);
  // A bias that would grow Y's shape, a bias that does not broadcast, mismatched K.
  expect_error("FusedMatMul", {a, b, rnd({2, 3, 5}, 3)});
  expect_error("FusedMatMul", {a, b, rnd({4}, 3)});
  expect_error("FusedMatMul", {a, b, Tensor(), rnd({3, 4}, 3)});
  expect_error("FusedMatMul", {a, rnd({3, 5}, 2)});
  expect_error("FusedMatMul", {rnd({3, 4, 5}, 1), rnd({2, 5, 2}, 2)});  // batch 3 vs 2
  expect_error("FusedMatMul", {a, b}, {{"activation", attr_s("relu")}});
  expect_error("FusedMatMul", {a, b},
               {{"activation", attr_s("Clip")}, {"activation_params", ir::Attribute::from_floats({0})}});
  expect_error("FusedMatMul", {a, make<double>({4, 5}, std::vector<double>(20, 1.0))});
  expect_error("FusedMatMul", {a, b, make<double>({5}, std::vector<double>(5, 1.0))});
}

// ---- FusedGemm ---------------------------------------------------------------------------

TEST(FusedGemmTest, MatchesGemmActivationTransposesAndC) {
  const int64_t m = 5, k = 7, n = 6;
  const std::vector<std::vector<int64_t>> c_shapes = {{}, {n}, {m, 1}, {m, n}, {1}};
  uint32_t seed = 300;
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (size_t ci = 0; ci < c_shapes.size(); ++ci) {
        for (const Act& act : all_activations()) {
          SCOPED_TRACE("transA " + std::to_string(ta) + " transB " + std::to_string(tb) + " C " + std::to_string(ci) +
                       " activation " + act.name);
          std::vector<Tensor> in = {rnd(ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, seed),
                                    rnd(tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, seed + 1)};
          if (ci > 0) in.push_back(rnd(c_shapes[ci], seed + 2));
          ++seed;
          ir::AttributeMap gemm_attrs = {{"transA", attr_i(ta)}, {"transB", attr_i(tb)}};
          if (seed % 2) {
            gemm_attrs["alpha"] = attr_f(0.75f);
            gemm_attrs["beta"] = attr_f(-1.5f);
          }
          ir::AttributeMap attrs = gemm_attrs;
          add_activation(attrs, act);
          Tensor want = onnx_activation(act.name, act.params, onnx("Gemm", 13, in, gemm_attrs));
          expect_close(kiln1("FusedGemm", in, attrs), want);
        }
      }
    }
  }
}

TEST(FusedGemmTest, Float64Float16InferenceAndErrors) {
  std::vector<Tensor> in = {rnd({3, 9}, 1), rnd({4, 9}, 2), rnd({4}, 3)};
  ir::AttributeMap gemm_attrs = {{"transB", attr_i(1)}, {"alpha", attr_f(2.0f)}};
  ir::AttributeMap attrs = gemm_attrs;
  attrs["activation"] = attr_s("Tanh");
  std::vector<Tensor> in64, in16, in16f;
  for (const Tensor& t : in) {
    in64.push_back(to_double(t));
    in16.push_back(to_half(t));
    in16f.push_back(half_as_float(in16.back()));
  }
  expect_close(kiln1("FusedGemm", in64, attrs), onnx("Tanh", 13, {onnx("Gemm", 13, in64, gemm_attrs)}), 1e-12, 1e-12);
  Tensor y16 = kiln1("FusedGemm", in16, attrs);
  ASSERT_EQ(y16.dtype(), DataType::kFloat16);
  expect_close(half_as_float(y16), onnx("Tanh", 13, {onnx("Gemm", 13, in16f, gemm_attrs)}), 1e-3, 1e-3);

  auto t =
      infer_kiln("FusedGemm", {{DataType::kFloat32, Shape{9, Dim::symbolic("M")}}, {DataType::kFloat32, Shape{9, 4}}},
                 {{"transA", attr_i(1)}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[M,4]");
  // C [3, 4] fixes M; C [2, 4] does not broadcast to [3, 4].
  t = infer_kiln("FusedGemm", {{DataType::kFloat32, Shape{Dim::symbolic("M"), 9}},
                               {DataType::kFloat32, Shape{9, 4}},
                               {DataType::kFloat32, Shape{3, 4}}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[3,4]");
  t = infer_kiln(
      "FusedGemm",
      {{DataType::kFloat32, Shape{3, 9}}, {DataType::kFloat32, Shape{9, 4}}, {DataType::kFloat32, Shape{2, 4}}});
  EXPECT_FALSE(t.ok());
  expect_error("FusedGemm", {rnd({3, 9}, 1), rnd({4, 9}, 2)});  // K mismatch
  expect_error("FusedGemm", {rnd({3, 9, 1}, 1), rnd({9, 4}, 2)});
  expect_error("FusedGemm", {rnd({3, 9}, 1), rnd({9, 4}, 2), rnd({2, 4}, 3)});
  expect_error("FusedGemm", {rnd({3, 9}, 1), rnd({9, 4}, 2)}, {{"activation", attr_s("Mish")}});
  expect_error("FusedGemm", {make<int64_t>({1, 1}, {1}), make<int64_t>({1, 1}, {1})});
}

// ---- LayerNorm -----------------------------------------------------------------------------

// The decomposition the fusion replaces: ReduceMean, Sub, Pow(2), ReduceMean, Add(eps),
// Sqrt, Div, Mul(Scale), Add(Bias).
Tensor layer_norm_oracle(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis, float eps) {
  const int64_t r = x.rank();
  const int64_t a = axis < 0 ? axis + r : axis;
  std::vector<int64_t> axes;
  for (int64_t d = a; d < r; ++d) axes.push_back(d);
  ir::AttributeMap red = {{"axes", attr_ints(axes)}, {"keepdims", attr_i(1)}};
  Tensor mean = onnx("ReduceMean", 13, {x}, red);
  Tensor d = onnx("Sub", 14, {x, mean});
  Tensor var = onnx("ReduceMean", 13, {onnx("Pow", 15, {d, scalar_like(x, 2.0)})}, red);
  Tensor den = onnx("Sqrt", 13, {onnx("Add", 14, {var, scalar_like(x, eps)})});
  Tensor y = onnx("Mul", 14, {onnx("Div", 14, {d, den}), scale});
  return bias ? onnx("Add", 14, {y, *bias}) : y;
}

TEST(FusedLayerNormTest, MatchesDecompositionOverLastAxes) {
  struct Case {
    std::vector<int64_t> x, scale, bias;
    int64_t axis;
    float eps;
    double offset;  // added to X: a mean far from 0
  };
  const std::vector<Case> cases = {
      {{2, 3, 7}, {7}, {7}, -1, 1e-5f, 0},
      {{4, 5, 6}, {5, 6}, {6}, -2, 1e-3f, 0},
      {{3, 33}, {33}, {}, 1, 1e-5f, 0},
      {{2, 17, 64}, {64}, {64}, -1, 1e-12f, 10},
      {{2, 3, 4, 5}, {1, 5}, {4, 1}, 2, 1e-5f, 0},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) {
    SCOPED_TRACE("x " + dims_to_string(c.x) + " axis " + std::to_string(c.axis));
    Tensor x = rnd(c.x, seed++);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data<float>()[i] += static_cast<float>(c.offset);
    Tensor scale = rnd(c.scale, seed++);
    Tensor bias = c.bias.empty() ? Tensor() : rnd(c.bias, seed++);
    ir::AttributeMap attrs = {{"axis", attr_i(c.axis)}, {"epsilon", attr_f(c.eps)}};
    std::vector<Tensor> in = {x, scale};
    if (bias.defined()) in.push_back(bias);
    expect_close(kiln1("LayerNorm", in, attrs),
                 layer_norm_oracle(x, scale, bias.defined() ? &bias : nullptr, c.axis, c.eps));
    // float64 against the float64 decomposition.
    std::vector<Tensor> in64;
    for (const Tensor& t : in) in64.push_back(to_double(t));
    Tensor b64 = bias.defined() ? to_double(bias) : Tensor();
    expect_close(kiln1("LayerNorm", in64, attrs),
                 layer_norm_oracle(in64[0], in64[1], bias.defined() ? &b64 : nullptr, c.axis, c.eps), 1e-10, 1e-12);
  }
}

TEST(FusedLayerNormTest, DefaultsFloat16InferenceAndErrors) {
  Tensor x = rnd({3, 8}, 1), scale = rnd({8}, 2), bias = rnd({8}, 3);
  expect_close(kiln1("LayerNorm", {x, scale, bias}), layer_norm_oracle(x, scale, &bias, -1, 1e-5f));
  Tensor x16 = to_half(x), s16 = to_half(scale), b16 = to_half(bias);
  Tensor xf = half_as_float(x16), sf = half_as_float(s16), bf = half_as_float(b16);
  Tensor y16 = kiln1("LayerNorm", {x16, s16, b16});
  ASSERT_EQ(y16.dtype(), DataType::kFloat16);
  expect_close(half_as_float(y16), layer_norm_oracle(xf, sf, &bf, -1, 1e-5f), 1e-3, 1e-3);

  auto t = infer_kiln("LayerNorm", {{DataType::kFloat32, Shape{Dim::symbolic("B"), Dim::symbolic("S"), 768}},
                                    {DataType::kFloat32, Shape{768}},
                                    {DataType::kFloat32, Shape{768}}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[B,S,768]");
  Tensor x3 = rnd({2, 5, 6}, 4);
  expect_error("LayerNorm", {x3, rnd({6}, 5)}, {{"axis", attr_i(3)}});
  expect_error("LayerNorm", {x3, rnd({5}, 5)}, {{"axis", attr_i(-2)}});
  expect_error("LayerNorm", {x3, rnd({2, 5, 6}, 5)}, {{"axis", attr_i(-2)}});
  expect_error("LayerNorm", {x3, rnd({6}, 5), rnd({4}, 6)});
  expect_error("LayerNorm", {x3, to_double(rnd({6}, 5))});
  expect_error("LayerNorm", {make<int32_t>({2}, {1, 2}), make<int32_t>({2}, {1, 2})});
}

// ---- Gelu and HardSwish -------------------------------------------------------------------

Tensor scaled(Tensor t, float k) {
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] *= k;
  return t;
}

// Erf form: Div(sqrt 2), Erf, Add(1), Mul(x), Mul(0.5).
Tensor gelu_erf_oracle(const Tensor& x) {
  Tensor e = onnx("Erf", 13, {onnx("Div", 14, {x, scalar_like(x, std::sqrt(2.0))})});
  Tensor h = onnx("Mul", 14, {x, onnx("Add", 14, {e, scalar_like(x, 1.0)})});
  return onnx("Mul", 14, {h, scalar_like(x, 0.5)});
}

// Tanh form: Pow(3), Mul(0.044715), Add(x), Mul(sqrt(2/pi)), Tanh, Add(1), Mul(x), Mul(0.5).
Tensor gelu_tanh_oracle(const Tensor& x) {
  Tensor c = onnx("Mul", 14, {onnx("Pow", 15, {x, scalar_like(x, 3.0)}), scalar_like(x, 0.044715)});
  Tensor in = onnx("Mul", 14, {onnx("Add", 14, {x, c}), scalar_like(x, std::sqrt(2.0 / M_PI))});
  Tensor h = onnx("Mul", 14, {x, onnx("Add", 14, {onnx("Tanh", 13, {in}), scalar_like(x, 1.0)})});
  return onnx("Mul", 14, {h, scalar_like(x, 0.5)});
}

TEST(FusedGeluTest, ErfAndTanhFormsMatchDecompositions) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{2, 3, 5}, {1001}, {}}) {
    Tensor x = scaled(rnd(dims, 9), 6.0f);
    expect_close(kiln1("Gelu", {x}), gelu_erf_oracle(x));
    expect_close(kiln1("Gelu", {x}, {{"approximate", attr_s("none")}}), gelu_erf_oracle(x));
    expect_close(kiln1("Gelu", {x}, {{"approximate", attr_s("tanh")}}), gelu_tanh_oracle(x));
    Tensor x64 = to_double(x);
    expect_close(kiln1("Gelu", {x64}), gelu_erf_oracle(x64), 1e-12, 1e-14);
    expect_close(kiln1("Gelu", {x64}, {{"approximate", attr_s("tanh")}}), gelu_tanh_oracle(x64), 1e-12, 1e-14);
    Tensor x16 = to_half(x);
    Tensor y16 = kiln1("Gelu", {x16}, {{"approximate", attr_s("tanh")}});
    ASSERT_EQ(y16.dtype(), DataType::kFloat16);
    expect_close(half_as_float(y16), gelu_tanh_oracle(half_as_float(x16)), 1e-3, 1e-3);
  }
  expect_error("Gelu", {rnd({3}, 1)}, {{"approximate", attr_s("fast")}});
  expect_error("Gelu", {make<int32_t>({2}, {1, 2})});
}

TEST(FusedHardSwishTest, MatchesMulHardSigmoidAndClipForm) {
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{2, 3, 5}, {257}}) {
    Tensor x = scaled(rnd(dims, 11), 5.0f);
    // Defaults: x * HardSigmoid(x; 1/6, 0.5), and x * Clip(x + 3, 0, 6) / 6.
    ir::AttributeMap hs = {{"alpha", attr_f(1.0f / 6.0f)}, {"beta", attr_f(0.5f)}};
    Tensor y = kiln1("HardSwish", {x});
    expect_close(y, onnx("Mul", 14, {x, onnx("HardSigmoid", 6, {x}, hs)}));
    Tensor clip = onnx("Clip", 13, {onnx("Add", 14, {x, scalar_like(x, 3)}), scalar_like(x, 0), scalar_like(x, 6)});
    expect_close(y, onnx("Div", 14, {onnx("Mul", 14, {x, clip}), scalar_like(x, 6)}));
    expect_close(y, onnx("HardSwish", 14, {x}));
    // Other parameters.
    ir::AttributeMap p = {{"alpha", attr_f(0.3f)}, {"beta", attr_f(0.25f)}};
    expect_close(kiln1("HardSwish", {x}, p), onnx("Mul", 14, {x, onnx("HardSigmoid", 6, {x}, p)}));
    Tensor x64 = to_double(x);
    expect_close(kiln1("HardSwish", {x64}, p), onnx("Mul", 14, {x64, onnx("HardSigmoid", 6, {x64}, p)}), 1e-12, 1e-14);
    Tensor x16 = to_half(x);
    Tensor y16 = kiln1("HardSwish", {x16});
    ASSERT_EQ(y16.dtype(), DataType::kFloat16);
    expect_close(half_as_float(y16), onnx("HardSwish", 14, {half_as_float(x16)}), 1e-3, 1e-3);
  }
  expect_error("HardSwish", {make<int64_t>({2}, {1, 2})});
}

// ---- Attention --------------------------------------------------------------------------------

// [Transpose(K)], MatMul, Mul(scale), [Add(mask)], Softmax(-1), MatMul.
Tensor attention_oracle(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* mask, float scale,
                        bool k_transposed) {
  Tensor kt = k;
  if (!k_transposed) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < k.rank(); ++i) perm.push_back(i);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    kt = onnx("Transpose", 13, {k}, {{"perm", attr_ints(perm)}});
  }
  Tensor s = onnx("Mul", 14, {onnx("MatMul", 13, {q, kt}), scalar_like(q, scale)});
  if (mask) s = onnx("Add", 14, {s, *mask});
  return onnx("MatMul", 13, {onnx("Softmax", 13, {s}, {{"axis", attr_i(-1)}}), v});
}

// K stored transposed (last two axes swapped), for k_transposed = 1.
Tensor swap_last_two(const Tensor& k) {
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < k.rank(); ++i) perm.push_back(i);
  std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
  return onnx("Transpose", 13, {k}, {{"perm", attr_ints(perm)}});
}

struct AttnCase {
  std::vector<int64_t> q, k, v, mask;  // k as [..., Sk, D]; empty mask: none
  float scale;
};

std::vector<AttnCase> attention_cases() {
  return {
      {{2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 7}, {2, 1, 1, 6}, 0.5f},
      {{1, 4, 8, 16}, {1, 4, 8, 16}, {1, 4, 8, 16}, {}, 0.25f},
      // Batch broadcasting between Q, K and V (V of rank 2), a 2-D mask.
      {{3, 5, 4}, {2, 1, 6, 4}, {6, 7}, {5, 6}, 1.0f},
      // A mask that adds a batch dim; a 1-D mask.
      {{3, 5, 4}, {3, 6, 4}, {3, 6, 7}, {2, 1, 5, 6}, 0.125f},
      {{2, 2, 1, 3}, {2, 2, 13, 3}, {2, 2, 13, 5}, {13}, 0.7f},
      {{1, 12, 9, 17}, {1, 12, 9, 17}, {1, 12, 9, 17}, {1, 1, 1, 9}, 1.0f / std::sqrt(17.0f)},
  };
}

TEST(FusedAttentionTest, MatchesUnfusedBlockBothKLayouts) {
  uint32_t seed = 700;
  for (const AttnCase& c : attention_cases()) {
    SCOPED_TRACE("q " + dims_to_string(c.q) + " k " + dims_to_string(c.k) + " mask " + dims_to_string(c.mask));
    Tensor q = scaled(rnd(c.q, seed), 2.0f), k = scaled(rnd(c.k, seed + 1), 2.0f), v = rnd(c.v, seed + 2);
    Tensor mask = c.mask.empty() ? Tensor() : scaled(rnd(c.mask, seed + 3), 3.0f);
    seed += 4;
    const Tensor* m = c.mask.empty() ? nullptr : &mask;
    Tensor want = attention_oracle(q, k, v, m, c.scale, false);
    for (int kt = 0; kt < 2; ++kt) {
      std::vector<Tensor> in = {q, kt ? swap_last_two(k) : k, v};
      if (m) in.push_back(mask);
      ir::AttributeMap attrs = {{"scale", attr_f(c.scale)}};
      if (kt || seed % 2) attrs["k_transposed"] = attr_i(kt);
      expect_close(kiln1("Attention", in, attrs), want);
    }
  }
}

TEST(FusedAttentionTest, InfiniteMaskEntriesDefaultScaleFloat64Float16) {
  // -inf and -10000 entries (BERT's padding mask); a fully masked row gives NaN in both.
  Tensor q = rnd({1, 2, 4, 3}, 1), k = rnd({1, 2, 5, 3}, 2), v = rnd({1, 2, 5, 2}, 3);
  Tensor mask = make<float>({1, 1, 4, 5}, {0,         0,         -INFINITY, -10000,    0,          //
                                           -INFINITY, 0,         0,         0,         0,          //
                                           -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,  //
                                           0,         -10000,    -10000,    -10000,    -10000});
  Tensor y = kiln1("Attention", {q, k, v, mask});
  expect_close(y, attention_oracle(q, k, v, &mask, 1.0f, false));
  // Every key of a row masked by a large finite value (BERT's (1 - mask) * -10000): in
  // float32 the Add quantises the scores, and the fused op must round the same way.
  {
    Tensor qb = scaled(rnd({2, 3, 6, 8}, 21), 3.0f), kb = scaled(rnd({2, 3, 7, 8}, 22), 3.0f),
           vb = rnd({2, 3, 7, 5}, 23);
    std::vector<float> mv;
    for (int i = 0; i < 14; ++i) mv.push_back(i < 7 ? -10000.0f : (i % 3 == 0 ? 0.0f : 40000.0f));
    Tensor big = make<float>({2, 1, 1, 7}, mv);
    expect_close(kiln1("Attention", {qb, kb, vb, big}, {{"scale", attr_f(0.125f)}}),
                 attention_oracle(qb, kb, vb, &big, 0.125f, false));
  }
  std::vector<Tensor> in = {q, k, v, mask};
  std::vector<Tensor> in64, in16, in16f;
  for (const Tensor& t : in) {
    in64.push_back(to_double(t));
    in16.push_back(to_half(t));
    in16f.push_back(half_as_float(in16.back()));
  }
  ir::AttributeMap attrs = {{"scale", attr_f(0.5f)}};
  expect_close(kiln1("Attention", in64, attrs), attention_oracle(in64[0], in64[1], in64[2], &in64[3], 0.5f, false),
               1e-12, 1e-14);
  Tensor y16 = kiln1("Attention", in16, attrs);
  ASSERT_EQ(y16.dtype(), DataType::kFloat16);
  expect_close(half_as_float(y16), attention_oracle(in16f[0], in16f[1], in16f[2], &in16f[3], 0.5f, false), 1e-3, 1e-3);
}

TEST(FusedAttentionTest, InferenceAndErrors) {
  const Dim b = Dim::symbolic("B"), s = Dim::symbolic("S");
  auto t = infer_kiln("Attention",
                      {{DataType::kFloat32, Shape{b, 12, s, 64}},
                       {DataType::kFloat32, Shape{b, 12, 64, s}},
                       {DataType::kFloat32, Shape{b, 12, s, 64}},
                       {DataType::kFloat32, Shape{b, 1, 1, s}}},
                      {{"k_transposed", attr_i(1)}, {"scale", attr_f(0.125f)}});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape.to_string(), "[B,12,S,64]");
  Tensor q = rnd({2, 3, 4}, 1), k = rnd({2, 5, 4}, 2), v = rnd({2, 5, 6}, 3);
  expect_error("Attention", {q, rnd({2, 5, 3}, 2), v});                 // head sizes differ
  expect_error("Attention", {q, k, rnd({2, 4, 6}, 3)});                 // key lengths differ
  expect_error("Attention", {q, k, v}, {{"k_transposed", attr_i(1)}});  // K read as [D, Sk]
  expect_error("Attention", {q, k, v, rnd({3, 6}, 4)});                 // mask wider than the keys
  expect_error("Attention", {q, k, v, rnd({2, 2, 5}, 4)});              // mask with more queries
  expect_error("Attention", {q, k, v, rnd({3, 1, 5}, 4)});              // mask batch 3 vs 2
  expect_error("Attention", {rnd({4}, 1), k, v});                       // rank 1
  expect_error("Attention", {q, k, v, make<bool>({5}, {true, true, true, true, true})});
  expect_error("Attention", {q, k, to_double(v)});
}

// ---- FusedElementwise ---------------------------------------------------------------------

// A body graph built node by node: inputs typed, constants as initializers.
struct Body {
  std::shared_ptr<ir::Graph> g = std::make_shared<ir::Graph>("body");
  int counter = 0;
  ir::Value* input(const std::string& name, DataType dt, Shape shape) {
    ir::Value* v = g->get_or_add_value(name);
    v->type() = {dt, std::move(shape)};
    g->inputs().push_back(v);
    return v;
  }
  ir::Value* constant(const Tensor& t) {
    ir::Value* v = g->get_or_add_value("c" + std::to_string(counter++));
    v->type() = {t.dtype(), t.shape()};
    v->set_initializer(t);
    return v;
  }
  ir::Value* op(const std::string& type, int64_t opset, std::vector<ir::Value*> ins, ir::AttributeMap attrs = {}) {
    ir::Value* out = g->get_or_add_value("t" + std::to_string(counter++));
    ir::Node* n = g->add_node("b" + std::to_string(counter), type, "", opset, std::move(ins), {out});
    n->attrs() = std::move(attrs);
    return out;
  }
  ir::AttributeMap attrs(ir::Value* output) {
    g->outputs().push_back(output);
    g->opset_imports()[""] = 18;
    return {{"body", ir::Attribute::from_graph(g)}};
  }
};

TEST(FusedElementwiseTest, RunsBodyLikeTheUnfusedChain) {
  // Sigmoid(Clip((a + b) * 0.5, -0.2, 0.3)) with a [2,3,4], b [4].
  {
    Tensor a = rnd({2, 3, 4}, 1), b = rnd({4}, 2);
    Body body;
    ir::Value* x = body.op(
        "Add", 14, {body.input("a", DataType::kFloat32, a.shape()), body.input("b", DataType::kFloat32, b.shape())});
    x = body.op("Mul", 14, {x, body.constant(scalar_like(a, 0.5))});
    x = body.op("Clip", 13, {x, body.constant(scalar_like(a, -0.2)), body.constant(scalar_like(a, 0.3))});
    x = body.op("Sigmoid", 13, {x});
    Tensor want = onnx("Sigmoid", 13,
                       {onnx("Clip", 13,
                             {onnx("Mul", 14, {onnx("Add", 14, {a, b}), scalar_like(a, 0.5)}), scalar_like(a, -0.2),
                              scalar_like(a, 0.3)})});
    expect_close(kiln1("FusedElementwise", {a, b}, body.attrs(x)), want, 0, 0);
  }
  // Three inputs broadcasting to [3, 4, 5]: Sqrt(Max(Abs(a - b), c)) / 2 with a Constant node.
  {
    Tensor a = rnd({3, 1, 5}, 3), b = rnd({1, 4, 1}, 4), c = rnd({5}, 5);
    Body body;
    ir::Value* va = body.input("a", DataType::kFloat32, a.shape());
    ir::Value* vb = body.input("b", DataType::kFloat32, b.shape());
    ir::Value* vc = body.input("c", DataType::kFloat32, c.shape());
    ir::Value* x = body.op("Abs", 13, {body.op("Sub", 14, {va, vb})});
    x = body.op("Sqrt", 13, {body.op("Max", 13, {x, vc})});
    ir::Value* two = body.op("Constant", 13, {}, {{"value_float", attr_f(2.0f)}});
    x = body.op("Div", 14, {x, two});
    Tensor want = onnx(
        "Div", 14,
        {onnx("Sqrt", 13, {onnx("Max", 13, {onnx("Abs", 13, {onnx("Sub", 14, {a, b})}), c})}), scalar_like(a, 2.0)});
    auto r = run_kiln("FusedElementwise", {a, b, c}, body.attrs(x));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->dims(), (std::vector<int64_t>{3, 4, 5}));
    expect_close(*r, want, 0, 0);
  }
  // float16 through the body: Relu(a * b) in float16, as the unfused ops compute it.
  {
    Tensor a = to_half(rnd({7}, 6)), b = to_half(rnd({7}, 7));
    Body body;
    ir::Value* x = body.op(
        "Mul", 14, {body.input("a", DataType::kFloat16, a.shape()), body.input("b", DataType::kFloat16, b.shape())});
    x = body.op("Relu", 14, {x});
    Tensor y = kiln1("FusedElementwise", {a, b}, body.attrs(x));
    ASSERT_EQ(y.dtype(), DataType::kFloat16);
    expect_close(y, onnx("Relu", 14, {onnx("Mul", 14, {a, b})}), 0, 0);
  }
}

TEST(FusedElementwiseTest, InferenceAndErrors) {
  {
    Body body;
    ir::Value* x = body.op("Add", 14,
                           {body.input("a", DataType::kFloat32, Shape{Dim::symbolic("N"), 1, 5}),
                            body.input("b", DataType::kFloat32, Shape{4, 1})});
    x = body.op("Tanh", 13, {x});
    x->type() = {DataType::kFloat32, Shape::unknown_rank()};
    auto t = infer_kiln("FusedElementwise",
                        {{DataType::kFloat32, Shape{Dim::symbolic("N"), 1, 5}}, {DataType::kFloat32, Shape{4, 1}}},
                        body.attrs(x));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->dtype, DataType::kFloat32);
    EXPECT_EQ(t->shape.to_string(), "[N,4,5]");
  }
  Tensor a = rnd({2, 3}, 1), b = rnd({3}, 2);
  {  // A MatMul is not elementwise.
    Body body;
    ir::Value* x = body.op(
        "MatMul", 13, {body.input("a", DataType::kFloat32, a.shape()), body.input("b", DataType::kFloat32, b.shape())});
    expect_error("FusedElementwise", {a, b}, body.attrs(body.op("Relu", 14, {x})));
  }
  {  // The body takes one input, the node gives two.
    Body body;
    ir::Value* x = body.op("Relu", 14, {body.input("a", DataType::kFloat32, a.shape())});
    expect_error("FusedElementwise", {a, b}, body.attrs(body.op("Neg", 13, {x})));
  }
  {  // Two outputs.
    Body body;
    ir::Value* x = body.op("Relu", 14, {body.input("a", DataType::kFloat32, a.shape())});
    ir::Value* y = body.op("Neg", 13, {x});
    body.g->outputs().push_back(x);
    expect_error("FusedElementwise", {a}, body.attrs(y));
  }
  {  // Inputs that do not broadcast.
    Body body;
    ir::Value* x = body.op(
        "Add", 14, {body.input("a", DataType::kFloat32, a.shape()), body.input("b", DataType::kFloat32, Shape{4})});
    expect_error("FusedElementwise", {a, rnd({4}, 3)}, body.attrs(body.op("Exp", 13, {x})));
  }
  // No body at all.
  EXPECT_TRUE(mentions_node(kiln_error("FusedElementwise", {a}), "FusedElementwise"));
  EXPECT_TRUE(mentions_node(kernel_error("FusedElementwise", {a}), "FusedElementwise"));
}

// ---- independent references (PyTorch 1.13 / NumPy in float64) -------------------------
// Generated by a script kept outside the tree (inputs rounded to 2 decimals).

// clang-format off
TEST(FusedOpsPyTorchTest, FusedConvStridedAsymmetricPadsResidualHardSwish) {
  Tensor conv0 = make<float>({1, 3, 5, 6}, {1.1, -0.24, 1.43, 0.79, -1.62, 1.9, 1.04, 1.14, -1.49, -0.2, -0.52, 1.71, 0.58, 1.29, -0.23, -1.09, 0.22, -1.74, 1.31, 0.53, 1.03, -0.58, 1.88, 1.57, 1.11, -1.22, -0.13, -1.82, -1.38, 0.73, 0.98, 1.87, -0.7, -0.52, -0.12, -1.24, -1.48, -0.1, -1.09, 0.68, -0.25, 1.33, 0.8, -0.75, 1.33, 1.22, -0.45, -0.85, 0.73, -1.44, -1.2, -1.97, 1.15, 0.66, 0.82, 1.12, -0.16, 0.27, -1.44, -1.54, 0.67, -0.12, 0.26, 1.06, 0.54, 0.21, 0.24, -0.78, -1.88, -0.25, -1.14, -0.37, 1.41, -1.06, -1.77, -0.87, -0.83, 0.65, 0.23, 1.14, 0.66, -0.37, 1.26, -1.33, -1.91, -1.64, 0.89, -0.15, -1.35, 0});
  Tensor conv1 = make<float>({4, 3, 3, 3}, {-1.39, 0.79, -0.22, -0.48, -0.79, 0.52, -0.55, -1.65, -1.53, 1.85, 1.63, 0.8, -0.94, 1.88, 1.12, 0.87, -0.2, -0.91, -1.61, 1.61, -0.18, -1.19, -0.78, 0.32, -1.29, 1.43, 1.03, 0.88, -0.27, 0.51, 0.34, 0.6, -1.66, -0.34, -1.83, -0.02, -0.68, -1.42, -1.59, 0.35, -1.32, 1.7, 0.32, -0.61, 0.36, -1.91, 1.83, -0.07, 1.13, -1.67, -0.05, -0.04, 1.75, 0.29, -0.11, -0.93, -0.67, 0.08, -0.24, -1.91, 1.31, 1.58, -1.44, 0.22, -1.57, 0.69, -0.88, 0.64, 0.91, 1.07, -1.57, 1.66, -1.08, -1.85, 0.22, -0.52, 1.32, 1.23, -0.73, 1.81, -0.84, 0.06, -0.98, 1.74, -1.34, -1.82, -0.26, 1.97, 1.57, 0.99, 1.56, 1.57, 0.08, -0.74, 1.09, 0.65, -0.51, -1.62, 0.99, -0.95, 1.75, -1.04, -1.51, 1.32, -1.39, -1.28, 0.4, 1.5});
  Tensor conv2 = make<float>({4}, {-1.21, -0.76, 1.11, 1.89});
  Tensor conv3 = make<float>({1, 4, 3, 3}, {0, -1.42, -1.94, -1.08, -1.47, 0.71, -1.51, 0.03, 0.78, 0.32, -1.2, 1.22, 0.86, 0.96, -1.48, -1.5, 1.71, -0.41, -0.8, -0.05, 0.65, 1.82, -0.85, 1.7, -1.9, 0.22, 0.54, -1.58, -1.44, -0.32, 1.86, 0.38, 1.73, 1.22, -0.13, 1.14});
  expect_tensor(kiln1("FusedConv", {conv0, conv1, conv2, conv3}, {{"strides", attr_ints({2, 2})}, {"pads", attr_ints({1, 0, 1, 2})}, {"activation", attr_s("HardSwish")}}), {1, 4, 3, 3}, {-0, -0, -0, -0, 0.624110427, -0.35896266, 0.224578482, -0, -0.166343798, -0, -0.110441998, -0.374703193, 10.8321, 0.07743096, -0, 3.2659, 2.09374861, -0, -0.268306665, 3.8907, 0.171197682, 1.61726913, -0.36624456, 4.4369, -0.259268518, 4.1119, 0.664667627, -0, -0, -0.232025593, -0.17691066, 17.1378, 10.8044, 5.0925, 1.50693601, 2.787456}, 1e-5, 1e-6);
}

TEST(FusedOpsPyTorchTest, AttentionWithPaddingMask) {
  Tensor attn0 = make<float>({1, 2, 3, 4}, {-1.93, -1.56, 1.32, 1.19, -1.07, 0.12, 0.42, 1.47, 0.41, -0.35, -0.5, -0.3, 0.61, 1.47, -0.18, -1.01, -1.05, 0.98, 1.27, -1.58, -1.73, 0.38, -1.42, 1.3});
  Tensor attn1 = make<float>({1, 2, 5, 4}, {-0.76, -1.42, 1.68, -1.34, -0.86, -1.39, -1.54, -1.92, -1.78, -1.3, -1.79, 0.36, 0.72, -0.43, -0.73, 0.02, 1.5, 1.4, -1.83, -1.27, -1.05, -1, 0.28, -0.33, -1.8, -0.51, 0.1, -1.59, 1.33, -1.79, 1.7, -1.6, 1.37, 1.61, 1.92, 1.21, 1.12, 0.57, 1.12, -1.46});
  Tensor attn2 = make<float>({1, 2, 5, 3}, {0.14, 0.06, 1.43, -0.15, -0.46, 0.56, -0.93, -1.44, -0.09, -0.33, -1.07, -0.53, -0.53, -0.69, -0.48, 0.74, -0.81, 1.8, 1.67, -0.08, -0.69, 0.14, 1.39, 0.61, 1.22, 0.13, 0.53, -0.85, 0.94, -1.19});
  Tensor attn3 = make<float>({1, 1, 1, 5}, {0, -10000, 0, 0, -1.5});
  expect_tensor(kiln1("Attention", {attn0, attn1, attn2, attn3}, {{"scale", attr_f(0.5f)}}), {1, 2, 3, 3}, {-0.293631823, -0.561675698, 0.775952634, -0.602153579, -1.0568705, 0.153615765, -0.439567887, -0.902515781, 0.0324015561, 0.552911131, 0.436319603, 0.304217989, 0.371553871, 0.453405116, 0.601432512, 0.783815737, -0.625674188, 1.57066993}, 1e-5, 1e-6);
}

TEST(FusedOpsPyTorchTest, LayerNormOverLastTwoAxes) {
  Tensor ln0 = make<float>({2, 3, 4}, {0.78, 1.44, -1.47, 0.46, -1.62, 0.9, -1.66, 1.74, -1.45, 1.84, 1.2, 0.37, 1.13, 1.18, 1.78, -0.99, 0.36, -1.62, 0.46, -1.31, 0.26, 0.29, -0.14, 0.09});
  Tensor ln1 = make<float>({3, 4}, {1.06, 1.2, -0.03, 0.4, 1.72, -1.52, -1.53, -1.65, 0.63, -0.33, 1.1, 0.68});
  Tensor ln2 = make<float>({4}, {-0.67, 1.59, 1.05, -0.92});
  expect_tensor(kiln1("LayerNorm", {ln0, ln1, ln2}, {{"axis", attr_i(-2)}}), {2, 3, 4}, {-0.211790078, 2.71024029, 1.08829703, -0.844304668, -3.06164339, 0.79441421, 3.2239307, -2.83627544, -1.46466808, 1.18168191, 1.8763829, -0.837798413, 0.419398306, 2.88458754, 0.999243381, -1.37537057, -0.255534446, 4.29885885, 0.524987024, 1.49790022, -0.582561698, 1.53408342, 0.753089533, -0.943739214}, 1e-5, 1e-6);
}

TEST(FusedOpsPyTorchTest, GeluTanhAndFusedMatMulSilu) {
  Tensor gelu0 = make<float>({7}, {-1.08, -1.48, -2.74, -2.82, 3.48, -0.5, -0.94});
  expect_tensor(kiln1("Gelu", {gelu0}, {{"approximate", attr_s("tanh")}}), {7}, {-0.151456709, -0.102988284, -0.00794525186, -0.00630912439, 3.4793336, -0.15428599, -0.163323754}, 1e-5, 1e-6);
  Tensor mm0 = make<float>({2, 3, 4}, {0.92, 0.21, 1.74, 1.12, -0.08, -0.49, 1.95, 0.87, 1.8, -1.53, 1.4, 0.55, -1.51, 0.35, 0.74, -1.95, -0.18, 1.3, -0.82, -0.17, -0.23, -0.79, 1.67, 1.13});
  Tensor mm1 = make<float>({4, 5}, {-1.56, 1.99, 1.52, -0.86, 1.35, -1.57, 2, 0.66, 0.6, -1.64, 1.59, -1.88, -1.04, -1.43, 1.11, -1.21, 1.64, 0.63, -1.86, -1.98});
  Tensor mm2 = make<float>({5}, {-1.79, 0.42, 1.21, -1.05, 1.4});
  expect_tensor(kiln1("FusedMatMul", {mm0, mm1, mm2}, {{"activation", attr_s("Silu")}}), {2, 3, 5}, {-0.224939292, 0.958131811, 1.37673991, -0.0116781119, 1.77403231, 0.875280187, -0.145970421, -0.234856821, -0.0192929487, 2.35157548, -0.220030833, -0.246327436, 1.57346117, -0.00942535439, 6.79666177, 3.45322533, -0.0099734163, -0.155628758, 2.88752422, 3.36517527, -0.0440984461, 3.84859021, 2.35443292, 1.09607946, -0.27145187, 0.822513795, -0.150871646, -0.229739296, -0.017275865, 1.7631213}, 1e-5, 1e-6);
}
// clang-format on

}  // namespace
}  // namespace kiln::ops::testing
