// Memory-aware scheduling: picks another topological order of the same nodes when it
// lowers the planned activation arena. Exporters emit nodes in the order the framework
// traced them, which can keep several large branch tensors alive at once (e.g. every
// projection of a block computed before any is consumed); running each branch to its
// reduction first keeps one alive at a time.
//
// Candidate orders come from two list schedulers over the ready nodes:
//   - memory-greedy: run the ready node whose outputs minus the inputs it frees is
//     smallest (Sethi-Ullman-like; frees before it allocates);
//   - depth-first: keep consuming what was produced last, so a chain runs to its end.
// Each candidate is planned with plan_memory and kept only if its arena is smaller than the
// current order's, so the pass never makes the plan worse.
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "compiler/memory_plan.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {
namespace {

// Bytes of a value with a static shape and known dtype; 0 when only known at run time
// (such values are not in the arena, so they do not steer the order either).
int64_t planned_bytes(const ir::Value& v) {
  const int bits = dtype_bits(v.dtype());
  if (!v.shape().is_static() || bits <= 0) return 0;
  // In double: the size only ranks candidates, and a hostile shape must not overflow.
  double bytes = bits / 8.0;
  for (int64_t d : v.shape().static_dims()) bytes *= static_cast<double>(d);
  return static_cast<int64_t>(std::min(bytes, 1e18));
}

struct Dependencies {
  std::vector<const ir::Node*> nodes;            // original order
  std::vector<std::vector<int>> users;           // node -> nodes reading one of its outputs
  std::vector<int> num_producers;                // distinct producing nodes among the reads
  std::vector<std::vector<const ir::Value*>> reads;  // distinct intermediate values read
  std::unordered_map<const ir::Value*, int> readers;  // value -> distinct reading nodes
  std::unordered_set<const ir::Value*> outputs;       // graph outputs: live to the end
};

Dependencies analyse(const ir::Graph& g) {
  Dependencies d;
  std::unordered_map<const ir::Node*, int> index;
  for (const auto& n : g.nodes()) {
    index[n.get()] = static_cast<int>(d.nodes.size());
    d.nodes.push_back(n.get());
  }
  size_t n = d.nodes.size();
  d.users.resize(n);
  d.num_producers.assign(n, 0);
  d.reads.resize(n);
  for (const ir::Value* v : g.outputs()) d.outputs.insert(v);
  for (size_t i = 0; i < n; ++i) {
    std::unordered_set<const ir::Node*> producers;
    std::unordered_set<const ir::Value*> seen;
    for (const ir::Value* v : g.node_reads(*d.nodes[i])) {
      const ir::Node* p = v->producer();
      if (!p || !index.count(p)) continue;  // graph input, initializer, outer scope
      if (seen.insert(v).second) {
        d.reads[i].push_back(v);
        ++d.readers[v];
      }
      if (producers.insert(p).second) {
        d.users[static_cast<size_t>(index[p])].push_back(static_cast<int>(i));
        ++d.num_producers[i];
      }
    }
  }
  return d;
}

enum class Policy { kMemoryGreedy, kDepthFirst };

std::vector<const ir::Node*> list_schedule(const Dependencies& d, Policy policy) {
  size_t n = d.nodes.size();
  std::vector<int> pending = d.num_producers;
  std::unordered_map<const ir::Value*, int> remaining = d.readers;
  std::vector<int> ready;
  std::vector<int64_t> ready_since(n, 0);  // step at which a node became ready
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push_back(static_cast<int>(i));
  std::vector<const ir::Node*> order;
  order.reserve(n);
  for (int64_t step = 0; !ready.empty(); ++step) {
    size_t best = 0;
    int64_t best_key = std::numeric_limits<int64_t>::max();
    for (size_t r = 0; r < ready.size(); ++r) {
      int i = ready[r];
      int64_t key;
      if (policy == Policy::kMemoryGreedy) {
        int64_t delta = 0;
        for (const ir::Value* v : d.nodes[static_cast<size_t>(i)]->outputs())
          if (v) delta += planned_bytes(*v);
        for (const ir::Value* v : d.reads[static_cast<size_t>(i)])
          if (remaining.at(v) == 1 && !d.outputs.count(v)) delta -= planned_bytes(*v);
        key = delta;
      } else {
        key = -ready_since[static_cast<size_t>(i)];  // most recently enabled first
      }
      // Ties keep the original order.
      if (key < best_key || (key == best_key && i < ready[best])) {
        best_key = key;
        best = r;
      }
    }
    int i = ready[best];
    ready.erase(ready.begin() + static_cast<std::ptrdiff_t>(best));
    order.push_back(d.nodes[static_cast<size_t>(i)]);
    for (const ir::Value* v : d.reads[static_cast<size_t>(i)]) --remaining[v];
    for (int u : d.users[static_cast<size_t>(i)]) {
      if (--pending[static_cast<size_t>(u)] == 0) {
        ready.push_back(u);
        ready_since[static_cast<size_t>(u)] = step + 1;
      }
    }
  }
  return order;  // shorter than n only on a cycle, which the caller rejects
}

Status schedule(ir::Graph& g, PassContext& ctx) {
  if (g.nodes().size() < 3) return ok_status();
  auto current = plan_memory(g);
  if (!current.ok()) {
    ctx.note("not scheduled: " + current.status().message());
    return ok_status();
  }
  std::vector<const ir::Node*> original;
  for (const auto& n : g.nodes()) original.push_back(n.get());
  size_t best_arena = current->arena_bytes;
  size_t start_arena = best_arena;
  std::vector<const ir::Node*> best = original;
  const char* best_name = nullptr;
  Dependencies deps = analyse(g);
  for (auto [policy, name] : {std::pair{Policy::kMemoryGreedy, "memory-greedy"},
                              std::pair{Policy::kDepthFirst, "depth-first"}}) {
    std::vector<const ir::Node*> order = list_schedule(deps, policy);
    if (order.size() != original.size() || order == best) continue;
    KILN_RETURN_IF_ERROR(g.reorder_nodes(order), "memory_scheduling (%s)", name);
    auto plan = plan_memory(g);
    if (plan.ok() && plan->arena_bytes < best_arena) {
      best_arena = plan->arena_bytes;
      best = order;
      best_name = name;
    }
  }
  KILN_RETURN_IF_ERROR(g.reorder_nodes(best), "memory_scheduling");
  if (best_name) {
    int moved = 0;
    for (size_t i = 0; i < best.size(); ++i) moved += best[i] != original[i];
    ctx.add_changed(moved);
    ctx.note(str_format("%s order: arena %zu -> %zu bytes (%d nodes moved)", best_name, start_arena,
                        best_arena, moved));
  }
  return ok_status();
}

}  // namespace

PassInfo memory_scheduling_pass() {
  PassInfo p;
  p.name = "memory_scheduling";
  p.min_level = 3;
  p.description = "reorder nodes to lower the planned activation arena (kept only when it shrinks)";
  p.run = schedule;
  return p;
}

}  // namespace kiln::compiler
