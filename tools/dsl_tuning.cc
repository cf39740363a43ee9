// Finding a graph's DSL-kernel nodes and giving them the schedules of a tuning database.
#include "tools/dsl_tuning.h"

#include "kernels/cpu/dsl_elementwise.h"
#include "ops/registry.h"

namespace kiln::tools {
namespace {

int64_t static_elements(const ir::Value* v) {
  if (!v || !v->type().shape.is_static()) return 0;
  return v->type().shape.num_elements();
}

Status collect(ir::Graph& g, const std::string& holder, int64_t holder_elements, std::vector<DslKernelNode>* out) {
  for (const auto& up : g.nodes()) {
    ir::Node& n = *up;
    if (n.domain() == ops::kKilnDomain && n.op_type() == "FusedElementwise") {
      if (ir::Attribute* body = n.attrs().count("body") ? &n.attrs()["body"] : nullptr; body && body->g)
        KILN_RETURN_IF_ERROR(collect(*body->g, n.label(), static_elements(n.output(0)), out));
      continue;
    }
    if (n.domain() != ops::kKilnDomain || n.op_type() != "DslElementwise") continue;
    DslKernelNode d;
    d.node = &n;
    d.label = holder.empty() ? n.label() : n.label() + " in " + holder;
    KILN_ASSIGN_OR_RETURN(d.expr, ops::parse_custom_expr(n.attr_string("compute", "")), "node %s", d.label.c_str());
    d.num_inputs = n.num_inputs();
    d.signature = kernels::dsl_tile_signature(d.expr, d.num_inputs);
    d.elements = holder.empty() ? static_elements(n.output(0)) : holder_elements;
    out->push_back(std::move(d));
  }
  return ok_status();
}

}  // namespace

Expected<std::vector<DslKernelNode>> find_dsl_kernel_nodes(ir::Graph& g) {
  std::vector<DslKernelNode> out;
  KILN_RETURN_IF_ERROR(collect(g, "", 0, &out));
  return out;
}

Expected<std::vector<TunedDslNode>> apply_tuning_db(ir::Graph& g, const std::vector<dsl::TuningEntry>& db) {
  KILN_ASSIGN_OR_RETURN(std::vector<DslKernelNode> nodes, find_dsl_kernel_nodes(g));
  const std::string target = dsl::tuning_target();
  std::vector<TunedDslNode> tuned;
  for (DslKernelNode& d : nodes) {
    const dsl::TuningEntry* e = dsl::find_tuning_entry(db, d.signature, 1, kernels::kDslTileElements, target);
    if (!e) {
      d.node->attrs().erase("dsl_split");
      continue;
    }
    d.node->attrs()["dsl_split"] = ir::Attribute::from_int(e->knobs.col_split);
    tuned.push_back({d.label, d.signature, e->knobs.col_split});
  }
  return tuned;
}

}  // namespace kiln::tools
