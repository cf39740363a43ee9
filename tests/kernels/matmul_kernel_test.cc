// The oneDNN matmul kernels (src/kernels/cpu/matmul.cc) against the reference kernels of
// MatMul, Gemm, FusedMatMul and FusedGemm (src/ops, validated against ONNX data) on the shapes
// that hit their edge cases: odd M/N/K, batch broadcasting, 1-D operands, transposes,
// alpha/beta, every broadcast of C / Bias / Z, every activation, constant and fed B, and
// concurrent runs of one prepared kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {
namespace {

using Dims = std::vector<int64_t>;

// An input of the node under test: its dims, whether it is an initializer (constant), or
// omitted (an optional input left out).
struct Operand {
  Dims dims;
  bool constant = false;
  bool omitted = false;
};
Operand fed(Dims d) { return {std::move(d), false, false}; }
Operand constant(Dims d) { return {std::move(d), true, false}; }
Operand omitted() { return {{}, false, true}; }

struct Built {
  std::shared_ptr<ir::Graph> graph;
  ir::Node* node = nullptr;
  std::vector<Tensor>
      inputs;  // undefined for an omitted input; the initializer itself for a constant
  float max_abs_a = 0, max_abs_b = 0;
};

Tensor random_tensor(const Dims& dims, std::mt19937& rng, float lo, float hi) {
  Tensor t = Tensor::make(DataType::kFloat32, dims);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

float max_abs(const Tensor& t) {
  float m = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) m = std::max(m, std::fabs(t.data<float>()[i]));
  return m;
}

// A one-node graph: op(inputs) -> y, typed by the op's own inference. Values are uniform in
// [-1, 1] (seeded, so a failure reproduces).
Built build(const std::string& op, const std::vector<Operand>& operands,
            ir::AttributeMap attrs = {}, unsigned seed = 1) {
  Built b;
  const bool kiln_op = op.rfind("Fused", 0) == 0;
  const std::string domain = kiln_op ? ops::kKilnDomain : ops::kOnnxDomain;
  b.graph = std::make_shared<ir::Graph>("g");
  b.graph->opset_imports()[""] = 17;
  b.graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  std::mt19937 rng(seed);
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& o = operands[i];
    if (o.omitted) {
      ins.push_back(nullptr);
      b.inputs.emplace_back();
      continue;
    }
    ir::Value* v = b.graph->get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(o.dims)};
    Tensor t = random_tensor(o.dims, rng, -1.0f, 1.0f);
    if (o.constant) {
      v->set_initializer(t);  // shares t's storage, as the runtime's constant slots do
    } else {
      b.graph->inputs().push_back(v);
    }
    if (i == 0) b.max_abs_a = max_abs(t);
    if (i == 1) b.max_abs_b = max_abs(t);
    ins.push_back(v);
    b.inputs.push_back(t);
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("mm", op, domain, kiln_op ? ops::kKilnOpset : 17, ins, {y});
  b.node->attrs() = std::move(attrs);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

const KernelFactory* gemm_factory(const ir::Node& node) {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "gemm") return f;
  return nullptr;
}

Expected<Tensor> run_with(const ir::Node& node, const std::vector<Tensor>& inputs,
                          const std::function<Status(ops::KernelContext&)>& fn) {
  std::vector<RuntimeValue> values(inputs.size());
  std::vector<const RuntimeValue*> ptrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].defined()) values[i] = inputs[i];
    ptrs.push_back(inputs[i].defined() ? &values[i] : nullptr);
  }
  std::vector<RuntimeValue> outputs(1);
  ops::KernelContext ctx(node, ptrs, &outputs);
  KILN_RETURN_IF_ERROR(fn(ctx));
  return outputs[0].tensor();
}

Expected<Tensor> run_reference(const ir::Node& node, const std::vector<Tensor>& inputs) {
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  return run_with(node, inputs, schema->kernel_fn());
}

Expected<Tensor> run_kernel(const Kernel& k, const ir::Node& node,
                            const std::vector<Tensor>& inputs) {
  return run_with(node, inputs, [&](ops::KernelContext& ctx) { return k.run(ctx); });
}

