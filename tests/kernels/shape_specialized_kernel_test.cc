// Fast kernels for nodes with open dims (kernels/shape_specialized_kernel.h): the node gets a
// kernel that prepares the fast kernel per input shape on first sight, runs it on the node's
// concrete twin, keeps a bounded least-recently-used cache per node, and runs the reference
// kernel at shapes no fast kernel takes. The test op's fast kernel plans from static shapes
// only (as Kiln's real kernels do) and counts its preparations; y = 2x + 1 is checked
// element by element against that closed form.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "kernels/shape_specialized_kernel.h"
#include "ops/registry.h"
#include "runtime/graph_executor.h"

namespace kiln::kernels {
namespace {

constexpr const char* kDomain = "test.shapes";

Status two_x_plus_one(ops::KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (!x || x->dtype() != DataType::kFloat32)
    return invalid_argument("node %s: input must be a float32 tensor", ctx.node().label().c_str());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, x->dims()));
  for (int64_t i = 0; i < x->num_elements(); ++i) y->data<float>()[i] = 2.0f * x->data<float>()[i] + 1.0f;
  return ok_status();
}

std::atomic<int> reference_runs{0}, prepares{0}, fast_runs{0};

Status infer_same(ops::InferContext& ctx) {
  ctx.set_output(0, ctx.input_type(0).dtype, ctx.input_type(0).shape);
  return ok_status();
}

KILN_REGISTER_OP(ops::OpSchema("TwoXPlusOne", kDomain).since(1).inputs(1, 1).outputs(1, 1).infer(infer_same).kernel(
    [](ops::KernelContext& ctx) {
      reference_runs.fetch_add(1);
      return two_x_plus_one(ctx);
    }));

