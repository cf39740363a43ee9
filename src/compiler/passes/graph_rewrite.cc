// Use lists and value replacement for the rewriting passes.
#include "compiler/passes/graph_rewrite.h"

#include <algorithm>

namespace kiln::compiler {
namespace {

// Names a subgraph (or a subgraph of it) reads from enclosing scopes.
void collect_outer_names(const ir::Graph& g, std::unordered_set<std::string>& names) {
  for (const auto& v : g.values())
    if (v->is_outer_scope()) names.insert(v->name());
  for (const auto& n : g.nodes())
    for (ir::Graph* sub : n->subgraphs()) collect_outer_names(*sub, names);
}

}  // namespace

ir::Value* add_initializer(ir::Graph& graph, const std::string& base, Tensor t) {
  std::string name = base;
  for (int k = 1; graph.find_value(name); ++k) name = base + "_" + std::to_string(k);
  ir::Value* v = graph.get_or_add_value(name);
  v->type().dtype = t.dtype();
  v->type().shape = t.shape();
  v->set_initializer(std::move(t));
  return v;
}

GraphUses::GraphUses(ir::Graph& graph) : graph_(graph) {
  for (const auto& n : graph.nodes()) {
    for (ir::Value* v : n->inputs())
      if (v) consumers_[v].push_back(n.get());
    for (ir::Graph* sub : n->subgraphs()) collect_outer_names(*sub, subgraph_names_);
  }
  outputs_.insert(graph.outputs().begin(), graph.outputs().end());
}

const std::vector<ir::Node*>& GraphUses::consumers(const ir::Value* v) const {
  auto it = consumers_.find(v);
  return it == consumers_.end() ? none_ : it->second;
}

bool GraphUses::pinned(const ir::Value* v) const {
  return outputs_.count(v) > 0 || subgraph_names_.count(v->name()) > 0;
}

void GraphUses::replace_uses(ir::Value* from, ir::Value* to) {
  auto it = consumers_.find(from);
  if (it == consumers_.end()) return;
  std::vector<ir::Node*> users = std::move(it->second);
  consumers_.erase(it);
  std::vector<ir::Node*>& dst = consumers_[to];
  for (ir::Node* n : users) {
    for (ir::Value*& in : n->inputs())
      if (in == from) in = to;
    dst.push_back(n);
  }
}

void GraphUses::set_input(ir::Node* node, size_t index, ir::Value* v) {
  ir::Value*& slot = node->inputs()[index];
  if (slot) {
    auto& users = consumers_[slot];
    auto it = std::find(users.begin(), users.end(), node);
    if (it != users.end()) users.erase(it);
  }
  slot = v;
  if (v) consumers_[v].push_back(node);
}

void GraphUses::forget_node(const ir::Node* node) {
  for (const ir::Value* v : node->inputs()) {
    if (!v) continue;
    auto& users = consumers_[v];
    auto it = std::find(users.begin(), users.end(), node);
    if (it != users.end()) users.erase(it);
  }
}

}  // namespace kiln::compiler
