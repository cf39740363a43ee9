// custom_op_lowering (required): each node of an op a custom-op plugin defines
// (compiler/custom_op_plugin.h, `kiln compile --custom-ops`) becomes a kiln DslElementwise
// whose `compute` attribute is the definition's expression with the node's attributes
// substituted, and whose `custom_op` names the original op. The compiled model then holds
// everything it needs: running it loads no plugin. Nodes inside subgraphs (If, Loop) are not
// rewritten (docs/dsl.md, not done yet).
#include <map>
#include <unordered_set>

#include "compiler/custom_op_plugin.h"
#include "compiler/passes/fusion_util.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {

PassInfo custom_op_lowering_pass() {
  PassInfo p;
  p.name = "custom_op_lowering";
  p.required = true;  // the runtime knows no plugin op
  p.description = "nodes of --custom-ops plugin ops -> kiln DslElementwise holding their compute";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    GraphUses uses(g);
    std::unordered_set<const ir::Node*> removed;
    std::map<std::string, int> counts;
    std::vector<ir::Node*> order;
    for (const auto& n : g.nodes()) order.push_back(n.get());
    for (ir::Node* n : order) {
      const CustomOpDefinition* def = find_custom_op(n->domain(), n->op_type());
      if (!def) continue;
      if (n->num_outputs() != 1 || !n->output(0))
        return invalid_argument("node %s: a custom op has one output", n->label().c_str());
      KILN_ASSIGN_OR_RETURN(std::vector<float> attrs, custom_op_attr_values(*def, *n));
      std::map<std::string, double> values;
      for (size_t i = 0; i < attrs.size(); ++i) values[def->attr_names[i]] = attrs[i];
      const std::string compute = ops::custom_expr_text(ops::bind_custom_expr(def->expr, values));
      const std::string name = (def->domain.empty() ? "ai.onnx" : def->domain) + "::" + def->op_type;
      ir::Node* r = fusion::add_fused_node(g, uses, "DslElementwise", {n}, n->inputs(), n->output(0), removed);
      r->attrs()["compute"] = ir::Attribute::from_string(compute);
      r->attrs()["custom_op"] = ir::Attribute::from_string(name);
      ++counts[name + " " + compute];
    }
    for (const auto& [what, n] : counts) {
      ctx.note("custom op " + what + ": " + std::to_string(n) + " node(s) -> kiln DslElementwise");
      ctx.add_changed(n);
    }
    if (removed.empty()) return ok_status();
    return fusion::finish(g, removed);
  };
  return p;
}

}  // namespace kiln::compiler