// Plans from the node's static shape, as the real kernels do, and checks at run time that it
// runs on the node it was prepared for: the twin, whose shapes are the run's.
class StaticShapeKernel : public Kernel {
 public:
  explicit StaticShapeKernel(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  Status run(ops::KernelContext& ctx) const override {
    fast_runs.fetch_add(1);
    const ir::Value* x = ctx.node().input(0);
    if (!x->shape().is_static() || x->shape().static_dims() != dims_ || ctx.input(0)->dims() != dims_)
      return internal_error("run on a node of another shape");
    return two_x_plus_one(ctx);
  }
  std::string implementation() const override { return "static-test"; }

 private:
  std::vector<int64_t> dims_;
};

// Takes static shapes whose first dim is at most 8; larger ones stay on the reference kernel.
KILN_REGISTER_KERNEL((KernelFactory{
    .domain = kDomain, .op_type = "TwoXPlusOne", .device = DeviceKind::kCpu, .priority = 100, .name = "static",
    .applicable =
        [](const ir::Node& n) -> Status {
          const ir::Value* x = n.input(0);
          if (x->shape().is_static() && x->shape().rank() >= 1 && x->shape()[0].value <= 8) return ok_status();
          return unsupported("X %s: static shapes with a first dim of at most 8", x->shape().to_string().c_str());
        },
    .prepare = [](const ir::Node& n) -> Expected<std::unique_ptr<Kernel>> {
      prepares.fetch_add(1);
      return std::unique_ptr<Kernel>(new StaticShapeKernel(n.input(0)->shape().static_dims()));
    }}));

// y [x0 * 10^12, x1]: an op whose output no memory holds at any shape.
KILN_REGISTER_OP(ops::OpSchema("Explode", kDomain).since(1).inputs(1, 1).outputs(1, 1).infer([](ops::InferContext& ctx) {
  Shape s = ctx.input_type(0).shape;
  if (s.has_rank() && s.rank() > 0 && s[0].is_static()) s[0] = Dim(s[0].value * 1000000000000);
  ctx.set_output(0, ctx.input_type(0).dtype, s);
  return ok_status();
}).kernel(two_x_plus_one));
KILN_REGISTER_KERNEL((KernelFactory{
    .domain = kDomain, .op_type = "Explode", .device = DeviceKind::kCpu, .priority = 100, .name = "static",
    .applicable = [](const ir::Node&) { return ok_status(); },
    .prepare = [](const ir::Node& n) -> Expected<std::unique_ptr<Kernel>> {
      return std::unique_ptr<Kernel>(new StaticShapeKernel(n.input(0)->shape().static_dims()));
    }}));

// x -> `op` -> y, one node of the test domain, float32 values of the given shapes.
std::shared_ptr<ir::Graph> one_node_graph(const char* op, Shape x_shape, Shape y_shape) {
  auto g = std::make_shared<ir::Graph>(op);
  g->opset_imports()[kDomain] = 1;
  ir::Value* x = g->get_or_add_value("x");
  x->type().dtype = DataType::kFloat32;
  x->type().shape = std::move(x_shape);
  ir::Value* y = g->get_or_add_value("y");
  y->type().dtype = DataType::kFloat32;
  y->type().shape = std::move(y_shape);
  g->inputs().push_back(x);
  g->outputs().push_back(y);
  g->add_node("node", op, kDomain, 1, {x}, {y});
  return g;
}

// x [batch, 3] -> TwoXPlusOne -> y, with batch open.
std::shared_ptr<ir::Graph> open_batch_graph() {
  const Shape s({Dim::symbolic("batch"), Dim(3)});
  return one_node_graph("TwoXPlusOne", s, s);
}

Tensor ramp(int64_t batch) {
  Tensor t = Tensor::make(DataType::kFloat32, {batch, 3});
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = static_cast<float>(i) * 0.5f - 1.0f;
  return t;
}

void expect_two_x_plus_one(const rt::GraphExecutor& ex, int64_t batch) {
  std::vector<RuntimeValue> out;
  Tensor x = ramp(batch);
  Status s = ex.run({{"x", RuntimeValue(x)}}, &out);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_EQ(out.size(), 1u);
  const Tensor& y = out[0].tensor();
  ASSERT_EQ(y.dims(), (std::vector<int64_t>{batch, 3}));
  for (int64_t i = 0; i < y.num_elements(); ++i)
    ASSERT_EQ(y.data<float>()[i], 2.0f * x.data<float>()[i] + 1.0f) << "batch " << batch << " element " << i;
}

TEST(ShapeSpecializedKernelTest, OpenDimsGetAPerShapeKernel) {
  auto g = open_batch_graph();
  const ir::Node& node = *g->nodes()[0];
  EXPECT_TRUE(has_open_dims(node));
  // At the probe's representative batch (kProbeExtent > 8) the fast kernel says no: the plan
  // (compile report) says reference because of open dims, and the run still tries each shape.
  KernelPlan plan = plan_kernel(node);
  EXPECT_EQ(plan.implementation, "reference");
  EXPECT_TRUE(plan.shape_related);
  // The refusal at representative extents, by the factory's name.
  EXPECT_EQ(plan.reason.rfind("open dims: at representative extents static: X [", 0), 0u) << plan.reason;
  EXPECT_NE(plan.reason.find("a first dim of at most 8"), std::string::npos) << plan.reason;
  auto k = select_kernel(node);
  ASSERT_TRUE(k);
  EXPECT_EQ(k->implementation(), "per-shape:reference");
}

TEST(ShapeSpecializedKernelTest, EachShapeIsPreparedOnceAndRunsOnItsTwin) {
  auto ex = rt::GraphExecutor::create(open_batch_graph());
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  const int p0 = prepares.load(), f0 = fast_runs.load(), r0 = reference_runs.load();
  for (int64_t batch : {1, 4, 1, 4, 2, 1}) expect_two_x_plus_one(**ex, batch);
  EXPECT_EQ(prepares.load() - p0, 3);  // 1, 4 and 2, once each
  EXPECT_EQ(fast_runs.load() - f0, 6);
  EXPECT_EQ(reference_runs.load() - r0, 0);
}

TEST(ShapeSpecializedKernelTest, ShapesNoFastKernelTakesRunOnTheReferenceKernel) {
  auto ex = rt::GraphExecutor::create(open_batch_graph());
  ASSERT_TRUE(ex.ok());
  const int p0 = prepares.load(), r0 = reference_runs.load();
  expect_two_x_plus_one(**ex, 9);  // the fast kernel takes batch <= 8 only
  expect_two_x_plus_one(**ex, 9);
  EXPECT_EQ(prepares.load() - p0, 0);
  EXPECT_EQ(reference_runs.load() - r0, 2);
}

TEST(ShapeSpecializedKernelTest, CacheKeepsTheMostRecentShapesWithinItsBound) {
  const size_t capacity = shape_cache_capacity();
  ASSERT_GE(capacity, 2u);
  // x [batch, width] with both open; batch 1 and widths 1..capacity+1: one more shape than fits.
  const Shape both({Dim::symbolic("batch"), Dim::symbolic("width")});
  auto g = one_node_graph("TwoXPlusOne", both, both);
  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok());
  auto run_width = [&](int64_t width) {
    Tensor t = Tensor::make(DataType::kFloat32, {1, width});
    for (int64_t i = 0; i < width; ++i) t.data<float>()[i] = static_cast<float>(i);
    std::vector<RuntimeValue> out;
    ASSERT_TRUE((*ex)->run({{"x", RuntimeValue(t)}}, &out).ok());
    for (int64_t i = 0; i < width; ++i) ASSERT_EQ(out[0].tensor().data<float>()[i], 2.0f * i + 1.0f);
  };
  const int p0 = prepares.load();
  const int64_t n = static_cast<int64_t>(capacity) + 1;
  for (int64_t w = 1; w <= n; ++w) run_width(w);  // width 1 is evicted by the last
  EXPECT_EQ(prepares.load() - p0, n);
  for (int64_t w = 2; w <= n; ++w) run_width(w);  // all still cached
  EXPECT_EQ(prepares.load() - p0, n);
  run_width(1);  // evicted: prepared again (and evicts width 2, the least recently used)
  EXPECT_EQ(prepares.load() - p0, n + 1);
  run_width(3);
  EXPECT_EQ(prepares.load() - p0, n + 1);
  run_width(2);
  EXPECT_EQ(prepares.load() - p0, n + 2);
}

