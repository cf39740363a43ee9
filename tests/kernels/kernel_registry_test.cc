// The kernel registry: candidates in priority order, selection falling back past factories
// that do not apply or fail to prepare, the process-wide override of KILN_KERNELS, and the
// GraphExecutor running the kernel selection prepared (once, at prepare; in subgraphs too;
// from several threads at once), and the reasons the plan gives for a reference fallback
// (each factory's refusal, on real ops compiled from ONNX text). The executor tests use an op
// of a test domain registered here, with a reference kernel and test kernels that count
// their preparations and runs.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"
#include "runtime/graph_executor.h"

namespace kiln::kernels {
namespace {

constexpr const char* kTestDomain = "test.kernels";

// y = x + 1 for float32 tensors: the reference kernel of the test op and its fast kernel
// compute the same thing, so a run is right either way; counters tell which one ran.
Status add_one(ops::KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DataType::kFloat32)
    return invalid_argument("node %s: input must be a float32 tensor", ctx.node().label().c_str());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, x->dims()));
  for (int64_t i = 0; i < x->num_elements(); ++i) y->data<float>()[i] = x->data<float>()[i] + 1.0f;
  return ok_status();
}

std::atomic<int> reference_runs{0};

KILN_REGISTER_OP(ops::OpSchema("AddOne", kTestDomain).since(1).inputs(1, 1).outputs(1, 1).kernel([](ops::KernelContext& ctx) {
  reference_runs.fetch_add(1);
  return add_one(ctx);
}));
// An op with no fast kernel at all.
KILN_REGISTER_OP(ops::OpSchema("AddOneReferenceOnly", kTestDomain).since(1).inputs(1, 1).outputs(1, 1).kernel(add_one));

class CountingKernel : public Kernel {
 public:
  CountingKernel(std::string impl, std::atomic<int>* runs, bool fail = false)
      : impl_(std::move(impl)), runs_(runs), fail_(fail) {}
  Status run(ops::KernelContext& ctx) const override {
    runs_->fetch_add(1);
    if (fail_) return internal_error("kernel failed on purpose");
    return add_one(ctx);
  }
  std::string implementation() const override { return impl_; }

 private:
  std::string impl_;
  std::atomic<int>* runs_;
  bool fail_;
};

// The factories of AddOne: "fast" (priority 100) applies to nodes whose name does not start
// with "slow"; "fallback" (priority 10) applies to everything. Registered lowest first, so
// that the order comes from the priorities, not from registration.
std::atomic<int> fast_prepares{0}, fast_runs{0}, fallback_prepares{0}, fallback_runs{0};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

KILN_REGISTER_KERNEL((KernelFactory{
    .domain = kTestDomain, .op_type = "AddOne", .device = DeviceKind::kCpu, .priority = 10, .name = "fallback",
    .applicable = [](const ir::Node&) { return ok_status(); },
    .prepare = [](const ir::Node&) -> Expected<std::unique_ptr<Kernel>> {
      fallback_prepares.fetch_add(1);
      return std::unique_ptr<Kernel>(new CountingKernel("fallback:test", &fallback_runs));
    }}));
KILN_REGISTER_KERNEL((KernelFactory{
    .domain = kTestDomain, .op_type = "AddOne", .device = DeviceKind::kCpu, .priority = 100, .name = "fast",
    .applicable = [](const ir::Node& n) -> Status {
      if (starts_with(n.name(), "slow")) return unsupported("node %s: its name starts with 'slow'", n.label().c_str());
      return ok_status();
    },
    .prepare = [](const ir::Node& n) -> Expected<std::unique_ptr<Kernel>> {
      fast_prepares.fetch_add(1);
      // A node named "unpreparable*" makes prepare fail: selection moves on.
      if (starts_with(n.name(), "unpreparable")) return unsupported("node %s: cannot prepare", n.label().c_str());
      // A node named "broken*" gets a kernel whose run fails.
      return std::unique_ptr<Kernel>(new CountingKernel("fast:test", &fast_runs, starts_with(n.name(), "broken")));
    }}));

void reset_counters() {
  for (auto* c : {&reference_runs, &fast_prepares, &fast_runs, &fallback_prepares, &fallback_runs}) c->store(0);
}

ir::Value* float_value(ir::Graph& g, const std::string& name, Shape s) {
  ir::Value* v = g.get_or_add_value(name);
  v->type() = ir::TensorType{DataType::kFloat32, std::move(s)};
  return v;
}

