// Memory planning: hand-computed lifetimes, offsets, arena, naive and lower bound on small
// graphs, and invariants (no overlap in time and space, alignment, bounds) on random DAGs.
#include "compiler/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

namespace kiln::compiler {
namespace {

// A float32 value of `floats` elements (4 bytes each).
ir::Value* vec(ir::Graph& g, const std::string& name, int64_t floats) {
  ir::Value* v = *g.add_value(name);
  v->type() = {DataType::kFloat32, Shape{floats}};
  return v;
}

const Slot& slot(const MemoryPlan& p, const std::string& name) {
  for (const Slot& s : p.slots)
    if (s.name == name) return s;
  ADD_FAILURE() << "no slot for " << name;
  static const Slot none;
  return none;
}

// x -> a(64 B) -> b(128 B) -> c(32 B, rounds to 64) -> y(256 B, output)
// Lifetimes a[0,1] b[1,2] c[2,3] y[3,3]. Live bytes per step: 64, 192, 192, 320.
// Greedy by size: y@0, b@0 (no overlap with y), a@128 (above b), c@256 (above y).
TEST(MemoryPlanTest, Chain) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 16);
  ir::Value* a = vec(g, "a", 16);
  ir::Value* b = vec(g, "b", 32);
  ir::Value* c = vec(g, "c", 8);
  ir::Value* y = vec(g, "y", 64);
  g.inputs() = {x};
  g.outputs() = {y};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Conv", "", 17, {a}, {b});
  g.add_node("n2", "Conv", "", 17, {b}, {c});
  g.add_node("n3", "Conv", "", 17, {c}, {y});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_EQ(p->slots.size(), 4u);  // the graph input is not in the arena
  EXPECT_EQ(p->naive_bytes, 512u);
  EXPECT_EQ(p->lower_bound_bytes, 320u);
  EXPECT_EQ(p->arena_bytes, 320u);
  EXPECT_EQ(slot(*p, "a").offset, 128u);
  EXPECT_EQ(slot(*p, "b").offset, 0u);
  EXPECT_EQ(slot(*p, "c").offset, 256u);
  EXPECT_EQ(slot(*p, "c").size, 64u);
  EXPECT_EQ(slot(*p, "y").offset, 0u);
  EXPECT_EQ(slot(*p, "a").first, 0);
  EXPECT_EQ(slot(*p, "a").last, 1);
  EXPECT_EQ(slot(*p, "y").last, 3);
  EXPECT_EQ(p->inplace_count, 0);
}

// a(256) feeds b(128) and c(64); b and c feed y(64, output).
// Lifetimes a[0,2] b[1,3] c[2,3] y[3,3]; live: 256, 384, 448, 256.
// Greedy by size: a@0, b@256, c@384, y@0 (a is dead at step 3).
TEST(MemoryPlanTest, Diamond) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 4);
  ir::Value* a = vec(g, "a", 64);
  ir::Value* b = vec(g, "b", 32);
  ir::Value* c = vec(g, "c", 16);
  ir::Value* y = vec(g, "y", 16);
  g.inputs() = {x};
  g.outputs() = {y};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Conv", "", 17, {a}, {b});
  g.add_node("n2", "Conv", "", 17, {a}, {c});
  g.add_node("n3", "Add", "", 14, {b, c}, {y});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->naive_bytes, 512u);
  EXPECT_EQ(p->lower_bound_bytes, 448u);
  EXPECT_EQ(p->arena_bytes, 448u);
  EXPECT_EQ(slot(*p, "a").offset, 0u);
  EXPECT_EQ(slot(*p, "b").offset, 256u);
  EXPECT_EQ(slot(*p, "c").offset, 384u);
  EXPECT_EQ(slot(*p, "y").offset, 0u);
  EXPECT_EQ(slot(*p, "a").last, 2);
}

