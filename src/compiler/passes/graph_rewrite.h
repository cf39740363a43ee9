// Helpers the rewriting passes share: who reads a value, replacing its uses, and which
// values must keep their identity (graph outputs, names read by subgraphs).
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"

namespace kiln::compiler {

// A new value named `base` (or `base_1`, `base_2`, ... when taken) that holds `t` as its
// initializer, typed by it: the constants the rewriting passes make (folded weights, Reshape
// targets, padded channels).
ir::Value* add_initializer(ir::Graph& graph, const std::string& base, Tensor t);

class GraphUses {
 public:
  explicit GraphUses(ir::Graph& graph);
  // Nodes reading `v` (a node reading it twice appears twice).
  const std::vector<ir::Node*>& consumers(const ir::Value* v) const;
  int num_consumers(const ir::Value* v) const { return static_cast<int>(consumers(v).size()); }
  // A graph output or a value some subgraph reads by name: it must not be replaced.
  bool pinned(const ir::Value* v) const;
  // Redirects every node input reading `from` to `to`. `from` must not be pinned.
  void replace_uses(ir::Value* from, ir::Value* to);
  // Sets input `index` of `node` to `v`, keeping the use lists current.
  void set_input(ir::Node* node, size_t index, ir::Value* v);
  // Drops `node` from the use lists of its inputs (before the node is removed).
  void forget_node(const ir::Node* node);
  // Whether `v` is unused: no consumer, not pinned.
  bool unused(const ir::Value* v) const { return consumers(v).empty() && !pinned(v); }

 private:
  ir::Graph& graph_;
  std::unordered_map<const ir::Value*, std::vector<ir::Node*>> consumers_;
  std::unordered_set<const ir::Value*> outputs_;
  std::unordered_set<std::string> subgraph_names_;
  std::vector<ir::Node*> none_;
};

}  // namespace kiln::compiler
