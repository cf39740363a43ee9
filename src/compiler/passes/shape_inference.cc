// Pass wrapper for ops::infer_graph: the dtype and shape of every value.
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {

PassInfo shape_inference_pass() {
  PassInfo p;
  p.name = "shape_inference";
  p.required = true;  // every later pass and the runtime read the inferred types
  p.description = "infer the dtype and shape of every value";
  p.run = [](ir::Graph& g, PassContext&) -> Status { return ops::infer_graph(g); };
  return p;
}

}  // namespace kiln::compiler