// a = Conv(x); r = Relu(a); b = Conv(r); s = Add(b, a); z = Sigmoid(s) (output). All 128 B.
// Relu may not overwrite a (a is read again by the Add); Sigmoid overwrites s (s dies there).
// Buffers a[0,3] r[1,2] b[2,3] s+z[3,4]; live: 128, 256, 384, 384, 128.
// Greedy by size (ties by first step): a@0, r@128, b@256, s+z@128 (r is dead at step 3).
TEST(MemoryPlanTest, ResidualWithInPlace) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 32);
  ir::Value* a = vec(g, "a", 32);
  ir::Value* r = vec(g, "r", 32);
  ir::Value* b = vec(g, "b", 32);
  ir::Value* s = vec(g, "s", 32);
  ir::Value* z = vec(g, "z", 32);
  g.inputs() = {x};
  g.outputs() = {z};
  g.add_node("conv1", "Conv", "", 17, {x}, {a});
  g.add_node("relu", "Relu", "", 14, {a}, {r});
  g.add_node("conv2", "Conv", "", 17, {r}, {b});
  g.add_node("add", "Add", "", 14, {b, a}, {s});
  g.add_node("sig", "Sigmoid", "", 13, {s}, {z});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->inplace_count, 1);
  EXPECT_EQ(p->naive_bytes, 640u);
  EXPECT_EQ(p->lower_bound_bytes, 384u);
  EXPECT_EQ(p->arena_bytes, 384u);
  EXPECT_EQ(slot(*p, "a").offset, 0u);
  EXPECT_EQ(slot(*p, "r").offset, 128u);
  EXPECT_EQ(slot(*p, "b").offset, 256u);
  EXPECT_EQ(slot(*p, "s").offset, 128u);
  EXPECT_EQ(slot(*p, "z").offset, 128u);
  EXPECT_EQ(slot(*p, "z").buffer, slot(*p, "s").buffer);
  EXPECT_EQ(p->slots[slot(*p, "z").inplace_of].name, "s");
  EXPECT_EQ(slot(*p, "r").inplace_of, -1);
  EXPECT_EQ(slot(*p, "a").last, 3);
}

// a(256) -> Relu -> b(256) -> Conv -> y(64, output).
// In place: buffer a+b [0,2], y [2,2]: lower bound 320 (step 2), arena 320.
// Without: a[0,1] b[1,2] y[2,2]: live 256, 512, 320; a@0, b@256, y@0: arena 512.
TEST(MemoryPlanTest, InPlaceLowersBoundAndArena) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 64);
  ir::Value* a = vec(g, "a", 64);
  ir::Value* b = vec(g, "b", 64);
  ir::Value* y = vec(g, "y", 16);
  g.inputs() = {x};
  g.outputs() = {y};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Relu", "", 14, {a}, {b});
  g.add_node("n2", "Conv", "", 17, {b}, {y});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->inplace_count, 1);
  EXPECT_EQ(p->naive_bytes, 576u);
  EXPECT_EQ(p->lower_bound_bytes, 320u);
  EXPECT_EQ(p->arena_bytes, 320u);
  EXPECT_EQ(slot(*p, "a").offset, 0u);
  EXPECT_EQ(slot(*p, "b").offset, 0u);
  EXPECT_EQ(slot(*p, "y").offset, 256u);

  auto q = plan_memory(g, PlanOptions{.allow_inplace = false});
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(q->inplace_count, 0);
  EXPECT_EQ(q->naive_bytes, 576u);
  EXPECT_EQ(q->lower_bound_bytes, 512u);
  EXPECT_EQ(q->arena_bytes, 512u);
  EXPECT_EQ(slot(*q, "a").offset, 0u);
  EXPECT_EQ(slot(*q, "b").offset, 256u);
  EXPECT_EQ(slot(*q, "y").offset, 0u);
}