TEST(ShapeSpecializedKernelTest, ConcurrentRunsAtDifferentShapes) {
  auto ex = rt::GraphExecutor::create(open_batch_graph());
  ASSERT_TRUE(ex.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) expect_two_x_plus_one(**ex, 1 + (t + i) % 5);
    });
  for (auto& th : threads) th.join();
}

TEST(ShapeSpecializedKernelTest, OutputsNoMemoryHoldsAreRefusedBeforePreparing) {
  auto g = one_node_graph("Explode", Shape({Dim::symbolic("batch"), Dim(3)}), Shape({Dim::symbolic("big"), Dim(3)}));
  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  std::vector<RuntimeValue> out;
  Status s = (*ex)->run({{"x", RuntimeValue(ramp(2))}}, &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.to_string().find("more than this machine's memory"), std::string::npos) << s.to_string();
  EXPECT_NE(s.to_string().find("'y'"), std::string::npos) << s.to_string();
}

TEST(ShapeSpecializedKernelTest, ConcretizeSharesWeightsAndInfersOutputs) {
  auto g = open_batch_graph();
  const ir::Node& node = *g->nodes()[0];
  std::vector<int64_t> dims{5, 3};
  auto twin = concretize(node, {&dims});
  ASSERT_TRUE(twin.ok()) << twin.status().to_string();
  EXPECT_EQ(twin->node->input(0)->shape().static_dims(), dims);
  EXPECT_EQ(twin->node->output(0)->shape().static_dims(), dims);
  auto probe = probe_twin(node);
  ASSERT_TRUE(probe.ok());
  EXPECT_EQ(probe->node->input(0)->shape().static_dims(), (std::vector<int64_t>{kProbeExtent, 3}));
}

}  // namespace
}  // namespace kiln::kernels
