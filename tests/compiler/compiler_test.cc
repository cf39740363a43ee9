// The compile driver: --input-shape parsing, fixing symbolic dims, dead-node removal.
#include "compiler/compiler.h"

#include <gtest/gtest.h>

namespace kiln::compiler {
namespace {

TEST(InputShapeTest, ParsesAtcStyleSpec) {
  auto s = parse_input_shapes("x:1,3,224,224;input:0:1,128");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->at("x"), (std::vector<int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(s->at("input:0"), (std::vector<int64_t>{1, 128}));
  EXPECT_TRUE(parse_input_shapes("")->empty());
}

TEST(InputShapeTest, RejectsMalformedSpecs) {
  EXPECT_FALSE(parse_input_shapes("x").ok());
  EXPECT_FALSE(parse_input_shapes("x:1,a").ok());
  EXPECT_FALSE(parse_input_shapes("x:1,-3").ok());
  EXPECT_FALSE(parse_input_shapes("x:1;x:2").ok());
}

// ids[batch, seq] -> Relu -> y[batch, seq]; mask[batch, 7]
std::unique_ptr<ir::Graph> symbolic_graph() {
  auto g = std::make_unique<ir::Graph>();
  ir::Value* ids = *g->add_value("ids");
  ids->type() = {DataType::kFloat32, Shape{Dim::symbolic("batch"), Dim::symbolic("seq")}};
  ir::Value* mask = *g->add_value("mask");
  mask->type() = {DataType::kFloat32, Shape{Dim::symbolic("batch"), 7}};
  ir::Value* y = *g->add_value("y");
  y->type() = {DataType::kFloat32, Shape{Dim::symbolic("batch"), Dim::symbolic("seq")}};
  ir::Value* unused = *g->add_value("unused");
  g->inputs() = {ids, mask};
  g->outputs() = {y};
  g->add_node("relu", "Relu", "", 14, {ids}, {y});
  g->add_node("dead", "Relu", "", 14, {mask}, {unused});
  return g;
}

TEST(ApplyInputShapesTest, BindsSymbolsEverywhere) {
  auto g = symbolic_graph();
  ASSERT_TRUE(apply_input_shapes(*g, {{"ids", {2, 128}}}).ok());
  EXPECT_EQ(g->inputs()[0]->shape().to_string(), "[2,128]");
  EXPECT_EQ(g->inputs()[1]->shape().to_string(), "[2,7]");  // same symbol 'batch'
  EXPECT_EQ(g->outputs()[0]->shape().to_string(), "[2,128]");
}

TEST(ApplyInputShapesTest, ErrorsNameTheProblem) {
  auto g = symbolic_graph();
  Status s = apply_input_shapes(*g, {{"nope", {1}}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("ids"), std::string::npos);  // lists the real inputs
  EXPECT_FALSE(apply_input_shapes(*g, {{"ids", {1, 2, 3}}}).ok());   // rank
  EXPECT_FALSE(apply_input_shapes(*g, {{"mask", {1, 8}}}).ok());     // static dim 7
  EXPECT_FALSE(apply_input_shapes(*g, {{"ids", {1, 4}}, {"mask", {2, 7}}}).ok());  // batch 1 vs 2
}

TEST(DeadNodeTest, RemovesNodesThatReachNoOutput) {
  auto g = symbolic_graph();
  EXPECT_EQ(remove_dead_nodes(*g), 1);
  ASSERT_EQ(g->nodes().size(), 1u);
  EXPECT_EQ(g->nodes()[0]->name(), "relu");
}

// Constants only removed nodes read, or none at all (a QDQ model's replaced float weights), are
// not kept for the .kiln; a graph input's initializer (a default the caller may feed) is.
TEST(DeadNodeTest, DropsInitializersNothingReads) {
  auto g = symbolic_graph();
  ir::Value* w_dead = *g->add_value("w_dead");
  w_dead->set_initializer(Tensor::make(DataType::kFloat32, {7}));
  ir::Value* w_unused = *g->add_value("w_unused");
  w_unused->set_initializer(Tensor::make(DataType::kFloat32, {1000}));
  ir::Value* feedable = *g->add_value("feedable");
  feedable->set_initializer(Tensor::make(DataType::kFloat32, {2}));
  g->inputs().push_back(feedable);
  ir::Value* kept = *g->add_value("kept");
  kept->set_initializer(Tensor::make(DataType::kFloat32, {1}));
  ir::Value* y2 = *g->add_value("y2");
  g->outputs().push_back(y2);
  g->add_node("add", "Add", "", 14, {g->find_value("ids"), kept}, {y2});
  ir::Value* dead_out = *g->add_value("dead_out");
  g->add_node("dead_add", "Add", "", 14, {g->find_value("mask"), w_dead}, {dead_out});
  remove_dead_nodes(*g);
  EXPECT_FALSE(w_dead->has_initializer());
  EXPECT_FALSE(w_unused->has_initializer());
  EXPECT_TRUE(feedable->has_initializer());
  EXPECT_TRUE(kept->has_initializer());
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

TEST(FoldConstantNodesTest, ConstantNodesBecomeInitializers) {
  ir::Graph g;
  ir::Value* x = *g.add_value("x");
  x->type() = {DataType::kFloat32, Shape{3}};
  ir::Value* c = *g.add_value("c");
  ir::Value* y = *g.add_value("y");
  g.inputs() = {x};
  g.outputs() = {y};
  ir::Node* k = g.add_node("k", "Constant", "", 13, {}, {c});
  k->attrs()["value_floats"] = ir::Attribute::from_floats({1.5f, -2.0f, 4.0f});
  g.add_node("add", "Add", "", 14, {x, c}, {y});
  auto folded = fold_constant_nodes(g);
  ASSERT_TRUE(folded.ok()) << folded.status().to_string();
  EXPECT_EQ(*folded, 1);
  ASSERT_EQ(g.nodes().size(), 1u);
  ASSERT_TRUE(c->has_initializer());
  EXPECT_EQ(c->producer(), nullptr);
  EXPECT_EQ(c->initializer()->dims(), std::vector<int64_t>{3});
  EXPECT_EQ(c->initializer()->data<float>()[1], -2.0f);
  EXPECT_TRUE(ir::verify(g).ok());
  EXPECT_EQ(g.weight_bytes(), 12u);
}

}  // namespace
}  // namespace kiln::compiler

#include "runtime/graph_executor.h"

namespace kiln::compiler {
namespace {

// d = (a + b) * a; Gradient(xs=[a, b], y=d) = (2a + b, a), checked against the closed form.
TEST(GradientLoweringTest, LowersToOpsComputingTheGradient) {
  auto g = std::make_shared<ir::Graph>();
  g->opset_imports()[""] = 13;
  g->opset_imports()["ai.onnx.preview.training"] = 1;
  auto val = [&](const char* name) {
    ir::Value* v = *g->add_value(name);
    v->type() = {DataType::kFloat32, Shape{3}};
    return v;
  };
  ir::Value *a = val("a"), *b = val("b"), *c = val("c"), *d = val("d"), *da = val("da"), *db = val("db");
  g->inputs() = {a, b};
  g->outputs() = {d, da, db};
  g->add_node("add", "Add", "", 13, {a, b}, {c});
  g->add_node("mul", "Mul", "", 13, {c, a}, {d});
  ir::Node* grad = g->add_node("grad", "Gradient", "ai.onnx.preview.training", 1, {a, b}, {da, db});
  grad->attrs()["xs"].kind = ir::AttrKind::kStrings;
  grad->attrs()["xs"].strings = {"a", "b"};
  grad->attrs()["y"] = ir::Attribute::from_string("d");
  auto lowered = lower_gradient_nodes(*g);
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  EXPECT_EQ(*lowered, 1);
  for (const auto& n : g->nodes()) EXPECT_NE(n->op_type(), "Gradient");
  auto ex = rt::GraphExecutor::create(g);
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  std::vector<RuntimeValue> out;
  ASSERT_TRUE((*ex)->run({{"a", Tensor::from_vector<float>({1, 2, -3})}, {"b", Tensor::from_vector<float>({4, 0.5f, 2})}},
                         &out).ok());
  const float want_da[] = {2 * 1 + 4, 2 * 2 + 0.5f, 2 * -3 + 2}, want_db[] = {1, 2, -3};
  for (int i = 0; i < 3; ++i) {
    EXPECT_FLOAT_EQ(out[1].tensor().data<float>()[i], want_da[i]);
    EXPECT_FLOAT_EQ(out[2].tensor().data<float>()[i], want_db[i]);
  }
}

TEST(GradientLoweringTest, UnsupportedOpOnThePathIsAnError) {
  ir::Graph g;
  ir::Value* a = *g.add_value("a");
  a->type() = {DataType::kFloat32, Shape{2}};
  ir::Value* y = *g.add_value("y");
  y->type() = {DataType::kFloat32, Shape{2}};
  ir::Value* dy = *g.add_value("dy");
  g.inputs() = {a};
  g.outputs() = {dy};
  g.add_node("exp", "Exp", "", 13, {a}, {y});
  ir::Node* grad = g.add_node("grad", "Gradient", "ai.onnx.preview.training", 1, {a}, {dy});
  grad->attrs()["xs"].kind = ir::AttrKind::kStrings;
  grad->attrs()["xs"].strings = {"a"};
  grad->attrs()["y"] = ir::Attribute::from_string("y");
  auto lowered = lower_gradient_nodes(g);
  ASSERT_FALSE(lowered.ok());
  EXPECT_NE(lowered.status().to_string().find("(Exp)"), std::string::npos);
}

}  // namespace
}  // namespace kiln::compiler