// In place must not fire when sizes differ, the input is a graph output, or the input is read
// twice by the node.
TEST(MemoryPlanTest, InPlaceOnlyWhenSafe) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 16);
  ir::Value* a = vec(g, "a", 16);
  ir::Value* b = vec(g, "b", 16);   // Relu(a) but a is a graph output
  ir::Value* c = vec(g, "c", 16);   // Conv(b)
  ir::Value* d = vec(g, "d", 16);   // Clip(c, c): c read twice
  ir::Value* e = vec(g, "e", 16);   // Conv(d)
  ir::Value* f = vec(g, "f", 8);    // "Relu" with a different output size
  g.inputs() = {x};
  g.outputs() = {a, f};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Relu", "", 14, {a}, {b});
  g.add_node("n2", "Conv", "", 17, {b}, {c});
  g.add_node("n3", "Clip", "", 13, {c, c}, {d});
  g.add_node("n4", "Conv", "", 17, {d}, {e});
  g.add_node("n5", "Relu", "", 14, {e}, {f});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->inplace_count, 0);
  EXPECT_EQ(slot(*p, "a").last, 5);  // graph output: to the end
}

// a is read only by the If node's then-branch: it must live until the If (step 2), not die at
// its producer. b[1,3] c[2,3] y[3,3]; sizes a 64, b 128, c 64, y 64; live: 64, 192, 256, 256.
// Greedy by size: b@0, a@128, c@192, y@128 (a is dead at step 3).
TEST(MemoryPlanTest, ValueReadBySubgraphLivesUntilTheNode) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 4);
  ir::Value* a = vec(g, "a", 16);
  ir::Value* b = vec(g, "b", 32);
  ir::Value* c = vec(g, "c", 16);
  ir::Value* y = vec(g, "y", 16);
  g.inputs() = {x};
  g.outputs() = {y};
  auto branch = std::make_shared<ir::Graph>("then");
  ir::Value* outer_a = *branch->add_value("a");
  outer_a->type() = a->type();
  outer_a->set_outer_scope(true);
  ir::Value* t = *branch->add_value("t");
  t->type() = a->type();
  branch->add_node("inner", "Relu", "", 14, {outer_a}, {t});
  branch->outputs() = {t};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Conv", "", 17, {x}, {b});
  ir::Node* if_node = g.add_node("if", "If", "", 16, {x}, {c});
  if_node->attrs()["then_branch"] = ir::Attribute::from_graph(branch);
  g.add_node("n3", "Add", "", 14, {b, c}, {y});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(slot(*p, "a").first, 0);
  EXPECT_EQ(slot(*p, "a").last, 2);
  EXPECT_EQ(p->naive_bytes, 320u);
  EXPECT_EQ(p->lower_bound_bytes, 256u);
  EXPECT_EQ(p->arena_bytes, 256u);
  EXPECT_EQ(slot(*p, "b").offset, 0u);
  EXPECT_EQ(slot(*p, "a").offset, 128u);
  EXPECT_EQ(slot(*p, "c").offset, 192u);
  EXPECT_EQ(slot(*p, "y").offset, 128u);
}

// a is read only two subgraph levels down (an If inside a Loop body); b is produced inside the
// body and is not an outer value. a lives until the Loop (step 2).
TEST(MemoryPlanTest, ValueReadByNestedSubgraph) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 4);
  ir::Value* a = vec(g, "a", 16);
  ir::Value* e = vec(g, "e", 16);
  ir::Value* c = vec(g, "c", 16);
  g.inputs() = {x};
  g.outputs() = {c};
  auto inner = std::make_shared<ir::Graph>("inner");
  ir::Value* inner_a = *inner->add_value("a");
  inner_a->type() = a->type();
  inner_a->set_outer_scope(true);
  ir::Value* t = *inner->add_value("t");
  t->type() = a->type();
  inner->add_node("inner_relu", "Relu", "", 14, {inner_a}, {t});
  inner->outputs() = {t};
  auto body = std::make_shared<ir::Graph>("body");
  ir::Value* i = *body->add_value("i");
  i->type() = {DataType::kInt64, Shape{}};
  ir::Value* bv = *body->add_value("b");
  bv->type() = a->type();
  body->inputs() = {i};
  ir::Node* nested_if = body->add_node("nested_if", "If", "", 16, {i}, {bv});
  nested_if->attrs()["then_branch"] = ir::Attribute::from_graph(inner);
  body->outputs() = {bv};
  g.add_node("n0", "Conv", "", 17, {x}, {a});
  g.add_node("n1", "Conv", "", 17, {x}, {e});
  ir::Node* loop = g.add_node("loop", "Loop", "", 16, {e}, {c});
  loop->attrs()["body"] = ir::Attribute::from_graph(body);
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(slot(*p, "a").last, 2);
  EXPECT_EQ(slot(*p, "e").last, 2);
  EXPECT_EQ(p->lower_bound_bytes, 192u);  // a, e, c at step 2, 64 B each
  EXPECT_EQ(p->arena_bytes, 192u);
}