// x[4] -> AddOne(names[0]) -> AddOne(names[1]) -> ... -> y[4].
std::shared_ptr<ir::Graph> chain(const std::vector<std::string>& names, const std::string& op = "AddOne") {
  auto g = std::make_shared<ir::Graph>("chain");
  g->opset_imports()[""] = 17;
  g->opset_imports()[kTestDomain] = 1;
  ir::Value* x = float_value(*g, "x", Shape{4});
  g->inputs() = {x};
  ir::Value* prev = x;
  for (size_t i = 0; i < names.size(); ++i) {
    ir::Value* out = float_value(*g, i + 1 == names.size() ? std::string("y") : str_format("t%zu", i), Shape{4});
    g->add_node(names[i], op, kTestDomain, 1, {prev}, {out});
    prev = out;
  }
  g->outputs() = {prev};
  return g;
}

Expected<std::vector<float>> run_once(const rt::GraphExecutor& ex, std::vector<float> x) {
  std::vector<RuntimeValue> outputs;
  KILN_RETURN_IF_ERROR(ex.run({{"x", RuntimeValue(Tensor::from_vector<float>(x))}}, &outputs));
  const Tensor& y = outputs.at(0).tensor();
  return std::vector<float>(y.data<float>(), y.data<float>() + y.num_elements());
}

class KernelRegistryTest : public ::testing::Test {
 protected:
  // Fast kernels on whatever KILN_KERNELS the tests run under; each test that turns them
  // off says so.
  void SetUp() override {
    set_fast_kernels_enabled(true);
    reset_counters();
  }
  void TearDown() override { reset_fast_kernels_enabled(); }
};

TEST_F(KernelRegistryTest, CandidatesComeInPriorityOrder) {
  auto c = KernelRegistry::instance().candidates(kTestDomain, "AddOne", DeviceKind::kCpu);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]->name, "fast");
  EXPECT_EQ(c[0]->priority, 100);
  EXPECT_EQ(c[1]->name, "fallback");
  EXPECT_TRUE(KernelRegistry::instance().candidates(kTestDomain, "AddOneReferenceOnly", DeviceKind::kCpu).empty());
  EXPECT_TRUE(KernelRegistry::instance().candidates("", "AddOne", DeviceKind::kCpu).empty());
}

TEST_F(KernelRegistryTest, EqualPrioritiesKeepRegistrationOrder) {
  KernelRegistry& reg = KernelRegistry::instance();
  static const bool registered = [&reg] {  // once, also under --gtest_repeat
    for (const char* name : {"first", "second", "third"})
      reg.add(KernelFactory{.domain = kTestDomain, .op_type = "TieBreak", .priority = 5, .name = name,
                            .applicable = nullptr, .prepare = nullptr});
    reg.add(KernelFactory{.domain = kTestDomain, .op_type = "TieBreak", .priority = 6, .name = "top",
                          .applicable = nullptr, .prepare = nullptr});
    return true;
  }();
  ASSERT_TRUE(registered);
  auto c = reg.candidates(kTestDomain, "TieBreak", DeviceKind::kCpu);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0]->name, "top");
  EXPECT_EQ(c[1]->name, "first");
  EXPECT_EQ(c[2]->name, "second");
  EXPECT_EQ(c[3]->name, "third");
}

TEST_F(KernelRegistryTest, SelectsTheHighestPriorityKernelThatApplies) {
  auto g = chain({"a"});
  const ir::Node& n = *g->nodes()[0];
  std::unique_ptr<Kernel> k = select_kernel(n);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->implementation(), "fast:test");
  EXPECT_EQ(planned_implementation(n), "fast");
  EXPECT_EQ(fast_prepares.load(), 1);
  EXPECT_EQ(fallback_prepares.load(), 0);  // the first success ends the search
}

TEST_F(KernelRegistryTest, FallsBackWhenNotApplicable) {
  auto g = chain({"slow_node"});
  const ir::Node& n = *g->nodes()[0];
  std::unique_ptr<Kernel> k = select_kernel(n);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->implementation(), "fallback:test");
  EXPECT_EQ(fast_prepares.load(), 0);  // `applicable` said no: prepare is not tried
  const KernelPlan plan = plan_kernel(n);
  EXPECT_EQ(plan.implementation, "fallback");
  EXPECT_EQ(plan.reason, "");  // a higher-priority refusal is no reason when a fast kernel runs
}