// The tolerance: 1e-5 of the largest reference magnitude plus an absolute floor for the
// summation order. oneDNN and the reference GEMM add the K products in different orders
// (blocking, and K split across threads); each result carries up to K roundings of size
// eps * |partial sum|, and with inputs of random sign the partial sums stay near
// sqrt(K) * max|A| * max|B|, so each side is off by about K * eps * max|A| * max|B| (times
// |alpha|). Two sides, and an activation slope of at most 1.13 (Gelu; the others are <= 1),
// give the 2.5 below.
float tolerance(const Tensor& ref, int64_t k, float max_a, float max_b, float alpha) {
  const float eps = std::numeric_limits<float>::epsilon();
  return 1e-5f * max_abs(ref) +
         2.5f * static_cast<float>(k) * eps * max_a * max_b * std::fabs(alpha);
}

void expect_close(const Tensor& got, const Tensor& ref, float tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), DataType::kFloat32) << what;
  ASSERT_EQ(got.dims(), ref.dims()) << what;
  float worst = 0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const float d = std::fabs(got.data<float>()[i] - ref.data<float>()[i]);
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << worst_i << " is " << got.data<float>()[worst_i]
                        << ", reference " << ref.data<float>()[worst_i];
}

// Prepares the oneDNN kernel for b's node (it must take it, on a JIT implementation) and
// checks its output against the reference kernel's.
void expect_matches_reference(const Built& b, int64_t k, float alpha = 1.0f) {
  const ir::Node& node = *b.node;
  const std::string what = node.op_type() + " " + ir::to_text(*b.graph);
  const KernelFactory* f = gemm_factory(node);
  ASSERT_NE(f, nullptr) << what;
  ASSERT_TRUE(f->applicable(node).ok()) << what;
  auto kernel = f->prepare(node);
  ASSERT_TRUE(kernel.ok()) << what << ": " << kernel.status().to_string();
  const std::string impl = (*kernel)->implementation();
  // oneDNN on a JIT implementation, or Kiln's packed GEMM (constant B, enough rows).
  EXPECT_TRUE(impl.rfind("onednn:", 0) == 0 || impl.rfind("kiln:gemm:", 0) == 0) << impl;
  EXPECT_NE(impl.rfind("onednn:ref", 0), 0u) << impl;
  auto ref = run_reference(node, b.inputs);
  ASSERT_TRUE(ref.ok()) << what << ": " << ref.status().to_string();
  auto got = run_kernel(**kernel, node, b.inputs);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  expect_close(*got, *ref, tolerance(*ref, k, b.max_abs_a, b.max_abs_b, alpha),
               what + " [" + impl + "]");
}

ir::AttributeMap gemm_attrs(int ta, int tb, float alpha = 1.0f, float beta = 1.0f) {
  return {{"transA", ir::Attribute::from_int(ta)},
          {"transB", ir::Attribute::from_int(tb)},
          {"alpha", ir::Attribute::from_float(alpha)},
          {"beta", ir::Attribute::from_float(beta)}};
}

ir::AttributeMap with_activation(ir::AttributeMap attrs, const std::string& act,
                                 std::vector<float> params = {}) {
  attrs["activation"] = ir::Attribute::from_string(act);
  if (!params.empty()) attrs["activation_params"] = ir::Attribute::from_floats(std::move(params));
  return attrs;
}

// The activations of docs/fused-ops.md, with parameters where they take some; the second
// Clip (lo > hi) and the second HardSwish have no oneDNN 2.6 post-op and run after the primitive.
struct ActivationCase {
  const char* name;
  std::vector<float> params;
};
const std::vector<ActivationCase> kActivations = {
    {"Relu", {}},
    {"LeakyRelu", {0.1f}},
    {"Clip", {-0.5f, 0.75f}},
    {"Clip", {0.5f, -0.5f}},
    {"Clip", {}},
    {"HardSigmoid", {0.3f, 0.4f}},
    {"HardSigmoid", {}},
    {"HardSwish", {}},
    {"HardSwish", {0.25f, 0.4f}},
    {"Sigmoid", {}},
    {"Tanh", {}},
    {"Silu", {}},
    {"Gelu", {}},
    {"GeluTanh", {}},
};

// ---- MatMul ------------------------------------------------------------------------