TEST(MemoryPlanTest, DynamicValuesGoToNotes) {
  ir::Graph g;
  ir::Value* x = *g.add_value("x");
  x->type() = {DataType::kFloat32, Shape{Dim::symbolic("batch"), 8}};
  ir::Value* a = *g.add_value("a");
  a->type() = {DataType::kFloat32, Shape{Dim::symbolic("batch"), 8}};
  ir::Value* s = vec(g, "s", 2);
  g.inputs() = {x};
  g.outputs() = {a, s};
  g.add_node("relu", "Relu", "", 14, {x}, {a});
  g.add_node("shape", "Shape", "", 15, {a}, {s});
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->dynamic_values, 1);
  ASSERT_EQ(p->slots.size(), 1u);
  EXPECT_EQ(p->slots[0].name, "s");
  ASSERT_FALSE(p->notes.empty());
  EXPECT_NE(p->notes[0].find("'a'"), std::string::npos);
  EXPECT_NE(p->notes[0].find("planned at run time"), std::string::npos);
}

TEST(MemoryPlanTest, RejectsGraphNotInExecutionOrder) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 4);
  ir::Value* a = vec(g, "a", 4);
  ir::Value* y = vec(g, "y", 4);
  g.inputs() = {x};
  g.outputs() = {y};
  g.add_node("late_reader", "Relu", "", 14, {a}, {y});
  g.add_node("producer", "Relu", "", 14, {x}, {a});
  auto p = plan_memory(g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().to_string().find("late_reader"), std::string::npos);
}

TEST(MemoryPlanTest, RejectsSizeOverflow) {
  ir::Graph g;
  ir::Value* x = vec(g, "x", 4);
  ir::Value* huge = *g.add_value("huge");
  huge->type() = {DataType::kFloat32, Shape{int64_t{1} << 40, int64_t{1} << 40}};
  g.inputs() = {x};
  g.outputs() = {huge};
  g.add_node("expand", "Expand", "", 13, {x}, {huge});
  auto p = plan_memory(g);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().to_string().find("huge"), std::string::npos);
}

TEST(MemoryPlanTest, EmptyGraph) {
  ir::Graph g;
  auto p = plan_memory(g);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->arena_bytes, 0u);
  EXPECT_EQ(p->naive_bytes, 0u);
  EXPECT_EQ(p->lower_bound_bytes, 0u);
}

