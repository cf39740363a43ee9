// The IR verifier: structural invariants every pass must keep.
#include <unordered_set>

#include "ir/graph.h"

namespace kiln::ir {

Status verify(const Graph& graph) {
  std::unordered_set<const Value*> defined;
  for (const Value* v : graph.inputs()) {
    if (!v) return internal_error("graph '%s' has a null input", graph.name().c_str());
    defined.insert(v);
  }
  for (const auto& v : graph.values())
    if (v->has_initializer() || v->is_outer_scope()) defined.insert(v.get());

  std::unordered_set<const Value*> produced;
  for (const auto& n : graph.nodes()) {
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      const Value* v = n->inputs()[i];
      if (v && !defined.count(v))
        return invalid_argument("node %s input %zu '%s' is used before it is defined", n->label().c_str(),
                                i, v->name().c_str());
    }
    for (const Value* v : n->outputs()) {
      if (!v) continue;
      if (!produced.insert(v).second || v->has_initializer())
        return invalid_argument("value '%s' is produced twice (again by node %s)", v->name().c_str(),
                                n->label().c_str());
      if (v->producer() != n.get())
        return invalid_argument("value '%s' is produced twice (by node %s and node %s)", v->name().c_str(),
                                n->label().c_str(),
                                v->producer() ? v->producer()->label().c_str() : "<none>");
      defined.insert(v);
    }
    for (Graph* g : n->subgraphs())
      KILN_RETURN_IF_ERROR(verify(*g), "in a subgraph of node %s", n->label().c_str());
  }
  for (const Value* v : graph.outputs()) {
    if (!v || !defined.count(v))
      return invalid_argument("graph '%s' output '%s' is never defined", graph.name().c_str(),
                              v ? v->name().c_str() : "<null>");
  }
  return ok_status();
}

}  // namespace kiln::ir
