// GraphExecutor's ExecutionState path (bind_input / run_bound / output / end_run): outputs of
// repeated executions with changing inputs against values computed here, recycling of
// finished tensors from the second execution on, an input with a default that one execution
// feeds and the next does not, and a missing input; the memory plan made from the first
// execution (its size, outputs placed in it, an execution that leaves it, a tensor kept past
// end_run).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "graph_test_util.h"
#include "runtime/graph_executor.h"
#include "runtime/plan_memory.h"

namespace kiln::rt {
namespace {

using test_util::val;

// z = Reshape(Relu(x + b), [3, 2]) with x, b float32[2, 3]; b defaults to 0.5 everywhere.
std::shared_ptr<ir::Graph> add_relu_reshape() {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = val(*g, "x", DataType::kFloat32, Shape::from_static({2, 3}));
  ir::Value* b = val(*g, "b", DataType::kFloat32, Shape::from_static({2, 3}));
  b->set_initializer(Tensor::from_vector<float>({0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, {2, 3}));
  ir::Value* shape = val(*g, "shape", DataType::kInt64, Shape::from_static({2}));
  shape->set_initializer(Tensor::from_vector<int64_t>({3, 2}));
  ir::Value* s = val(*g, "s", DataType::kFloat32, Shape::from_static({2, 3}));
  ir::Value* r = val(*g, "r", DataType::kFloat32, Shape::from_static({2, 3}));
  ir::Value* z = val(*g, "z", DataType::kFloat32, Shape::from_static({3, 2}));
  g->inputs() = {x, b};
  g->add_node("add", "Add", "", 14, {x, b}, {s});
  g->add_node("relu", "Relu", "", 14, {s}, {r});
  g->add_node("reshape", "Reshape", "", 14, {r, shape}, {z});
  g->outputs() = {z};
  return g;
}

std::vector<float> expected(const std::vector<float>& x, const std::vector<float>& b) {
  std::vector<float> z(x.size());
  for (size_t i = 0; i < x.size(); ++i) z[i] = std::max(0.0f, x[i] + b[i]);
  return z;
}

std::vector<float> output_values(const GraphExecutor& ex, const ExecutionState& state) {
  const RuntimeValue& v = ex.output(state, 0);
  EXPECT_TRUE(v.is_tensor());
  EXPECT_EQ(v.tensor().dims(), (std::vector<int64_t>{3, 2}));
  const float* p = v.tensor().data<float>();
  return std::vector<float>(p, p + v.tensor().num_elements());
}

TEST(ExecutionState, RepeatedExecutionsRecycleAndStayCorrect) {
  auto ex = GraphExecutor::create(add_relu_reshape());
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ExecutionState state;
  const std::vector<float> half(6, 0.5f);
  for (int run = 0; run < 6; ++run) {
    std::vector<float> x(6);
    for (int i = 0; i < 6; ++i) x[i] = static_cast<float>((i - 3) * (run + 1)) * 0.25f;
    std::vector<float> b = half;
    const bool feed_b = run == 3;  // the default otherwise, also in the execution after
    if (feed_b)
      for (float& v : b) v = -1.0f;
    ASSERT_TRUE((*ex)->bind_input(state, 0, DataType::kFloat32, {2, 3}, x.data()).ok());
    if (feed_b) ASSERT_TRUE((*ex)->bind_input(state, 1, DataType::kFloat32, {2, 3}, b.data()).ok());
    Status st = (*ex)->run_bound(state);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(output_values(**ex, state), expected(x, b)) << "execution " << run;
    (*ex)->end_run(state);
  }
  // From the second execution on, outputs take the tensors the first left behind.
  EXPECT_GE(state.stats().recycled_outputs, 5u);
}

TEST(ExecutionState, MissingInputAndWrongShapeAreErrors) {
  auto ex = GraphExecutor::create(add_relu_reshape());
  ASSERT_TRUE(ex.ok());
  ExecutionState state;
  Status st = (*ex)->run_bound(state);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("input 'x'"), std::string::npos) << st.to_string();
  std::vector<float> x(8);
  st = (*ex)->bind_input(state, 0, DataType::kFloat32, {2, 4}, x.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("shape"), std::string::npos) << st.to_string();
  EXPECT_FALSE((*ex)->bind_input(state, 5, DataType::kFloat32, {2, 3}, x.data()).ok());
}

// z = Neg(Concat(c1, c1)) with c1 = Concat(x, x) on axis 1, x float32[rows, 8]: at 4 rows,
// three values of 256, 512 and 512 bytes, of which c1 and z are never alive at once. With
// symbolic rows, a model with an open dim.
std::shared_ptr<ir::Graph> widening_chain(Dim rows = Dim(4)) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = val(*g, "x", DataType::kFloat32, Shape{rows, 8});
  ir::Value* c1 = val(*g, "c1", DataType::kFloat32, Shape{rows, 16});
  ir::Value* c2 = val(*g, "c2", DataType::kFloat32, Shape{rows, 32});
  ir::Value* z = val(*g, "z", DataType::kFloat32, Shape{rows, 32});
  g->inputs() = {x};
  g->add_node("cat1", "Concat", "", 13, {x, x}, {c1})->attrs()["axis"] = ir::Attribute::from_int(1);
  g->add_node("cat2", "Concat", "", 13, {c1, c1}, {c2})->attrs()["axis"] = ir::Attribute::from_int(1);
  g->add_node("neg", "Neg", "", 13, {c2}, {z});
  g->outputs() = {z};
  return g;
}

// Row i of z: -x[i] four times over.
std::vector<float> widening_expected(const std::vector<float>& x) {
  std::vector<float> z;
  for (int i = 0; i < 4; ++i)
    for (int copy = 0; copy < 4; ++copy)
      for (int j = 0; j < 8; ++j) z.push_back(-x[static_cast<size_t>(i * 8 + j)]);
  return z;
}

std::vector<float> ramp(int run) {
  std::vector<float> x(32);
  std::iota(x.begin(), x.end(), static_cast<float>(run * 100));
  return x;
}

std::vector<float> values_of(const RuntimeValue& v) {
  const float* p = v.tensor().data<float>();
  return std::vector<float>(p, p + v.tensor().num_elements());
}

TEST(ExecutionStatePlan, LaterExecutionsRunInTheFirstOnesPlan) {
  auto ex = GraphExecutor::create(widening_chain());
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ExecutionState state;
  for (int run = 0; run < 5; ++run) {
    std::vector<float> x = ramp(run);
    ASSERT_TRUE((*ex)->bind_input(state, 0, DataType::kFloat32, {4, 8}, x.data()).ok());
    Status st = (*ex)->run_bound(state);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(values_of((*ex)->output(state, 0)), widening_expected(x)) << "execution " << run;
    (*ex)->end_run(state);
    // The first execution's record becomes the plan when it ends; the plan's block is taken
    // by the next execution.
    EXPECT_EQ(state.take_new_plan(), run == 0) << "execution " << run;
    ExecutionState::Stats stats = state.stats();
    // The most bytes alive at once: c2 and z (512 + 512), while c1 (256) is gone by then; the
    // three values one by one would take 1280.
    EXPECT_EQ(stats.planned_bytes, run == 0 ? 0u : 1024u) << "execution " << run;
    // Each execution after the first places its three values in the plan.
    EXPECT_EQ(stats.planned_outputs, static_cast<uint64_t>(3 * run)) << "execution " << run;
  }
}

TEST(ExecutionStatePlan, ATensorKeptPastEndRunIsNeverOverwritten) {
  auto ex = GraphExecutor::create(widening_chain());
  ASSERT_TRUE(ex.ok());
  ExecutionState state;
  std::vector<RuntimeValue> kept;
  std::vector<std::vector<float>> kept_expected;
  for (int run = 0; run < 6; ++run) {
    std::vector<float> x = ramp(run);
    ASSERT_TRUE((*ex)->bind_input(state, 0, DataType::kFloat32, {4, 8}, x.data()).ok());
    ASSERT_TRUE((*ex)->run_bound(state).ok());
    // A caller keeping the output (a copy shares its block) beyond the execution.
    if (run == 2 || run == 3) {
      kept.push_back((*ex)->output(state, 0));
      kept_expected.push_back(widening_expected(x));
    }
    EXPECT_EQ(values_of((*ex)->output(state, 0)), widening_expected(x)) << "execution " << run;
    (*ex)->end_run(state);
  }
  // Had the plan gone on handing out the kept block, the later executions would have
  // written their own values over it.
  for (size_t i = 0; i < kept.size(); ++i) EXPECT_EQ(values_of(kept[i]), kept_expected[i]) << "kept " << i;
}

// y = NonZero(x) for x float32[8]: the output's size depends on the data, so executions with
// a different count of non-zeros ask for other sizes than the plan recorded.
TEST(ExecutionStatePlan, ExecutionsThatLeaveThePlanStayCorrect) {
  auto g = std::make_shared<ir::Graph>();
  ir::Value* x = val(*g, "x", DataType::kFloat32, Shape::from_static({8}));
  ir::Value* nz = val(*g, "nz", DataType::kInt64, Shape{1, Dim::symbolic("n")});
  ir::Value* y = val(*g, "y", DataType::kInt64, Shape{1, Dim::symbolic("n")});
  g->inputs() = {x};
  g->add_node("nonzero", "NonZero", "", 13, {x}, {nz});
  g->add_node("neg", "Neg", "", 13, {nz}, {y});
  g->outputs() = {y};
  auto ex = GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  ExecutionState state;
  for (int run = 0; run < 12; ++run) {
    std::vector<float> input(8, 0.0f);
    std::vector<int64_t> want;
    const int every = 1 + run % 3;  // 8, 4 or 3 non-zeros
    for (int i = 0; i < 8; i += every) {
      input[static_cast<size_t>(i)] = 1.0f;
      want.push_back(-i);
    }
    ASSERT_TRUE((*ex)->bind_input(state, 0, DataType::kFloat32, {8}, input.data()).ok());
    Status st = (*ex)->run_bound(state);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const Tensor& out = (*ex)->output(state, 0).tensor();
    ASSERT_EQ(out.dims(), (std::vector<int64_t>{1, static_cast<int64_t>(want.size())})) << "execution " << run;
    EXPECT_EQ(std::vector<int64_t>(out.data<int64_t>(), out.data<int64_t>() + out.num_elements()), want)
        << "execution " << run;
    (*ex)->end_run(state);
  }
}

// Runs `state` at `rows` rows of a ramp that differs per run and checks every output value
// against the chain's formula (row i: -x[i] four times over); returns the output's address.
// With `keep`, the caller keeps the output past the execution (a copy shares its block).
const void* run_rows(const GraphExecutor& ex, ExecutionState& state, int rows, int run, RuntimeValue* keep = nullptr) {
  std::vector<float> x(static_cast<size_t>(rows) * 8);
  std::iota(x.begin(), x.end(), static_cast<float>(run * 1000 + rows));
  EXPECT_TRUE(ex.bind_input(state, 0, DataType::kFloat32, {rows, 8}, x.data()).ok());
  Status st = ex.run_bound(state);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<float> want;
  for (int i = 0; i < rows; ++i)
    for (int copy = 0; copy < 4; ++copy)
      for (int j = 0; j < 8; ++j) want.push_back(-x[static_cast<size_t>(i * 8 + j)]);
  const RuntimeValue& out = ex.output(state, 0);
  EXPECT_EQ(values_of(out), want) << rows << " rows, execution " << run;
  const void* address = out.tensor().raw_data();
  if (keep) *keep = out;
  ex.end_run(state);
  return address;
}

bool in_block(const void* address, const Tensor& block) {
  const char* p = static_cast<const char*>(address);
  const char* base = static_cast<const char*>(block.raw_data());
  return p >= base && p < base + block.storage_bytes();
}

// Two states of one executor, at 4 and 8 rows, sharing one PlanMemory as the signatures of
// an execution context do.
class ExecutionStateSharedPlan : public ::testing::Test {
 protected:
  void SetUp() override {
    auto made = GraphExecutor::create(widening_chain(Dim::symbolic("n")));
    ASSERT_TRUE(made.ok()) << made.status().to_string();
    ex = std::move(made).value();
    small.share_plan_memory(memory);
    large.share_plan_memory(memory);
  }
  std::unique_ptr<GraphExecutor> ex;
  std::shared_ptr<PlanMemory> memory = std::make_shared<PlanMemory>();
  ExecutionState small, large;
};

TEST_F(ExecutionStateSharedPlan, BothPlansAreLaidOutOverOneBlock) {
  // Alternating shapes as a dynamic model's signatures do. Each state records its first
  // execution; from the second on it runs in its plan; the large plan's block replaces the
  // small one's, and the small plan moves into it at its next execution.
  for (int run = 0; run < 5; ++run) {
    const void* a = run_rows(*ex, small, 4, run);
    const void* b = run_rows(*ex, large, 8, run);
    if (run >= 2) {
      Expected<Tensor> block = memory->block(0);  // the current block, unchanged
      ASSERT_TRUE(block.ok());
      EXPECT_TRUE(in_block(a, *block)) << "execution " << run;
      EXPECT_TRUE(in_block(b, *block)) << "execution " << run;
    }
  }
  // The plans' sizes (the most bytes alive at once: c2 and z), and one block of the larger.
  EXPECT_EQ(small.stats().planned_bytes, 1024u);
  EXPECT_EQ(large.stats().planned_bytes, 2048u);
  EXPECT_EQ(memory->bytes(), 2048u);
  EXPECT_EQ(small.stats().planned_outputs, 3u * 4);
  EXPECT_EQ(large.stats().planned_outputs, 3u * 4);
}

TEST_F(ExecutionStateSharedPlan, ATensorKeptFromOneStateIsNeverOverwrittenByAnother) {
  for (int run = 0; run < 3; ++run) {
    run_rows(*ex, small, 4, run);
    run_rows(*ex, large, 8, run);
  }
  // A caller keeps the small state's output past its execution; its values as computed.
  RuntimeValue kept;
  run_rows(*ex, small, 4, 3, &kept);
  const std::vector<float> kept_values = values_of(kept);
  // The other state (and the small one again) run on: had the shared block stayed in
  // service, the large plan would write its values over the kept tensor.
  for (int run = 4; run < 8; ++run) {
    run_rows(*ex, large, 8, run);
    run_rows(*ex, small, 4, run);
  }
  EXPECT_EQ(values_of(kept), kept_values);
}

}  // namespace
}  // namespace kiln::rt