TEST(OnednnMatMulKernel, TwoDOddSizes) {
  const int64_t sizes[][3] = {{1, 1, 1},    {3, 17, 65},  {17, 769, 3}, {65, 3, 769},
                              {1, 769, 65}, {769, 17, 1}, {65, 65, 17}, {3, 1, 3}};
  for (const auto& s : sizes)
    for (bool cb : {false, true}) {
      const int64_t m = s[0], k = s[1], n = s[2];
      Built b = build("MatMul", {fed({m, k}), cb ? constant({k, n}) : fed({k, n})});
      expect_matches_reference(b, k);
    }
}

TEST(OnednnMatMulKernel, BatchedAndBroadcastBatch) {
  struct Case {
    Dims a, b;
  };
  const Case cases[] = {
      {{4, 17, 65}, {65, 33}},           // B without batch: A's batch folds into M
      {{4, 17, 65}, {4, 65, 33}},        // same batch
      {{1, 17, 65}, {4, 65, 33}},        // A broadcast
      {{4, 17, 65}, {1, 65, 33}},        // B broadcast
      {{17, 65}, {3, 65, 5}},            // A without batch
      {{2, 1, 17, 65}, {1, 3, 65, 5}},   // both broadcast, in different dims
      {{2, 3, 17, 65}, {3, 65, 5}},      // ranks differ
      {{2, 3, 1, 65}, {65, 769}},        // M = 1 with batch
      {{1, 3, 16, 8}, {1, 3, 8, 16}},    // attention-like scores
      {{2, 1, 3, 17, 9}, {3, 1, 9, 4}},  // 5-D
  };
  for (const Case& c : cases)
    for (bool cb : {false, true}) {
      Built b = build("MatMul", {fed(c.a), cb ? constant(c.b) : fed(c.b)}, {}, 7);
      expect_matches_reference(b, c.a.back());
    }
}

TEST(OnednnMatMulKernel, OneDOperands) {
  struct Case {
    Dims a, b;
  };
  const Case cases[] = {
      {{65}, {65, 17}},    {{17, 65}, {65}},    {{65}, {65}},
      {{65}, {2, 65, 17}}, {{2, 17, 65}, {65}}, {{769}, {769, 3}},
  };
  for (const Case& c : cases)
    for (bool cb : {false, true}) {
      Built b = build("MatMul", {fed(c.a), cb ? constant(c.b) : fed(c.b)}, {}, 3);
      expect_matches_reference(b, c.a.back());
    }
}

// ---- Gemm --------------------------------------------------------------------------

TEST(OnednnGemmKernel, TransposesAlphaBetaAndEveryC) {
  const int64_t m = 17, k = 65, n = 33;
  const std::vector<Operand> cs = {omitted(),     fed({}),         fed({1}),    fed({n}),
                                   fed({1, n}),   fed({m, 1}),     fed({m, n}), fed({1, 1}),
                                   constant({n}), constant({m, n})};
  const float alpha_beta[][2] = {
      {1.0f, 1.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}, {1.0f, 0.0f}, {1.0f, -0.25f}};
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool cb : {false, true})
        for (const Operand& c : cs)
          for (const auto& ab : alpha_beta) {
            const Dims a_dims = ta ? Dims{k, m} : Dims{m, k};
            const Dims b_dims = tb ? Dims{n, k} : Dims{k, n};
            std::vector<Operand> ops = {fed(a_dims), cb ? constant(b_dims) : fed(b_dims)};
            if (!c.omitted) ops.push_back(c);
            Built b = build("Gemm", ops, gemm_attrs(ta, tb, ab[0], ab[1]), 11);
            expect_matches_reference(b, k, ab[0]);
          }
}

TEST(OnednnGemmKernel, OddSizes) {
  const int64_t sizes[][3] = {
      {1, 769, 1}, {1, 2048, 1000}, {3, 1, 65}, {769, 17, 3}, {65, 769, 17}};
  for (const auto& s : sizes)
    for (int tb = 0; tb < 2; ++tb) {
      const int64_t m = s[0], k = s[1], n = s[2];
      Built b = build("Gemm", {fed({m, k}), constant(tb ? Dims{n, k} : Dims{k, n}), constant({n})},
                      gemm_attrs(0, tb), 5);
      expect_matches_reference(b, k);
    }
}

