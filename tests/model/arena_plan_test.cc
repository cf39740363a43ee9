// The arena plan a .kiln carries (model/arena_plan.h): planned by the writer with the runtime's
// lifetimes and the kernels' workspaces, read back as written, and a corrupt plan (a value or a
// workspace outside the arena, two live ranges overlapping, a bad index or version) refused at
// load with a message naming it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "model/arena_plan.h"
#include "model/kiln_model.h"
#include "model_test_util.h"

namespace kiln::model {
namespace {

using test_util::temp_dir;

ir::Value* add_value(ir::Graph& g, const std::string& name, std::vector<int64_t> dims) {
  ir::Value* v = *g.add_value(name);
  v->type().dtype = DataType::kFloat32;
  v->type().shape = Shape::from_static(dims);
  return v;
}

// x[4,16] -> Relu a -> Relu b -> Reshape c[64] (a view of b) -> Relu y; a and y are 256 bytes,
// and the hand-made peak: a and b live together (512), then b/c and y (512).
std::unique_ptr<ir::Graph> chain() {
  auto g = std::make_unique<ir::Graph>("chain");
  ir::Value* x = add_value(*g, "x", {4, 16});
  ir::Value* a = add_value(*g, "a", {4, 16});
  ir::Value* b = add_value(*g, "b", {4, 16});
  ir::Value* shape = *g->add_value("shape");
  shape->type().dtype = DataType::kInt64;
  shape->type().shape = Shape{1};
  shape->set_initializer(Tensor::from_vector<int64_t>({64}));
  ir::Value* c = add_value(*g, "c", {64});
  ir::Value* y = add_value(*g, "y", {64});
  g->add_node("r1", "Relu", "", 17, {x}, {a});
  g->add_node("r2", "Relu", "", 17, {a}, {b});
  g->add_node("view", "Reshape", "", 17, {b, shape}, {c});
  g->add_node("r3", "Relu", "", 17, {c}, {y});
  g->inputs() = {x, shape};
  g->outputs() = {y};
  g->opset_imports()[""] = 17;
  return g;
}

const PlannedValue* find(const ArenaPlan& plan, const std::string& name) {
  for (const PlannedValue& pv : plan.values)
    if (pv.value->name() == name) return &pv;
  return nullptr;
}

TEST(ArenaPlanTest, PlansTheRuntimeLifetimesAndAViewSharesItsBase) {
  auto g = chain();
  auto plan = plan_arena(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_TRUE(plan->has_value());
  const ArenaPlan& p = **plan;
  ASSERT_EQ(p.values.size(), 4u);
  // a, b live together; c is b's place; y is made while c (so b) is read: 2 x 256 bytes.
  EXPECT_EQ(p.arena_bytes, 512u);
  const PlannedValue *a = find(p, "a"), *b = find(p, "b"), *c = find(p, "c"), *y = find(p, "y");
  ASSERT_TRUE(a && b && c && y);
  EXPECT_EQ(c->offset, b->offset);
  EXPECT_NE(a->offset, b->offset);
  EXPECT_NE(y->offset, b->offset);
  EXPECT_TRUE(check_arena_plan(*g, p).ok());
}

TEST(ArenaPlanTest, TheWriterStoresThePlanAndTheLoaderReadsItBack) {
  auto g = chain();
  const std::string path = temp_dir() + "/chain_plan.kiln";
  ASSERT_TRUE(write_model(*g, ModelInfo{}, path).ok());
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_TRUE(loaded->arena_plan.has_value());
  EXPECT_EQ(loaded->arena_plan->arena_bytes, 512u);
  auto planned = plan_arena(*g);
  ASSERT_TRUE(planned.ok() && planned->has_value());
  ASSERT_EQ(loaded->arena_plan->values.size(), (*planned)->values.size());
  for (size_t i = 0; i < (*planned)->values.size(); ++i) {
    EXPECT_EQ(loaded->arena_plan->values[i].value->name(), (*planned)->values[i].value->name());
    EXPECT_EQ(loaded->arena_plan->values[i].offset, (*planned)->values[i].offset);
    EXPECT_EQ(loaded->arena_plan->values[i].size, (*planned)->values[i].size);
  }
  // A file written without one (as before plans existed) loads without one.
  const std::string old = temp_dir() + "/chain_no_plan.kiln";
  ASSERT_TRUE(write_model(*g, ModelInfo{}, old, std::nullopt).ok());
  auto old_loaded = load_model(old);
  ASSERT_TRUE(old_loaded.ok()) << old_loaded.status().to_string();
  EXPECT_FALSE(old_loaded->arena_plan.has_value());
}

TEST(ArenaPlanTest, GraphsWithOpenDimsCarryNoPlan) {
  auto g = chain();
  g->inputs()[0]->type().shape = Shape{Dim::symbolic("n"), 16};
  for (const char* name : {"a", "b"}) g->find_value(name)->type().shape = Shape{Dim::symbolic("n"), 16};
  auto plan = plan_arena(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_FALSE(plan->has_value());
}

// The chain with a 100-byte workspace need on r2 (a -> b), as `kiln compile` records it.
std::unique_ptr<ir::Graph> chain_with_workspace() {
  auto g = chain();
  for (const auto& n : g->nodes())
    if (n->name() == "r2") n->attrs()[kWorkspaceBytesAttr] = ir::Attribute::from_int(100);
  return g;
}

TEST(ArenaPlanTest, AWorkspaceIsLiveDuringItsNodeOnlyAndOverlapsNoValueOfThatStep) {
  auto g = chain_with_workspace();
  auto plan = plan_arena(*g);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  ASSERT_TRUE(plan->has_value());
  const ArenaPlan& p = **plan;
  ASSERT_EQ(p.workspaces.size(), 1u);
  const PlannedWorkspace& ws = p.workspaces[0];
  EXPECT_EQ(ws.node->name(), "r2");
  EXPECT_EQ(ws.size, 128u);  // 100 rounded up to 64
  // r2 reads a and writes b: the workspace overlaps neither; the arena grows by it (512 + 128).
  for (const char* name : {"a", "b"}) {
    const PlannedValue* v = find(p, name);
    EXPECT_TRUE(ws.offset + ws.size <= v->offset || v->offset + v->size <= ws.offset) << name;
  }
  EXPECT_EQ(p.arena_bytes, 640u);
  EXPECT_TRUE(check_arena_plan(*g, p).ok());

  // Written as version 2 and read back as written.
  const std::string path = temp_dir() + "/chain_workspace.kiln";
  ASSERT_TRUE(write_model(*g, ModelInfo{}, path).ok());
  auto loaded = load_model(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_TRUE(loaded->arena_plan.has_value());
  EXPECT_EQ(loaded->arena_plan->arena_bytes, 640u);
  ASSERT_EQ(loaded->arena_plan->workspaces.size(), 1u);
  EXPECT_EQ(loaded->arena_plan->workspaces[0].node->name(), "r2");
  EXPECT_EQ(loaded->arena_plan->workspaces[0].offset, ws.offset);
  EXPECT_EQ(loaded->arena_plan->workspaces[0].size, ws.size);
}

// Writes `plan` (made from the good one by `damage`) and loads it: a refusal containing `want`.
void expect_refused(const std::function<void(ArenaPlan&)>& damage, const std::string& want,
                    std::unique_ptr<ir::Graph> (*make)() = chain) {
  auto g = make();
  auto planned = plan_arena(*g);
  ASSERT_TRUE(planned.ok() && planned->has_value());
  ArenaPlan plan = **planned;
  damage(plan);
  const std::string path = temp_dir() + "/chain_bad_plan.kiln";
  ASSERT_TRUE(write_model(*g, ModelInfo{}, path, plan).ok());
  auto loaded = load_model(path);
  ASSERT_FALSE(loaded.ok()) << "a plan damaged to fail with '" << want << "' loaded";
  const std::string msg = loaded.status().to_string();
  EXPECT_NE(msg.find("arena plan"), std::string::npos) << msg;
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
}

TEST(ArenaPlanTest, ACorruptPlanIsRefusedAtLoad) {
  // An offset past the arena.
  expect_refused([](ArenaPlan& p) { p.values[0].offset = p.arena_bytes; }, "outside the 512-byte arena");
  expect_refused([](ArenaPlan& p) { p.values[1].offset = p.arena_bytes - 64; }, "outside the 512-byte arena");
  // Two values live at the same step at one place (a and b: b is made from a).
  expect_refused(
      [](ArenaPlan& p) {
        for (PlannedValue& pv : p.values)
          if (pv.value->name() == "b" || pv.value->name() == "c") pv.offset = find(p, "a")->offset;
      },
      "overlap in the arena");
  // Half an overlap: y over the upper half of b, which y's producer reads.
  expect_refused(
      [](ArenaPlan& p) {
        const PlannedValue* b = find(p, "b");
        for (PlannedValue& pv : p.values)
          if (pv.value->name() == "y") pv.offset = b->offset + 128;
        p.arena_bytes = std::max(p.arena_bytes, b->offset + 128 + 256);
      },
      "overlap in the arena");
  // A size below the value's, an unaligned offset, a value twice, an arena larger than its values.
  expect_refused([](ArenaPlan& p) { p.values[0].size = 192; }, "needs 256 bytes");
  expect_refused([](ArenaPlan& p) { p.values[0].offset += 8; }, "not a multiple of 64");
  expect_refused([](ArenaPlan& p) { p.values[1] = p.values[0]; }, "planned twice");
  expect_refused([](ArenaPlan& p) { p.arena_bytes = 1u << 30; }, "more than its");
  // A graph input is not an activation.
  expect_refused(
      [](ArenaPlan& p) {
        for (PlannedValue& pv : p.values)
          if (pv.value->name() == "a") pv.value = pv.value->producer()->input(0);  // x
      },
      "not an activation");
}

TEST(ArenaPlanTest, ACorruptWorkspaceIsRefusedAtLoad) {
  // Over a, which r2 reads while its workspace is in use.
  expect_refused([](ArenaPlan& p) { p.workspaces[0].offset = find(p, "a")->offset; }, "overlap in the arena",
                 chain_with_workspace);
  expect_refused([](ArenaPlan& p) { p.workspaces[0].offset = p.arena_bytes - 64; }, "outside the 640-byte arena",
                 chain_with_workspace);
  expect_refused([](ArenaPlan& p) { p.workspaces[0].offset += 8; }, "not a positive multiple of 64",
                 chain_with_workspace);
  expect_refused([](ArenaPlan& p) { p.workspaces[0].size = 0; }, "not a positive multiple of 64",
                 chain_with_workspace);
  expect_refused([](ArenaPlan& p) { p.workspaces.push_back(p.workspaces[0]); }, "two planned workspaces",
                 chain_with_workspace);
  // A workspace planned over a value of another step is fine; one over y, made by r3 while b's
  // place is read, is not when placed on r3.
  expect_refused(
      [](ArenaPlan& p) {
        p.workspaces[0].node = find(p, "y")->value->producer();
        p.workspaces[0].offset = find(p, "y")->offset;
      },
      "overlap in the arena", chain_with_workspace);
}

}  // namespace
}  // namespace kiln::model