TEST_F(KernelRegistryTest, FallsBackWhenPrepareFails) {
  auto g = chain({"unpreparable_node"});
  const ir::Node& n = *g->nodes()[0];
  std::unique_ptr<Kernel> k = select_kernel(n);
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->implementation(), "fallback:test");
  EXPECT_EQ(fast_prepares.load(), 1);
  EXPECT_EQ(fallback_prepares.load(), 1);
  // The plan looks at `applicable` only (nothing is prepared for the compile report).
  EXPECT_EQ(planned_implementation(n), "fast");
}

TEST_F(KernelRegistryTest, NoKernelMeansReference) {
  auto g = chain({"a"}, "AddOneReferenceOnly");
  EXPECT_EQ(select_kernel(*g->nodes()[0]), nullptr);
  EXPECT_EQ(planned_implementation(*g->nodes()[0]), "reference");
  EXPECT_EQ(plan_kernel(*g->nodes()[0]).reason, "no fast kernel for this op");

  // Every factory refusing: the reference kernel too.
  static const bool registered = [] {  // once, also under --gtest_repeat
    KernelRegistry::instance().add(KernelFactory{
        .domain = kTestDomain, .op_type = "AddOneRefused", .priority = 1, .name = "never",
        .applicable = [](const ir::Node&) { return unsupported("refuses every node"); },
        .prepare = [](const ir::Node&) -> Expected<std::unique_ptr<Kernel>> { return unsupported("unreachable"); }});
    return true;
  }();
  ASSERT_TRUE(registered);
  auto g2 = chain({"a"}, "AddOneRefused");
  EXPECT_EQ(select_kernel(*g2->nodes()[0]), nullptr);
  const KernelPlan plan = plan_kernel(*g2->nodes()[0]);
  EXPECT_EQ(plan.implementation, "reference");
  EXPECT_EQ(plan.reason, "never: refuses every node");  // the factory's name and its refusal
}

// The graph of a model in ONNX text syntax compiled at -O0 (no fusion: the nodes stay as written).
std::shared_ptr<ir::Graph> compile_onnx_text(const char* text) {
  onnx::ModelProto m;
  auto st = onnx::OnnxParser::Parse(m, text);
  EXPECT_TRUE(st.IsOK()) << st.ErrorMessage();
  const std::string bytes = m.SerializeAsString();
  compiler::CompileOptions options;
  options.passes.opt_level = 0;
  auto compiled = compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "refusals.onnx", options);
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  return compiled.ok() ? compiled->graph : nullptr;
}

// The plan of the graph's only node of `op_type`.
KernelPlan plan_of(const ir::Graph& g, const std::string& op_type) {
  for (const auto& n : g.nodes())
    if (n->op_type() == op_type) return plan_kernel(*n);
  ADD_FAILURE() << "no " << op_type << " node";
  return {};
}

// Each reference fallback names the refusing kernel and the real cause, not a generic "no
// fast kernel accepts its dtypes, shapes or attributes".
TEST_F(KernelRegistryTest, PlanSaysWhyEachFastKernelRefuses) {
  // A Conv whose weights are a graph input, not an initializer: oneDNN packs them at prepare.
  auto conv = compile_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    fed_weights (float[1, 3, 8, 8] x, float[4, 3, 3, 3] w) => (float[1, 4, 6, 6] y) {
      y = Conv(x, w)
    }
  )");
  ASSERT_TRUE(conv);
  KernelPlan plan = plan_of(*conv, "Conv");
  EXPECT_EQ(plan.implementation, "reference");
  EXPECT_EQ(plan.reason, "onednn: W is not constant (not an initializer)");
  EXPECT_FALSE(plan.shape_related);

  // A MatMul in int64: the GEMM is float32 only.
  auto matmul = compile_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    int_matmul (int64[2, 3] a, int64[3, 4] b) => (int64[2, 4] y) {
      y = MatMul(a, b)
    }
  )");
  ASSERT_TRUE(matmul);
  plan = plan_of(*matmul, "MatMul");
  EXPECT_EQ(plan.implementation, "reference");
  EXPECT_EQ(plan.reason, "gemm: A dtype int64: only float32");

  // A LayerNormalization whose stash_type asks for a float64 accumulation.
  auto layernorm = compile_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    stash_double (float[2, 8] x, float[8] scale, float[8] bias) => (float[2, 8] y) {
      y = LayerNormalization <axis = -1, stash_type = 11> (x, scale, bias)
    }
  )");
  ASSERT_TRUE(layernorm);
  plan = plan_of(*layernorm, "LayerNormalization");
  EXPECT_EQ(plan.implementation, "reference");
  EXPECT_EQ(plan.reason, "simd: stash_type 11: only 1 (float32)");
}