// ---- FusedMatMul ---------------------------------------------------------------------

TEST(OnednnFusedMatMulKernel, BiasAndResidualShapes) {
  struct Case {
    Dims a, b;
    Operand bias, z;
  };
  const Case cases[] = {
      {{2, 17, 65}, {65, 33}, constant({33}), fed({2, 17, 33})},  // BERT's projection + residual
      {{2, 17, 65}, {65, 33}, constant({33}), omitted()},
      {{2, 17, 65}, {65, 33}, fed({1, 33}), fed({17, 33})},    // Z repeats along the batch
      {{2, 17, 65}, {65, 33}, fed({17, 1}), fed({2, 1, 33})},  // Bias along M, Z along batch and N
      {{2, 17, 65}, {2, 65, 33}, fed({2, 17, 1}), fed({1, 1, 1})},
      {{2, 17, 65}, {1, 65, 33}, constant({1, 17, 33}), fed({2, 17, 33})},
      {{17, 65}, {65, 33}, fed({17, 33}), fed({33})},
      {{65}, {65, 33}, constant({33}), fed({33})},  // 1-D A: Y is [N]
      {{17, 65}, {65}, fed({17}), fed({1})},        // 1-D B: Y is [M]
      {{3, 1, 65}, {65, 769}, constant({769}), fed({3, 1, 769})},
  };
  for (const Case& c : cases)
    for (bool cb : {false, true}) {
      Built b =
          build("FusedMatMul", {fed(c.a), cb ? constant(c.b) : fed(c.b), c.bias, c.z}, {}, 13);
      expect_matches_reference(b, c.a.back());
    }
}

TEST(OnednnFusedMatMulKernel, EveryActivation) {
  for (const ActivationCase& act : kActivations)
    for (bool with_z : {false, true}) {
      std::vector<Operand> ops = {fed({2, 17, 65}), constant({65, 33}), constant({33})};
      if (with_z) ops.push_back(fed({2, 17, 33}));
      Built b = build("FusedMatMul", ops, with_activation({}, act.name, act.params), 17);
      expect_matches_reference(b, 65);
    }
}

// Each activation elementwise, on a sweep of pre-activation values over [-9, 9] in steps of
// 0.0044 (Gelu's and Sigmoid's tails, Clip's and HardSigmoid's corners). With K = 1 and B
// holding 1, -1 and 0.5 the products are exact, so both sides feed the activation the same
// values and the comparison sees the activation alone and can be elementwise: 1e-5 of each
// value plus 1e-7 absolute, the rounding of results of magnitude about 1 (float spacing near 1
// is 1.2e-7 above, 6e-8 below); Gelu within the SIMD Gelu kernel's bound. An approximation that drifts in a tail (oneDNN 2.6's gelu_erf
// is off by 2e-4 of the value near x = -3.3) fails here even though it stays far below 1e-5 of
// the largest output.
TEST(OnednnFusedMatMulKernel, EveryActivationElementwise) {
  constexpr int64_t kSteps = 4096;
  for (const ActivationCase& act : kActivations) {
    Built b = build("FusedMatMul", {fed({kSteps, 1}), constant({1, 3})},
                    with_activation({}, act.name, act.params), 31);
    for (int64_t i = 0; i < kSteps; ++i)
      b.inputs[0].data<float>()[i] = -9.0f + 18.0f * static_cast<float>(i) / (kSteps - 1);
    // The initializer shares this storage: the kernel reads these values.
    float* w = b.inputs[1].data<float>();
    w[0] = 1.0f;
    w[1] = -1.0f;
    w[2] = 0.5f;
    const KernelFactory* f = gemm_factory(*b.node);
    ASSERT_NE(f, nullptr);
    auto kernel = f->prepare(*b.node);
    ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
    auto ref = run_reference(*b.node, b.inputs);
    auto got = run_kernel(**kernel, *b.node, b.inputs);
    ASSERT_TRUE(ref.ok() && got.ok());
    // Gelu runs on the SIMD Gelu kernel's code (gelu.h), whose erf / tanh approximations
    // carry that kernel's bound (tests/kernels/norm_kernel_test.cc): 0.5 |x| K eps + 2 eps |y|
    // with K = 7.5 (erf) or 6 (tanh), x the product (exact here: w is 1, -1 or 0.5).
    const bool gelu = std::string(act.name).rfind("Gelu", 0) == 0;
    const float k_eps = std::string(act.name) == "Gelu" ? 7.5f : 6.0f;
    const float eps = std::numeric_limits<float>::epsilon();
    for (int64_t i = 0; i < ref->num_elements(); ++i) {
      const float r = ref->data<float>()[i], g = got->data<float>()[i];
      const float x = b.inputs[0].data<float>()[i / 3] * w[i % 3];
      const float bound = gelu ? 0.5f * std::fabs(x) * k_eps * eps + 2.0f * eps * std::fabs(r)
                               : 1e-5f * std::fabs(r) + 1e-7f;
      ASSERT_LE(std::fabs(g - r), bound)
          << act.name << " element " << i << ": " << g << ", reference " << r << " ["
          << (*kernel)->implementation() << "]";
    }
  }
}

