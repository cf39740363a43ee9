// GraphExecutor's ExecutionState path (bind_input / run_bound / output / end_run): outputs of
// repeated executions with changing inputs against values computed here, recycling of
// finished tensors from the second execution on, an input with a default that one execution
// feeds and the next does not, and a missing input.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "graph_test_util.h"
#include "runtime/graph_executor.h"

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

}  // namespace
}  // namespace kiln::rt