TEST_F(KernelRegistryTest, OverrideTurnsFastKernelsOffAndOn) {
  auto g = chain({"a"});
  const ir::Node& n = *g->nodes()[0];
  set_fast_kernels_enabled(false);
  EXPECT_FALSE(fast_kernels_enabled());
  EXPECT_EQ(select_kernel(n), nullptr);
  EXPECT_EQ(planned_implementation(n), "reference");
  EXPECT_EQ(fast_prepares.load() + fallback_prepares.load(), 0);
  set_fast_kernels_enabled(true);
  EXPECT_TRUE(fast_kernels_enabled());
  ASSERT_NE(select_kernel(n), nullptr);
  EXPECT_EQ(planned_implementation(n), "fast");
}

TEST_F(KernelRegistryTest, ExecutorPreparesOnceAndRunsTheSelectedKernels) {
  auto g = chain({"a", "slow_b", "unpreparable_c"});
  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ASSERT_EQ((*ex)->num_steps(), 3u);
  EXPECT_EQ((*ex)->implementation(0), "fast:test");
  EXPECT_EQ((*ex)->implementation(1), "fallback:test");
  EXPECT_EQ((*ex)->implementation(2), "fallback:test");
  EXPECT_EQ((*ex)->step_node(1).name(), "slow_b");
  const int fast_prepared = fast_prepares.load(), fallback_prepared = fallback_prepares.load();
  EXPECT_EQ(fast_prepared, 2);      // a, unpreparable_c (which failed)
  EXPECT_EQ(fallback_prepared, 2);  // slow_b, unpreparable_c

  constexpr int kRuns = 5;
  for (int r = 0; r < kRuns; ++r) {
    auto y = run_once(**ex, {0.5f, -1.0f, 2.0f, static_cast<float>(r)});
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(*y, (std::vector<float>{3.5f, 2.0f, 5.0f, static_cast<float>(r) + 3.0f}));
  }
  EXPECT_EQ(fast_prepares.load(), fast_prepared);  // nothing is prepared at run time
  EXPECT_EQ(fallback_prepares.load(), fallback_prepared);
  EXPECT_EQ(fast_runs.load(), kRuns);
  EXPECT_EQ(fallback_runs.load(), 2 * kRuns);
  EXPECT_EQ(reference_runs.load(), 0);
}