// ---- FusedGemm -----------------------------------------------------------------------

TEST(OnednnFusedGemmKernel, EveryActivationWithAlphaBetaAndTransposes) {
  const int64_t m = 17, k = 65, n = 33;
  for (const ActivationCase& act : kActivations)
    for (int t = 0; t < 2; ++t) {
      const float alpha = t ? 0.75f : 1.0f, beta = t ? 1.5f : 1.0f;
      Built b = build(
          "FusedGemm",
          {fed(t ? Dims{k, m} : Dims{m, k}), constant(t ? Dims{n, k} : Dims{k, n}), constant({n})},
          with_activation(gemm_attrs(t, t, alpha, beta), act.name, act.params), 19);
      expect_matches_reference(b, k, alpha);
    }
}

TEST(OnednnFusedGemmKernel, CShapes) {
  const int64_t m = 3, k = 769, n = 65;
  for (const Operand& c : {fed({}), fed({m, 1}), fed({m, n}), omitted()}) {
    std::vector<Operand> ops = {fed({m, k}), fed({k, n})};
    if (!c.omitted) ops.push_back(c);
    Built b = build("FusedGemm", ops, with_activation(gemm_attrs(0, 0, 2.0f, 0.5f), "Tanh"), 23);
    expect_matches_reference(b, k, 2.0f);
  }
}

// ---- Kiln's packed GEMM (constant B, at least 6 rows) ------------------------------------

// Prepares b's node and checks that the packed GEMM took it.
// Forces the packed-GEMM route (matmul.cc: AVX-512 CPUs otherwise take oneDNN's brgemm
// matmul) while alive, so the route is tested on every CPU.
class ForcePackedGemm {
 public:
  ForcePackedGemm() { setenv("KILN_PACKED_GEMM", "1", 1); }
  ~ForcePackedGemm() { unsetenv("KILN_PACKED_GEMM"); }
};

void expect_packed_gemm(const Built& b) {
  const KernelFactory* f = gemm_factory(*b.node);
  ASSERT_NE(f, nullptr);
  auto kernel = f->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  EXPECT_EQ((*kernel)->implementation().rfind("kiln:gemm:", 0), 0u)
      << (*kernel)->implementation() << " for " << ir::to_text(*b.graph);
}

// The blocking's edges: row tiles of 6 and M blocks of 192 rows (M = 7, 197), K blocks of 256
// (or 128 on AVX-512) with a short last one (K = 257, 769), panels of 16 (or 32) columns with a
// short last one (N = 1, 17, 33), and the epilogue: bias, residual, activation.
TEST(PackedGemmKernel, BlockEdgesWithBiasResidualAndGelu) {
  ForcePackedGemm packed;
  const int64_t sizes[][3] = {{6, 1, 1},     {7, 17, 16},   {197, 257, 33},
                              {13, 769, 17}, {64, 129, 65}, {6, 3, 769}};
  for (const auto& s : sizes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<Operand> ops = {fed({m, k}), constant({k, n})};
      ir::AttributeMap attrs;
      if (variant >= 1) ops.push_back(constant({n}));
      if (variant == 2) {
        ops.push_back(fed({m, n}));
        attrs = with_activation({}, "Gelu");
      }
      Built b = build(variant == 0 ? "MatMul" : "FusedMatMul", ops, attrs, 29);
      expect_packed_gemm(b);
      expect_matches_reference(b, k);
    }
  }
}

