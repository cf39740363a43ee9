// Scan at opset 8 (batch axis, sequence_lens, directions) run end to end through the
// GraphExecutor. Expected values worked out with NumPy (cumsum per batch entry).
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

// (s_final, ys) = Scan-8(lens, s0, xs): per batch entry s += x_t, y_t = s.
std::shared_ptr<Graph> scan8_graph(bool with_lens, int64_t direction) {
  auto g = std::make_shared<Graph>();
  Value* lens = with_lens ? val(*g, "lens", DataType::kInt64, Shape{2}) : nullptr;
  Value* s0 = val(*g, "s0", DataType::kFloat32, Shape{2, 2});
  Value* xs = val(*g, "xs", DataType::kFloat32, Shape{2, 3, 2});
  Value* sf = val(*g, "s_final", DataType::kFloat32, Shape::unknown_rank());
  Value* ys = val(*g, "ys", DataType::kFloat32, Shape::unknown_rank());
  g->inputs() = {s0, xs};
  if (lens) g->inputs().push_back(lens);
  g->outputs() = {sf, ys};
  auto body = std::make_shared<Graph>("scan_body");
  Value* s_in = val(*body, "s_in", DataType::kFloat32, Shape{2});
  Value* x_t = val(*body, "x_t", DataType::kFloat32, Shape{2});
  Value* s_out = val(*body, "s_out", DataType::kFloat32, Shape{2});
  Value* y = val(*body, "y", DataType::kFloat32, Shape{2});
  body->inputs() = {s_in, x_t};
  body->add_node("add", "Add", "", 8, {s_in, x_t}, {s_out});
  body->add_node("id", "Identity", "", 8, {s_out}, {y});
  body->outputs() = {s_out, y};
  ir::Node* n = g->add_node("scan", "Scan", "", 8, {lens, s0, xs}, {sf, ys});
  n->attrs()["body"] = Attribute::from_graph(body);
  n->attrs()["num_scan_inputs"] = Attribute::from_int(1);
  n->attrs()["directions"] = Attribute::from_ints({direction});
  return g;
}

Expected<std::vector<Tensor>> run(std::shared_ptr<Graph> g, const std::vector<NamedValue>& inputs) {
  KILN_ASSIGN_OR_RETURN(auto ex, GraphExecutor::create(std::move(g)));
  std::vector<RuntimeValue> values;
  KILN_RETURN_IF_ERROR(ex->run(inputs, &values));
  std::vector<Tensor> outs;
  for (RuntimeValue& v : values) outs.push_back(v.tensor());
  return outs;
}

Tensor xs() { return Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 10, 20, 30, 40, 50, 60}, {2, 3, 2}); }
Tensor s0() { return Tensor::from_vector<float>({0, 0, 0, 0}, {2, 2}); }

TEST(Scan8Test, RunsEachBatchEntry) {
  auto r = run(scan8_graph(false, 0), {{"s0", s0()}, {"xs", xs()}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{9, 12, 90, 120}));
  EXPECT_EQ((*r)[1].dims(), (std::vector<int64_t>{2, 3, 2}));
  // np.cumsum(xs, axis=1)
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{1, 2, 4, 6, 9, 12, 10, 20, 40, 60, 90, 120}));
}

TEST(Scan8Test, SequenceLengthsAndReverseDirection) {
  Tensor lens = Tensor::from_vector<int64_t>({3, 2});
  auto r = run(scan8_graph(true, 0), {{"s0", s0()}, {"xs", xs()}, {"lens", lens}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values((*r)[0]), (std::vector<double>{9, 12, 40, 60}));
  // Entry 1 stops after 2 steps; its third output slice is zero.
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{1, 2, 4, 6, 9, 12, 10, 20, 40, 60, 0, 0}));
  r = run(scan8_graph(true, 1), {{"s0", s0()}, {"xs", xs()}, {"lens", lens}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // np.cumsum(x[:len][::-1], axis=0) per entry.
  EXPECT_EQ(values((*r)[1]), (std::vector<double>{5, 6, 8, 10, 9, 12, 30, 40, 40, 60, 0, 0}));
}

TEST(Scan8Test, BadSequenceLengthsAreErrors) {
  auto r = run(scan8_graph(true, 0), {{"s0", s0()}, {"xs", xs()}, {"lens", Tensor::from_vector<int64_t>({4, 1})}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().to_string().find("sequence length 4"), std::string::npos) << r.status().to_string();
  r = run(scan8_graph(true, 0), {{"s0", s0()}, {"xs", xs()}, {"lens", Tensor::from_vector<int64_t>({3})}});
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace kiln::rt
