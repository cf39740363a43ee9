// The pass manager: levels, disabling, the fusion switch file, records and the verifier
// naming the pass that broke the graph.
#include "compiler/pass_manager.h"

#include <gtest/gtest.h>

#include "pass_test_util.h"

namespace kiln::compiler {
namespace {

std::vector<std::string> names_run(const CompiledModel& c) {
  std::vector<std::string> out;
  for (const PassRecord& r : c.passes) out.push_back(r.name);
  return out;
}

const char* kModel = R"(<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,3] y) {
  k = Constant <value = float {1}> ()
  a = Identity(x)
  b = Mul(a, k)
  dead = Sigmoid(x)
  y = Relu(b)
})";

TEST(PassManagerTest, LevelsChooseThePasses) {
  auto o0 = testing::compile_text(kModel, 0);
  ASSERT_TRUE(o0.ok()) << o0.status().to_string();
  EXPECT_EQ(names_run(*o0), (std::vector<std::string>{"constant_node_folding", "shape_inference",
                                                      "custom_op_lowering", "gradient_lowering", "dead_node_removal",
                                                      "precision_assignment"}));
  EXPECT_EQ(o0->nodes_before, 5u);
  EXPECT_EQ(o0->graph->nodes().size(), 3u);  // Identity, Mul, Relu
  auto o3 = testing::compile_text(kModel, 3);
  ASSERT_TRUE(o3.ok());
  // -O3 runs every registered pass, in registry order; -O1 the ones of level 1 and below.
  std::vector<std::string> all, level1;
  for (const PassInfo& p : PassRegistry::instance().passes()) {
    all.push_back(p.name);
    if (p.min_level <= 1) level1.push_back(p.name);
  }
  EXPECT_EQ(names_run(*o3), all);
  std::vector<std::string> expected_level1{"constant_node_folding", "shape_inference",        "custom_op_lowering",
                                           "gradient_lowering",
                                           "constant_folding",      "symbolic_shape_folding", "algebraic_simplify",
                                           "batchnorm_folding",     "cse",                    "dead_node_removal",
                                           "precision_assignment"};
  EXPECT_EQ(level1, expected_level1);
  auto o1 = testing::compile_text(kModel, 1);
  ASSERT_TRUE(o1.ok());
  EXPECT_EQ(names_run(*o1), level1);
  EXPECT_EQ(o3->graph->nodes().size(), 1u);
  EXPECT_EQ(testing::changed(*o3, "constant_node_folding"), 1);
  EXPECT_EQ(testing::changed(*o3, "algebraic_simplify"), 2);
  EXPECT_EQ(testing::changed(*o3, "dead_node_removal"), 1);
  for (const PassRecord& r : o3->passes) EXPECT_GE(r.ms, 0.0);
}

TEST(PassManagerTest, DisablingValidatesNames) {
  PassOptions o;
  o.disabled = {"cse", "dead_node_removal"};
  EXPECT_TRUE(validate_pass_options(o).ok());
  o.disabled = {"no_such_pass"};
  Status s = validate_pass_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("no_such_pass"), std::string::npos);
  EXPECT_NE(s.to_string().find("algebraic_simplify"), std::string::npos);  // lists the passes
  o.disabled = {"shape_inference"};
  s = validate_pass_options(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("required"), std::string::npos);
  o.disabled = {};
  o.opt_level = 4;
  EXPECT_FALSE(validate_pass_options(o).ok());
  EXPECT_FALSE(testing::compile_text(kModel, 3, {"bogus"}).ok());
}