// Gemm's transB (packing through strides), alpha, and beta * C as a row or a full term; batch
// dims of A folded into M.
TEST(PackedGemmKernel, GemmTransposedBAlphaBetaAndFoldedBatch) {
  ForcePackedGemm packed;
  const int64_t m = 23, k = 300, n = 37;
  for (const Operand& c : {constant({n}), fed({1, n}), fed({m, n})}) {
    Built b = build("FusedGemm", {fed({m, k}), constant({n, k}), c},
                    with_activation(gemm_attrs(0, 1, 0.75f, 1.5f), "Relu"), 31);
    expect_packed_gemm(b);
    expect_matches_reference(b, k, 0.75f);
  }
  Built folded = build("FusedMatMul", {fed({3, 5, 2, k}), constant({k, n}), constant({n})}, {}, 37);
  expect_packed_gemm(folded);
  expect_matches_reference(folded, k);
}

// The activation's post-affine (docs/fused-ops.md) on both routes: the packed GEMM (constant
// B) and oneDNN (fed B), after an activation oneDNN runs as a post-op and after Gelu (run
// after the product).
TEST(PackedGemmKernel, ActivationPostAffine) {
  ForcePackedGemm packed;
  for (const char* act : {"HardSwish", "Gelu"})
    for (bool cb : {true, false}) {
      ir::AttributeMap attrs = with_activation({}, act);
      attrs["activation_post_scale"] = ir::Attribute::from_float(1.25f);
      attrs["activation_post_shift"] = ir::Attribute::from_float(-0.5f);
      Built b = build("FusedMatMul", {fed({13, 40}), cb ? constant({40, 21}) : fed({40, 21}),
                                      constant({21})},
                      attrs, 41);
      expect_matches_reference(b, 40, 1.25f);
    }
}

// ---- Preparation and runs ----------------------------------------------------------------

// precision "bf16": oneDNN's bf16 matmul (A converted per run, B packed as bf16 at prepare)
// against the reference, which rounds A and B the same way and sums in float32: the same
// tolerance as float32. Batched and folded A, transposed A and B, alpha / beta, every addend
// route, activations; skipped where oneDNN has no bf16 matmul. A fed B is not taken.
TEST(OnednnMatMulKernel, Bf16MatchesTheReference) {
  auto bf16 = [](ir::AttributeMap a) {
    a["precision"] = ir::Attribute::from_string("bf16");
    return a;
  };
  const std::vector<std::pair<Built, int64_t>> cases = {
      {build("FusedMatMul", {fed({7, 33}), constant({33, 17})}, bf16({}), 41), 33},
      {build("FusedMatMul", {fed({2, 3, 65}), constant({65, 40}), constant({40}), fed({2, 3, 40})},
             bf16(with_activation({}, "Gelu")), 43),
       65},
      {build("FusedMatMul", {fed({128, 96}), constant({96, 300}), constant({300})}, bf16(with_activation({}, "Relu")), 45),
       96},
      {build("FusedGemm", {fed({40, 23}), constant({19, 40}), fed({23, 19})},
             bf16(with_activation(gemm_attrs(1, 1, 0.5f, 2.0f), "Sigmoid")), 47),
       40},
      {build("FusedGemm", {fed({1, 64}), constant({64, 10}), constant({10})}, bf16(gemm_attrs(0, 0)), 49), 64},
  };
  for (const auto& [b, k] : cases) {
    const KernelFactory* f = gemm_factory(*b.node);
    ASSERT_NE(f, nullptr);
    ASSERT_TRUE(f->applicable(*b.node).ok());
    auto kernel = f->prepare(*b.node);
    if (!kernel.ok()) GTEST_SKIP() << "no oneDNN bf16 matmul on this CPU: " << kernel.status().to_string();
    EXPECT_EQ((*kernel)->implementation().find("kiln:gemm"), std::string::npos) << "the packed GEMM is float32";
    expect_matches_reference(b, k, b.node->attr_float("alpha", 1.0f));
  }
  Built fed_b = build("FusedMatMul", {fed({7, 33}), fed({33, 17})}, bf16({}), 51);
  EXPECT_FALSE(gemm_factory(*fed_b.node)->applicable(*fed_b.node).ok());
}

