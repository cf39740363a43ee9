// Pass wrapper for lower_gradient_nodes: Gradient nodes become ordinary ops.
#include "compiler/compiler.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {

PassInfo gradient_lowering_pass() {
  PassInfo p;
  p.name = "gradient_lowering";
  p.required = true;  // the runtime has no Gradient kernel
  p.description = "lower Gradient nodes into ops by reverse-mode differentiation";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    // Needs the forward shapes (shape_inference ran before); the ops it adds are inferred here.
    KILN_ASSIGN_OR_RETURN(int lowered, lower_gradient_nodes(g));
    ctx.add_changed(lowered);
    if (lowered) {
      ctx.note(str_format("lowered %d Gradient nodes into ops", lowered));
      KILN_RETURN_IF_ERROR(ops::infer_graph(g));
    }
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
