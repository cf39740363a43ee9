// IR: building graphs, ordering, verification and the text dump.
#include "ir/graph.h"

#include <gtest/gtest.h>

namespace kiln::ir {
namespace {

// x -> Relu -> a -> Neg -> b ; added out of order to exercise the sort.
std::unique_ptr<Graph> two_node_graph_out_of_order() {
  auto g = std::make_unique<Graph>("g");
  Value* x = *g->add_value("x");
  x->type() = TensorType{DataType::kFloat32, Shape{Dim::symbolic("batch"), 4}};
  Value* a = *g->add_value("a");
  Value* b = *g->add_value("b");
  g->inputs().push_back(x);
  g->outputs().push_back(b);
  g->add_node("neg", "Neg", "", 13, {a}, {b});
  g->add_node("relu", "Relu", "", 14, {x}, {a});
  return g;
}

TEST(GraphTest, DuplicateValueNamesAreRejected) {
  Graph g;
  ASSERT_TRUE(g.add_value("x").ok());
  auto again = g.add_value("x");
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().to_string().find("'x'"), std::string::npos);
}

TEST(GraphTest, TopologicalSortPutsProducersFirst) {
  auto g = two_node_graph_out_of_order();
  EXPECT_FALSE(verify(*g).ok());  // 'a' is used before it is defined
  ASSERT_TRUE(g->topological_sort().ok());
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[0]->name(), "relu");
  EXPECT_EQ(g->nodes()[1]->name(), "neg");
  EXPECT_TRUE(verify(*g).ok());
}

TEST(GraphTest, CycleIsAnErrorNamingANode) {
  Graph g;
  Value* a = *g.add_value("a");
  Value* b = *g.add_value("b");
  g.outputs().push_back(b);
  g.add_node("n1", "Relu", "", 14, {b}, {a});
  g.add_node("n2", "Relu", "", 14, {a}, {b});
  Status s = g.topological_sort();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("cycle"), std::string::npos);
  EXPECT_NE(s.to_string().find("(Relu)"), std::string::npos);
}

TEST(GraphTest, VerifierRejectsUndefinedOutputAndDoubleProducer) {
  Graph g;
  Value* x = *g.add_value("x");
  Value* y = *g.add_value("y");
  Value* z = *g.add_value("z");
  g.inputs().push_back(x);
  g.outputs().push_back(z);
  g.add_node("n1", "Relu", "", 14, {x}, {y});
  EXPECT_FALSE(verify(g).ok());  // z never defined
  g.add_node("n2", "Relu", "", 14, {x}, {y});
  g.outputs()[0] = y;
  Status s = verify(g);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("produced twice"), std::string::npos);
}

TEST(GraphTest, SubgraphReadsOuterScopeValue) {
  Graph g;
  Value* x = *g.add_value("x");
  Value* c = *g.add_value("cond");
  Value* y = *g.add_value("y");
  g.inputs() = {x, c};
  g.outputs() = {y};
  auto body = std::make_shared<Graph>("then");
  Value* outer = *body->add_value("x");
  outer->set_outer_scope(true);
  Value* r = *body->add_value("r");
  body->outputs().push_back(r);
  body->add_node("inner", "Relu", "", 14, {outer}, {r});
  Node* n = g.add_node("if", "If", "", 13, {c}, {y});
  n->attrs()["then_branch"] = Attribute::from_graph(body);
  n->attrs()["else_branch"] = Attribute::from_graph(body);
  EXPECT_TRUE(verify(g).ok());
  EXPECT_EQ(n->subgraphs().size(), 2u);
}

TEST(GraphTest, TextDumpShowsTypesAttributesAndNames) {
  auto g = two_node_graph_out_of_order();
  ASSERT_TRUE(g->topological_sort().ok());
  g->nodes()[0]->attrs()["alpha"] = Attribute::from_float(0.5f);
  g->nodes()[0]->attrs()["perm"] = Attribute::from_ints({0, 2, 1});
  std::string text = to_text(*g);
  EXPECT_NE(text.find("%x: float32[batch,4]"), std::string::npos) << text;
  EXPECT_NE(text.find("= Relu(%x) {alpha=0.5, perm=[0,2,1]}  # relu"), std::string::npos) << text;
  EXPECT_NE(text.find("return %b"), std::string::npos) << text;
}

TEST(ShapeTest, SymbolicAndStaticDims) {
  Shape s{Dim::symbolic("batch"), 3, Dim()};
  EXPECT_FALSE(s.is_static());
  EXPECT_EQ(s.to_string(), "[batch,3,?]");
  EXPECT_EQ(s.num_elements(), -1);
  Shape t = Shape::from_static({2, 3, 4});
  EXPECT_TRUE(t.is_static());
  EXPECT_EQ(t.num_elements(), 24);
  EXPECT_EQ(Shape().to_string(), "[*]");
}

}  // namespace
}  // namespace kiln::ir
