// If, Loop and Scan run end to end through the GraphExecutor, with bodies that read
// values of the enclosing graph. Expected values worked out with NumPy (cumsum, arange).
#include <gtest/gtest.h>

#include <memory>

#include "ir/graph.h"
#include "runtime/graph_executor.h"
#include "graph_test_util.h"

namespace kiln::rt {
namespace {

using ir::Attribute;
using ir::Graph;
using ir::Value;

using test_util::val;
using test_util::values;

Expected<std::vector<Tensor>> run(std::shared_ptr<Graph> g, const std::vector<NamedValue>& inputs) {
  KILN_ASSIGN_OR_RETURN(auto ex, GraphExecutor::create(std::move(g)));
  std::vector<RuntimeValue> values;
  KILN_RETURN_IF_ERROR(ex->run(inputs, &values));
  std::vector<Tensor> outs;
  for (RuntimeValue& v : values) outs.push_back(v.tensor());
  return outs;
}

// y = If(cond) { Identity(x) } else { Concat(x, x) }: branches of different shapes,
// both reading x from the enclosing graph.
std::shared_ptr<Graph> if_graph() {
  auto g = std::make_shared<Graph>();
  Value* cond = val(*g, "cond", DataType::kBool, Shape{});
  Value* x = val(*g, "x", DataType::kFloat32, Shape{3});
  Value* y = val(*g, "y", DataType::kFloat32, Shape::unknown_rank());
  g->inputs() = {cond, x};
  g->outputs() = {y};
  auto then_g = std::make_shared<Graph>("then");
  Value* tx = val(*then_g, "x", DataType::kFloat32, Shape{3});
  tx->set_outer_scope(true);
  Value* ty = val(*then_g, "ty", DataType::kFloat32, Shape{3});
  then_g->add_node("id", "Identity", "", 17, {tx}, {ty});
  then_g->outputs() = {ty};
  auto else_g = std::make_shared<Graph>("else");
  Value* ex = val(*else_g, "x", DataType::kFloat32, Shape{3});
  ex->set_outer_scope(true);
  Value* ey = val(*else_g, "ey", DataType::kFloat32, Shape{6});
  ir::Node* cat = else_g->add_node("cat", "Concat", "", 17, {ex, ex}, {ey});
  cat->attrs()["axis"] = Attribute::from_int(0);
  else_g->outputs() = {ey};
  ir::Node* n = g->add_node("if", "If", "", 17, {cond}, {y});
  n->attrs()["then_branch"] = Attribute::from_graph(then_g);
  n->attrs()["else_branch"] = Attribute::from_graph(else_g);
  return g;
}

TEST(ControlFlowTest, IfRunsTheChosenBranch) {
  auto g = if_graph();
  Tensor x = Tensor::from_vector<float>({1, 2, 3});
  auto r = run(g, {{"cond", Tensor::scalar<bool>(true)}, {"x", x}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{1, 2, 3}));
  r = run(g, {{"cond", Tensor::scalar<bool>(false)}, {"x", x}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{1, 2, 3, 1, 2, 3}));
}

TEST(ControlFlowTest, IfRejectsNonBoolCondition) {
  auto g = if_graph();
  g->inputs()[0]->type().dtype = DataType::kUndefined;
  auto r = run(g, {{"cond", Tensor::scalar<float>(1)}, {"x", Tensor::from_vector<float>({1, 2, 3})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("'if' (If)"), std::string::npos) << r.status().to_string();
}

// (v_final, iters) = Loop(M, cond, v0) with body: v += step (outer-scope initializer),
// cond_out = (i < limit) when `use_limit`, else cond_in; scan output = i.
std::shared_ptr<Graph> loop_graph(bool use_limit, bool with_m = true, bool with_cond = true) {
  auto g = std::make_shared<Graph>();
  Value* m = with_m ? val(*g, "M", DataType::kInt64, Shape{}) : nullptr;
  Value* cond = with_cond ? val(*g, "cond", DataType::kBool, Shape{}) : nullptr;
  Value* v0 = val(*g, "v0", DataType::kFloat32, Shape{2});
  Value* step = val(*g, "step", DataType::kFloat32, Shape{2});
  step->set_initializer(Tensor::from_vector<float>({1.0f, 0.5f}));
  Value* vf = val(*g, "v_final", DataType::kFloat32, Shape{2});
  Value* iters = val(*g, "iters", DataType::kInt64, Shape::unknown_rank());
  for (Value* v : {m, cond}) if (v) g->inputs().push_back(v);
  g->inputs().push_back(v0);
  g->outputs() = {vf, iters};

  auto body = std::make_shared<Graph>("body");
  Value* i = val(*body, "i", DataType::kInt64, Shape{});
  Value* c_in = val(*body, "c_in", DataType::kBool, Shape{});
  Value* v_in = val(*body, "v_in", DataType::kFloat32, Shape{2});
  Value* bstep = val(*body, "step", DataType::kFloat32, Shape{2});
  bstep->set_outer_scope(true);
  Value* c_out = val(*body, "c_out", DataType::kBool, Shape{});
  Value* v_out = val(*body, "v_out", DataType::kFloat32, Shape{2});
  Value* i_out = val(*body, "i_out", DataType::kInt64, Shape{});
  body->inputs() = {i, c_in, v_in};
  if (use_limit) {
    Value* limit = val(*body, "limit", DataType::kInt64, Shape{});
    limit->set_initializer(Tensor::scalar<int64_t>(2));
    body->add_node("less", "Less", "", 17, {i, limit}, {c_out});
  } else {
    body->add_node("cid", "Identity", "", 17, {c_in}, {c_out});
  }
  body->add_node("add", "Add", "", 17, {v_in, bstep}, {v_out});
  body->add_node("iid", "Identity", "", 17, {i}, {i_out});
  body->outputs() = {c_out, v_out, i_out};
  ir::Node* n = g->add_node("loop", "Loop", "", 17, {m, cond, v0}, {vf, iters});
  n->attrs()["body"] = Attribute::from_graph(body);
  return g;
}

TEST(ControlFlowTest, LoopRunsTripCountAndStacksScanOutputs) {
  auto r = run(loop_graph(false), {{"M", Tensor::scalar<int64_t>(4)},
                                   {"cond", Tensor::scalar<bool>(true)},
                                   {"v0", Tensor::from_vector<float>({1, 2})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{5, 4}));  // [1,2] + 4 * [1,0.5]
  EXPECT_EQ((*r)[1].dims(), (std::vector<int64_t>{4}));
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{0, 1, 2, 3}));  // np.arange(4)
}

TEST(ControlFlowTest, LoopStopsWhenConditionTurnsFalse) {
  // cond_out = i < 2: iterations i = 0, 1, 2 run; the third reports false.
  auto r = run(loop_graph(true), {{"M", Tensor::scalar<int64_t>(100)},
                                  {"cond", Tensor::scalar<bool>(true)},
                                  {"v0", Tensor::from_vector<float>({0, 0})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{3, 1.5}));
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{0, 1, 2}));
  // Without a trip count, the condition alone ends the loop.
  r = run(loop_graph(true, false, true), {{"cond", Tensor::scalar<bool>(true)},
                                          {"v0", Tensor::from_vector<float>({0, 0})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{0, 1, 2}));
}

TEST(ControlFlowTest, LoopWithZeroTripsKeepsInitialValues) {
  auto r = run(loop_graph(false), {{"M", Tensor::scalar<int64_t>(0)},
                                   {"cond", Tensor::scalar<bool>(true)},
                                   {"v0", Tensor::from_vector<float>({1, 2})}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{1, 2}));
  EXPECT_EQ((*r)[1].dims(), (std::vector<int64_t>{0}));
  EXPECT_EQ((*r)[1].dtype(), DataType::kInt64);
}

TEST(ControlFlowTest, LoopWithoutTripCountOrConditionIsAnError) {
  auto r = run(loop_graph(false, false, false), {{"v0", Tensor::from_vector<float>({1, 2})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("never end"), std::string::npos) << r.status().to_string();
}

// (s_final, ys) = Scan(s0, xs): s += x_t, y_t = s.
std::shared_ptr<Graph> scan_graph(int64_t direction) {
  auto g = std::make_shared<Graph>();
  Value* s0 = val(*g, "s0", DataType::kFloat32, Shape{2});
  Value* xs = val(*g, "xs", DataType::kFloat32, Shape{3, 2});
  Value* sf = val(*g, "s_final", DataType::kFloat32, Shape{2});
  Value* ys = val(*g, "ys", DataType::kFloat32, Shape::unknown_rank());
  g->inputs() = {s0, xs};
  g->outputs() = {sf, ys};
  auto body = std::make_shared<Graph>("scan_body");
  Value* s_in = val(*body, "s_in", DataType::kFloat32, Shape{2});
  Value* x_t = val(*body, "x_t", DataType::kFloat32, Shape{2});
  Value* s_out = val(*body, "s_out", DataType::kFloat32, Shape{2});
  Value* y = val(*body, "y", DataType::kFloat32, Shape{2});
  body->inputs() = {s_in, x_t};
  body->add_node("add", "Add", "", 17, {s_in, x_t}, {s_out});
  body->add_node("id", "Identity", "", 17, {s_out}, {y});
  body->outputs() = {s_out, y};
  ir::Node* n = g->add_node("scan", "Scan", "", 17, {s0, xs}, {sf, ys});
  n->attrs()["body"] = Attribute::from_graph(body);
  n->attrs()["num_scan_inputs"] = Attribute::from_int(1);
  n->attrs()["scan_input_directions"] = Attribute::from_ints({direction});
  return g;
}

TEST(ControlFlowTest, ScanAccumulatesForwardAndBackward) {
  Tensor xs = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto r = run(scan_graph(0), {{"s0", Tensor::from_vector<float>({0, 0})}, {"xs", xs}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{9, 12}));
  EXPECT_EQ((*r)[1].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{1, 2, 4, 6, 9, 12}));  // np.cumsum(xs, 0)
  r = run(scan_graph(1), {{"s0", Tensor::from_vector<float>({0, 0})}, {"xs", xs}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{5, 6, 8, 10, 9, 12}));  // np.cumsum(xs[::-1], 0)
}

}  // namespace
}  // namespace kiln::rt