TEST(PassManagerTest, DisabledPassDoesNotRun) {
  auto c = testing::compile_text(kModel, 3, {"dead_node_removal"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(testing::changed(*c, "dead_node_removal"), -1);
  EXPECT_EQ(testing::count_op(*c->graph, "Sigmoid"), 1);
}

TEST(FusionSwitchTest, TextForm) {
  auto d = parse_fusion_switch_text("# ATC style\nalgebraic_simplify:off\n cse : off \n", "sw.cfg");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, (std::set<std::string>{"algebraic_simplify", "cse"}));
  auto on = parse_fusion_switch_text("cse:on\n", "sw.cfg");
  ASSERT_TRUE(on.ok());
  EXPECT_TRUE(on->empty());
  auto bad = parse_fusion_switch_text("ConvBatchnormFusionPass:off\n", "sw.cfg");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("ConvBatchnormFusionPass"), std::string::npos);
  EXPECT_NE(bad.status().to_string().find("sw.cfg"), std::string::npos);
  EXPECT_FALSE(parse_fusion_switch_text("cse\n", "sw.cfg").ok());
  EXPECT_FALSE(parse_fusion_switch_text("cse:maybe\n", "sw.cfg").ok());
}

// Every registered pass that may be switched off.
std::set<std::string> optional_passes() {
  std::set<std::string> names;
  for (const PassInfo& p : PassRegistry::instance().passes())
    if (!p.required) names.insert(p.name);
  return names;
}

TEST(FusionSwitchTest, AllOffKeepsRequiredPasses) {
  auto d = parse_fusion_switch_text("ALL:off\nshape_inference:off\n", "sw.cfg");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(*d, optional_passes());
  EXPECT_TRUE(d->count("dead_node_removal") && d->count("cse")) << "the optional passes include these";
  PassOptions o;
  o.disabled = *d;
  EXPECT_TRUE(validate_pass_options(o).ok());
  for (const PassInfo& p : PassRegistry::instance().passes())
    if (p.required) EXPECT_TRUE(pass_enabled(p, o)) << p.name;
}

TEST(FusionSwitchTest, JsonForm) {
  auto d = parse_fusion_switch_text(R"({"Switch":{"GraphFusion":{"cse":"on","ALL":"off"},"UBFusion":{}}})",
                                    "sw.json");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  // ALL applies first, so the named "on" wins whatever the key order.
  std::set<std::string> expected = optional_passes();
  expected.erase("cse");
  EXPECT_EQ(*d, expected);
  EXPECT_FALSE(parse_fusion_switch_text(R"({"Switch":{"GraphFusion":{"Nope":"off"}}})", "sw.json").ok());
  EXPECT_FALSE(parse_fusion_switch_text(R"({"Switch":{"Other":{}}})", "sw.json").ok());
  EXPECT_FALSE(parse_fusion_switch_text(R"({"Switch": )", "sw.json").ok());
  EXPECT_FALSE(parse_fusion_switch_file("/nonexistent/switch.cfg").ok());
}

TEST(PassManagerTest, VerifierNamesThePassThatBrokeTheGraph) {
  ir::Graph g;
  ir::Value* x = *g.add_value("x");
  x->type() = {DataType::kFloat32, Shape{2}};
  ir::Value* y = *g.add_value("y");
  g.inputs() = {x};
  g.outputs() = {y};
  g.add_node("r", "Relu", "", 14, {x}, {y});
  PassRegistry reg;
  PassInfo fine{"fine", 0, false, "does nothing", [](ir::Graph&, PassContext&) { return ok_status(); }};
  // Drops every node: the graph output is no longer produced.
  PassInfo breaker{"breaker", 0, false, "breaks the graph", [](ir::Graph& gr, PassContext& ctx) {
                     gr.remove_nodes_if([](const ir::Node&) { return true; });
                     ctx.add_changed(1);
                     return ok_status();
                   }};
  ASSERT_TRUE(reg.add(fine).ok());
  ASSERT_TRUE(reg.add(breaker).ok());
  EXPECT_FALSE(reg.add(fine).ok());  // names are unique
  PassOptions o;
  o.verify_each_pass = true;
  PassContext ctx(o);
  Status s = run_passes(g, ctx, reg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("'breaker'"), std::string::npos) << s.to_string();
  ASSERT_EQ(ctx.records().size(), 2u);
  EXPECT_EQ(ctx.records()[1].changed, 1);
}

}  // namespace
}  // namespace kiln::compiler