TEST(OnednnMatMulKernel, NotApplicable) {
  const KernelFactory* f = gemm_factory(*build("MatMul", {fed({2, 3}), fed({3, 4})}).node);
  ASSERT_NE(f, nullptr);
  // float64
  {
    Built b = build("MatMul", {fed({2, 3}), fed({3, 4})});
    for (ir::Value* v : b.node->inputs()) v->type().dtype = DataType::kFloat64;
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  // a dynamic dim
  {
    Built b = build("MatMul", {fed({2, 3}), fed({3, 4})});
    b.node->input(0)->type().shape = Shape({Dim(), Dim(3)});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  // an empty dim
  EXPECT_FALSE(f->applicable(*build("MatMul", {fed({0, 3}), fed({3, 4})}).node).ok());
  // inner dims that differ (the reference kernel reports the error)
  {
    Built b = build("MatMul", {fed({2, 3}), fed({3, 4})});
    b.node->input(1)->type().shape = Shape::from_static({5, 4});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
}

// A constant B that a caller replaces (feeding the graph input it initializes) or inputs of
// other shapes than prepared: the kernel runs the reference kernel instead.
TEST(OnednnMatMulKernel, InputsOtherThanPreparedRunTheReference) {
  Built b = build("FusedMatMul", {fed({2, 17, 65}), constant({65, 33}), constant({33})},
                  with_activation({}, "Relu"));
  auto kernel = gemm_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  std::mt19937 rng(29);
  std::vector<Tensor> other = b.inputs;
  other[1] = random_tensor({65, 33}, rng, -1.0f, 1.0f);  // same shape, other storage
  auto ref = run_reference(*b.node, other);
  auto got = run_kernel(**kernel, *b.node, other);
  ASSERT_TRUE(ref.ok() && got.ok());
  expect_close(*got, *ref, 0.0f, "replaced constant B");
  other = b.inputs;
  other[0] = random_tensor({3, 17, 65}, rng, -1.0f, 1.0f);  // another batch
  ref = run_reference(*b.node, other);
  got = run_kernel(**kernel, *b.node, other);
  ASSERT_TRUE(ref.ok() && got.ok());
  expect_close(*got, *ref, 0.0f, "other A shape");
}

// One prepared kernel run from several threads at once (GraphExecutor does so): each
// thread's results must match the reference on its own inputs.
TEST(OnednnMatMulKernel, ConcurrentRuns) {
  Built b = build("FusedMatMul",
                  {fed({4, 33, 65}), constant({65, 129}), constant({129}), fed({4, 33, 129})},
                  with_activation({}, "Gelu"));
  auto kernel = gemm_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  const Kernel& k = **kernel;
  constexpr int kThreads = 4, kRuns = 25;
  std::vector<std::vector<Tensor>> inputs(kThreads, b.inputs);
  std::vector<Tensor> refs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937 rng(100 + t);
    inputs[t][0] = random_tensor({4, 33, 65}, rng, -1.0f, 1.0f);
    inputs[t][3] = random_tensor({4, 33, 129}, rng, -1.0f, 1.0f);
    auto r = run_reference(*b.node, inputs[t]);
    ASSERT_TRUE(r.ok());
    refs[t] = *r;
  }
  std::vector<float> worst(kThreads, 0.0f);
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRuns; ++i) {
        auto got = run_kernel(k, *b.node, inputs[t]);
        if (!got.ok()) {
          ++failures[t];
          continue;
        }
        for (int64_t e = 0; e < refs[t].num_elements(); ++e)
          worst[t] =
              std::max(worst[t], std::fabs(got->data<float>()[e] - refs[t].data<float>()[e]));
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0);
    EXPECT_LE(worst[t], tolerance(refs[t], 65, 1.0f, 1.0f, 1.0f)) << "thread " << t;
  }
}

}  // namespace
}  // namespace kiln::kernels