// Random DAGs: lifetimes recomputed here independently; checks that slots overlapping in time
// never overlap in memory (except in-place pairs, which share a buffer and touch at one step),
// alignment, lower bound == peak live bytes, and lower_bound <= arena <= naive.
TEST(MemoryPlanTest, RandomDagInvariants) {
  const char* ops[] = {"Conv", "Add", "Relu", "Sigmoid", "MatMul", "Tanh"};
  int total_inplace = 0;
  for (int seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    ir::Graph g;
    std::vector<ir::Value*> avail;
    const int num_inputs = uni(1, 3);
    for (int i = 0; i < num_inputs; ++i) {
      ir::Value* v = vec(g, str_format("in%d", i), uni(1, 300));
      g.inputs().push_back(v);
      avail.push_back(v);
    }
    const int num_nodes = uni(1, 60);
    std::vector<ir::Value*> produced;
    for (int n = 0; n < num_nodes; ++n) {
      const std::string op = ops[uni(0, 5)];
      const bool unary = op == "Relu" || op == "Sigmoid" || op == "Tanh";
      std::vector<ir::Value*> ins;
      // Prefer recent values so chains and in-place opportunities are common.
      const int num_in = unary ? 1 : uni(1, 3);
      for (int i = 0; i < num_in; ++i) {
        const int lo = std::max(0, static_cast<int>(avail.size()) - 6);
        ins.push_back(avail[uni(uni(0, 3) == 0 ? 0 : lo, static_cast<int>(avail.size()) - 1)]);
      }
      const int num_out = unary ? 1 : uni(1, 2);
      std::vector<ir::Value*> outs;
      for (int o = 0; o < num_out; ++o) {
        const int64_t floats =
            unary && uni(0, 3) != 0 ? ins[0]->shape().num_elements() : uni(0, 3000);
        outs.push_back(vec(g, str_format("v%d_%d", n, o), floats));
      }
      g.add_node(str_format("n%d", n), op, "", 14, ins, outs);
      for (ir::Value* v : outs) {
        avail.push_back(v);
        produced.push_back(v);
      }
    }
    for (ir::Value* v : produced)
      if (uni(0, 9) == 0) g.outputs().push_back(v);
    if (g.outputs().empty()) g.outputs().push_back(produced.back());

    // Reference lifetimes.
    std::map<std::string, std::pair<int, int>> life;
    std::map<std::string, size_t> size;
    for (int s = 0; s < num_nodes; ++s) {
      const ir::Node& node = *g.nodes()[s];
      for (ir::Value* in : node.inputs()) {
        auto it = life.find(in->name());
        if (it != life.end()) it->second.second = std::max(it->second.second, s);
      }
      for (ir::Value* out : node.outputs()) {
        life[out->name()] = {s, s};
        size[out->name()] = (static_cast<size_t>(out->shape().num_elements()) * 4 + 63) / 64 * 64;
      }
    }
    for (ir::Value* out : g.outputs()) life[out->name()].second = num_nodes - 1;

    for (bool inplace : {false, true}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + (inplace ? " in place" : ""));
      auto p = plan_memory(g, PlanOptions{.allow_inplace = inplace});
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      ASSERT_EQ(p->slots.size(), produced.size());
      size_t naive = 0;
      for (const Slot& s : p->slots) {
        ASSERT_EQ(s.first, life[s.name].first) << s.name;
        ASSERT_EQ(s.last, life[s.name].second) << s.name;
        ASSERT_EQ(s.size, size[s.name]) << s.name;
        ASSERT_EQ(s.offset % 64, 0u) << s.name;
        naive += s.size;
      }
      EXPECT_EQ(p->naive_bytes, naive);
      if (!inplace) {
        EXPECT_EQ(p->inplace_count, 0);
        size_t peak = 0;
        for (int st = 0; st < num_nodes; ++st) {
          size_t live = 0;
          for (const Slot& s : p->slots)
            if (s.first <= st && st <= s.last) live += s.size;
          peak = std::max(peak, live);
        }
        EXPECT_EQ(p->lower_bound_bytes, peak);
      }
      for (size_t i = 0; i < p->slots.size(); ++i) {
        const Slot& a = p->slots[i];
        EXPECT_LE(a.offset + a.size, p->arena_bytes) << a.name;
        if (a.inplace_of >= 0) {
          const Slot& src = p->slots[a.inplace_of];
          EXPECT_EQ(src.last, a.first) << a.name;  // the input dies where the output is born
          EXPECT_EQ(src.size, a.size);
          EXPECT_EQ(src.offset, a.offset);
        }
        for (size_t j = i + 1; j < p->slots.size(); ++j) {
          const Slot& b = p->slots[j];
          if (a.buffer == b.buffer || a.size == 0 || b.size == 0) continue;
          const bool in_time = a.first <= b.last && b.first <= a.last;
          const bool in_space = a.offset < b.offset + b.size && b.offset < a.offset + a.size;
          ASSERT_FALSE(in_time && in_space) << a.name << " and " << b.name;
        }
      }
      EXPECT_LE(p->lower_bound_bytes, p->arena_bytes);
      EXPECT_LE(p->arena_bytes, p->naive_bytes);
      total_inplace += p->inplace_count;
    }
  }
  EXPECT_GT(total_inplace, 100);  // the generator does exercise in-place reuse
}

}  // namespace
}  // namespace kiln::compiler
