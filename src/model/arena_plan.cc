// The activation arena of a static graph: lifetimes as the runtime has them, the kernels'
// workspaces live during their steps, offsets by assign_offsets, and the loader's check of a
// plan read from a file.
#include "model/arena_plan.h"

#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/dtype.h"
#include "core/offset_assignment.h"

namespace kiln::model {
namespace {

constexpr std::string_view kViewOps[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};

// Bytes reserved for a value of `bytes`: whole alignment units, at least one (the runtime's
// arenas hand a zero-byte tensor one unit too). False on overflow.
bool reserved_bytes(size_t bytes, size_t* out) {
  if (bytes > std::numeric_limits<size_t>::max() - kArenaPlanAlignment) return false;
  *out = std::max<size_t>(kArenaPlanAlignment,
                          (bytes + kArenaPlanAlignment - 1) / kArenaPlanAlignment * kArenaPlanAlignment);
  return true;
}

// The places activations need, as the runtime uses them: values joined by a view op share one.
struct Places {
  std::vector<const ir::Value*> values;             // plannable values, in production order
  std::unordered_map<const ir::Value*, int> place;  // value -> index into the vectors below
  std::unordered_map<const ir::Value*, size_t> reserved;
  std::vector<size_t> size;
  std::vector<int> first, last;
  std::unordered_map<const ir::Node*, int> step_of;  // every node of the graph
  // Nodes with a workspace need (kWorkspaceBytesAttr), in step order, and their places.
  std::vector<std::pair<const ir::Node*, int>> workspaces;
};

// The workspace `node` asks for per run (kWorkspaceBytesAttr), 0 for none.
int64_t workspace_need(const ir::Node& node) {
  const ir::Attribute* a = node.attr(kWorkspaceBytesAttr);
  return a && a->kind == ir::AttrKind::kInt && a->i > 0 ? a->i : 0;
}

// nullopt when the graph cannot be planned ahead; an error when a size overflows.
Expected<std::optional<Places>> find_places(const ir::Graph& graph) {
  Places p;
  const auto& nodes = graph.nodes();
  const int end = static_cast<int>(nodes.size());
  std::unordered_set<const ir::Value*> read;
  std::unordered_map<std::string, const ir::Value*> by_name;  // planned values, for subgraph reads
  auto reads = [&](const ir::Value* in, int s) {
    auto it = in ? p.place.find(in) : p.place.end();
    if (it == p.place.end()) return;
    read.insert(in);
    p.last[static_cast<size_t>(it->second)] = std::max(p.last[static_cast<size_t>(it->second)], s);
  };
  for (int s = 0; s < end; ++s) {
    const ir::Node& node = *nodes[static_cast<size_t>(s)];
    p.step_of[&node] = s;
    // Control flow runs its bodies on executors of their own, whose values the plan cannot hold;
    // Kiln's own nodes with a body (a fused element-wise expression) compute it in their kernel.
    const bool kiln_node = node.domain() == "kiln";
    if (!node.subgraphs().empty() && !kiln_node) return std::optional<Places>();
    for (const ir::Value* in : node.inputs()) reads(in, s);
    for (const ir::Graph* sub : node.subgraphs())
      for (const auto& v : sub->values())
        if (v->is_outer_scope()) {
          auto named = by_name.find(v->name());
          if (named != by_name.end()) reads(named->second, s);
        }
    for (int k = 0; k < node.num_outputs(); ++k) {
      const ir::Value* out = node.output(k);
      if (!out) continue;
      const ir::TensorType& t = out->type();
      if (!t.is_tensor() || t.dtype == DataType::kUndefined || t.dtype == DataType::kString ||
          !t.shape.is_static())
        return std::optional<Places>();
      int64_t count = 1;
      for (int64_t d : t.shape.static_dims()) {
        if (d != 0 && count > std::numeric_limits<int64_t>::max() / d)
          return invalid_argument("value '%s' of node %s is too large (%s)", out->name().c_str(),
                                  node.label().c_str(), t.to_string().c_str());
        count *= d;
      }
      const int bits = dtype_bits(t.dtype);
      size_t reserved = 0;
      if (bits <= 0 || static_cast<uint64_t>(count) > std::numeric_limits<size_t>::max() / 8 / bits ||
          !reserved_bytes(dtype_bytes(t.dtype, count), &reserved))
        return invalid_argument("value '%s' of node %s is too large (%s)", out->name().c_str(),
                                node.label().c_str(), t.to_string().c_str());
      p.values.push_back(out);
      p.reserved[out] = reserved;
      by_name[out->name()] = out;
      const ir::Value* in = k == 0 && is_view_op(node) && node.num_inputs() > 0 ? node.input(0) : nullptr;
      auto viewed = in ? p.place.find(in) : p.place.end();
      if (viewed != p.place.end() && p.reserved[in] == reserved) {
        p.place[out] = viewed->second;  // lives on in the view: extended by the view's readers
        continue;
      }
      p.place[out] = static_cast<int>(p.size.size());
      p.size.push_back(reserved);
      p.first.push_back(s);
      p.last.push_back(s);
    }
    if (const int64_t need = workspace_need(node); need > 0) {
      size_t reserved = 0;
      if (!reserved_bytes(static_cast<uint64_t>(need), &reserved))
        return invalid_argument("node %s: a workspace of %lld bytes is too large", node.label().c_str(),
                                static_cast<long long>(need));
      p.workspaces.emplace_back(&node, static_cast<int>(p.size.size()));
      p.size.push_back(reserved);  // live while its node runs only
      p.first.push_back(s);
      p.last.push_back(s);
    }
  }
  for (const ir::Value* v : p.values)
    if (!read.count(v)) p.last[static_cast<size_t>(p.place[v])] = end;
  for (const ir::Value* v : graph.outputs()) {
    auto it = p.place.find(v);
    if (it != p.place.end()) p.last[static_cast<size_t>(it->second)] = end;
  }
  if (p.values.empty()) return std::optional<Places>();
  return std::optional<Places>(std::move(p));
}

}  // namespace

bool is_view_op(const ir::Node& node) {
  if (!node.domain().empty() && node.domain() != "ai.onnx") return false;
  return std::find(std::begin(kViewOps), std::end(kViewOps), node.op_type()) != std::end(kViewOps);
}

Expected<std::optional<ArenaPlan>> plan_arena(const ir::Graph& graph) {
  KILN_ASSIGN_OR_RETURN(std::optional<Places> places, find_places(graph));
  if (!places) return std::optional<ArenaPlan>();
  std::vector<size_t> offsets;
  ArenaPlan plan;
  plan.arena_bytes = assign_offsets(places->size, places->first, places->last, &offsets);
  for (const ir::Value* v : places->values) {
    const size_t k = static_cast<size_t>(places->place[v]);
    plan.values.push_back({v, offsets[k], places->size[k]});
  }
  for (const auto& [node, place] : places->workspaces) {
    const size_t k = static_cast<size_t>(place);
    plan.workspaces.push_back({node, offsets[k], places->size[k]});
  }
  return std::optional<ArenaPlan>(std::move(plan));
}

Status check_arena_plan(const ir::Graph& graph, const ArenaPlan& plan) {
  KILN_ASSIGN_OR_RETURN(std::optional<Places> places, find_places(graph));
  if (!places)
    return data_loss("graph '%s' has values without static shapes, or subgraphs: it cannot carry an arena plan",
                     graph.name().c_str());
  struct Item {
    size_t offset, size;
    int place;  // -1 for a workspace
    const ir::Value* value;
    const ir::Node* node;  // a workspace's
    int first, last;       // steps
    std::string name() const {
      return value ? "value '" + value->name() + "'" : "the workspace of node " + node->label();
    }
  };
  std::vector<Item> items;
  std::unordered_set<const ir::Value*> seen;
  size_t total = 0;
  for (const PlannedValue& pv : plan.values) {
    auto it = pv.value ? places->place.find(pv.value) : places->place.end();
    if (it == places->place.end())
      return data_loss("planned value '%s' is not an activation of graph '%s'",
                       pv.value ? pv.value->name().c_str() : "?", graph.name().c_str());
    const char* name = pv.value->name().c_str();
    if (!seen.insert(pv.value).second) return data_loss("value '%s' is planned twice", name);
    if (pv.offset % kArenaPlanAlignment != 0 || pv.size % kArenaPlanAlignment != 0)
      return data_loss("value '%s': offset %zu or size %zu is not a multiple of %zu", name, pv.offset, pv.size,
                       kArenaPlanAlignment);
    if (pv.size < places->reserved[pv.value])
      return data_loss("value '%s' (%s) needs %zu bytes, the plan gives it %zu", name,
                       pv.value->type().to_string().c_str(), places->reserved[pv.value], pv.size);
    if (pv.offset > plan.arena_bytes || pv.size > plan.arena_bytes - pv.offset)
      return data_loss("value '%s' at [%zu, +%zu) lies outside the %zu-byte arena", name, pv.offset, pv.size,
                       plan.arena_bytes);
    total += pv.size;  // no overflow: each is at most arena_bytes, and values are fewer than 2^32
    const size_t k = static_cast<size_t>(it->second);
    items.push_back({pv.offset, pv.size, it->second, pv.value, nullptr, places->first[k], places->last[k]});
  }
  std::unordered_set<const ir::Node*> with_workspace;
  for (const PlannedWorkspace& pw : plan.workspaces) {
    auto step = pw.node ? places->step_of.find(pw.node) : places->step_of.end();
    if (step == places->step_of.end())
      return data_loss("a planned workspace's node is not a node of graph '%s'", graph.name().c_str());
    const char* name = pw.node->label().c_str();
    if (!with_workspace.insert(pw.node).second) return data_loss("node %s has two planned workspaces", name);
    if (pw.size == 0 || pw.offset % kArenaPlanAlignment != 0 || pw.size % kArenaPlanAlignment != 0)
      return data_loss("the workspace of node %s: offset %zu or size %zu is not a positive multiple of %zu", name,
                       pw.offset, pw.size, kArenaPlanAlignment);
    if (pw.offset > plan.arena_bytes || pw.size > plan.arena_bytes - pw.offset)
      return data_loss("the workspace of node %s at [%zu, +%zu) lies outside the %zu-byte arena", name, pw.offset,
                       pw.size, plan.arena_bytes);
    total += pw.size;  // as above: nodes are fewer than 2^32
    items.push_back({pw.offset, pw.size, -1, nullptr, pw.node, step->second, step->second});
  }
  if (plan.arena_bytes > total)
    return data_loss("the arena is %zu bytes, more than its %zu values' and workspaces' %zu bytes together",
                     plan.arena_bytes, items.size(), total);
  // Overlaps: sorted by offset, each item against those starting inside it.
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.offset < b.offset; });
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& a = items[i];
    for (size_t j = i + 1; j < items.size() && items[j].offset < a.offset + a.size; ++j) {
      const Item& b = items[j];
      if (a.place >= 0 && a.place == b.place && a.offset == b.offset && a.size == b.size)
        continue;  // a view and its base
      const int from = std::max(a.first, b.first);
      const int to = std::min(a.last, b.last);
      if (from <= to)
        return data_loss("%s and %s are both live at step %d and overlap in the arena ([%zu, +%zu) and [%zu, +%zu))",
                         a.name().c_str(), b.name().c_str(), from, a.offset, a.size, b.offset, b.size);
    }
  }
  return ok_status();
}

}  // namespace kiln::model
