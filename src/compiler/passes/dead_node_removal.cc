// Pass wrapper for remove_dead_nodes: nodes none of whose outputs reach a graph output.
#include "compiler/compiler.h"
#include "compiler/passes/passes.h"

namespace kiln::compiler {

PassInfo dead_node_removal_pass() {
  PassInfo p;
  p.name = "dead_node_removal";
  p.min_level = 0;  // ran at every compile before the pass manager existed
  p.description = "remove nodes none of whose outputs reach a graph output";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    int removed = remove_dead_nodes(g);
    ctx.add_changed(removed);
    if (removed) ctx.note(str_format("removed %d dead nodes", removed));
    return ok_status();
  };
  return p;
}

}  // namespace kiln::compiler