TEST_F(KernelRegistryTest, ExecutorRunsReferenceKernelsWhenFastKernelsAreOff) {
  set_fast_kernels_enabled(false);
  auto ex = rt::GraphExecutor::create(chain({"a", "b"}));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ((*ex)->implementation(0), "reference");
  EXPECT_EQ((*ex)->implementation(1), "reference");
  // The override is read at prepare: turning fast kernels back on changes nothing for an
  // executor already prepared.
  set_fast_kernels_enabled(true);
  auto y = run_once(**ex, {1, 2, 3, 4});
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  EXPECT_EQ(*y, (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(reference_runs.load(), 2);
  EXPECT_EQ(fast_runs.load() + fallback_runs.load() + fast_prepares.load() + fallback_prepares.load(), 0);
}

TEST_F(KernelRegistryTest, ExecutorSelectsKernelsInSubgraphs) {
  // y = If(cond) { AddOne(x) } else { AddOne(AddOne(x)) }, the branches reading x from
  // the enclosing graph.
  auto g = std::make_shared<ir::Graph>("if_graph");
  g->opset_imports()[""] = 17;
  g->opset_imports()[kTestDomain] = 1;
  ir::Value* cond = g->get_or_add_value("cond");
  cond->type() = ir::TensorType{DataType::kBool, Shape{}};
  ir::Value* x = float_value(*g, "x", Shape{4});
  ir::Value* y = float_value(*g, "y", Shape{4});
  g->inputs() = {cond, x};
  g->outputs() = {y};
  auto branch = [](const std::string& name, int adds) {
    auto b = std::make_shared<ir::Graph>(name);
    ir::Value* bx = float_value(*b, "x", Shape{4});
    bx->set_outer_scope(true);
    ir::Value* prev = bx;
    for (int i = 0; i < adds; ++i) {
      ir::Value* out = float_value(*b, str_format("%s_t%d", name.c_str(), i), Shape{4});
      b->add_node(str_format("%s_add%d", name.c_str(), i), "AddOne", kTestDomain, 1, {prev}, {out});
      prev = out;
    }
    b->outputs() = {prev};
    return b;
  };
  ir::Node* n = g->add_node("if", "If", "", 17, {cond}, {y});
  n->attrs()["then_branch"] = ir::Attribute::from_graph(branch("then", 1));
  n->attrs()["else_branch"] = ir::Attribute::from_graph(branch("else", 2));

  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ(fast_prepares.load(), 3);  // both branches, prepared up front
  EXPECT_EQ((*ex)->implementation(0), "reference");  // If itself
  for (bool c : {true, false}) {
    std::vector<RuntimeValue> outputs;
    Status st = (*ex)->run({{"cond", RuntimeValue(Tensor::scalar<bool>(c))},
                            {"x", RuntimeValue(Tensor::from_vector<float>({0, 1, 2, 3}))}},
                           &outputs);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Tensor& t = outputs[0].tensor();
    float add = c ? 1.0f : 2.0f;
    EXPECT_EQ(std::vector<float>(t.data<float>(), t.data<float>() + 4),
              (std::vector<float>{add, 1 + add, 2 + add, 3 + add}));
  }
  EXPECT_EQ(fast_runs.load(), 3);
  EXPECT_EQ(reference_runs.load(), 0);
  EXPECT_EQ(fast_prepares.load(), 3);
}

TEST_F(KernelRegistryTest, ExecutorRunsSharedKernelsFromSeveralThreads) {
  auto ex = rt::GraphExecutor::create(chain({"a", "b", "slow_c"}));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  constexpr int kThreads = 4, kRuns = 50;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        float v = static_cast<float>(t * 1000 + r);
        auto y = run_once(**ex, {v, -v, 0, 1});
        if (!y.ok() || *y != std::vector<float>{v + 3, -v + 3, 3, 4}) wrong.fetch_add(1);
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(fast_runs.load(), 2 * kThreads * kRuns);
  EXPECT_EQ(fallback_runs.load(), kThreads * kRuns);
  EXPECT_EQ(fast_prepares.load(), 2);
}

// The executor runs whatever selection gives for a real op: a Conv with static shapes and
// constant weights (the oneDNN kernel when src/kernels/cpu registers one, else reference).
TEST_F(KernelRegistryTest, ExecutorUsesTheSelectedKernelOfAConv) {
  auto g = std::make_shared<ir::Graph>("conv");
  g->opset_imports()[""] = 17;
  ir::Value* x = float_value(*g, "x", Shape{1, 3, 8, 8});
  ir::Value* w = float_value(*g, "w", Shape{4, 3, 3, 3});
  std::vector<float> weights(4 * 3 * 3 * 3);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
  w->set_initializer(Tensor::from_vector<float>(weights, {4, 3, 3, 3}));
  ir::Value* y = float_value(*g, "y", Shape{1, 4, 8, 8});
  ir::Node* conv = g->add_node("conv", "Conv", "", 17, {x, w}, {y});
  conv->attrs()["pads"] = ir::Attribute::from_ints({1, 1, 1, 1});
  g->inputs() = {x};
  g->outputs() = {y};

  std::unique_ptr<Kernel> selected = select_kernel(*conv);
  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  EXPECT_EQ((*ex)->implementation(0), selected ? selected->implementation() : "reference");
  EXPECT_EQ(planned_implementation(*conv) == "reference", selected == nullptr);
  set_fast_kernels_enabled(false);
  auto ref = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  EXPECT_EQ((*ref)->implementation(0), "reference");
}

TEST_F(KernelRegistryTest, FastKernelErrorsNameTheNode) {
  auto ex = rt::GraphExecutor::create(chain({"a", "broken_b"}));
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto y = run_once(**ex, {1, 2, 3, 4});
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().to_string().find("broken_b"), std::string::npos) << y.status().to_string();
  EXPECT_NE(y.status().to_string().find("kernel failed on purpose"), std::string::npos) << y.status().to_string();
}

}  // namespace
}  // namespace kiln::kernels
