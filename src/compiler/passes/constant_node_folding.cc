// Pass wrapper for fold_constant_nodes: Constant nodes become initializers (weights).
#include "compiler/compiler.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {

PassInfo constant_node_folding_pass() {
  PassInfo p;
  p.name = "constant_node_folding";
  p.required = true;  // the weight section and the planner expect constants as initializers
  p.description = "turn Constant nodes into initializers, computed with the reference kernel";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    KILN_ASSIGN_OR_RETURN(int folded, fold_constant_nodes(g));
    ctx.add_changed(folded);
    if (folded) ctx.note(str_format("turned %d Constant nodes into weights", folded));
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
