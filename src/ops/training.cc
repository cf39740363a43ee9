// Training ops of the ai.onnx.preview.training domain that inference graphs use.
// Gradient is differentiated away by the compiler (compiler/gradient_lowering.cc); its
// schema lets the frontend accept it and `kiln compile --check` type it.
#include "ops/registry.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// Each gradient dy/dx_i has the type of x_i, which the node takes as input i.
Status infer_gradient(InferContext& ctx) {
  for (int i = 0; i < ctx.num_outputs(); ++i)
    if (ctx.has_input(i)) ctx.output(i) = ctx.input_type(i);
  return ok_status();
}

Status gradient_kernel(KernelContext& ctx) {
  return failed_precondition("node %s: Gradient is lowered into ordinary ops by kiln compile; run a compiled model",
                             ctx.node().label().c_str());
}

KILN_REGISTER_OP(OpSchema("Gradient", "ai.onnx.preview.training")
                     .since(1)
                     .inputs(1, -1)
                     .outputs(1, -1)
                     .required_attr("xs", AttrKind::kStrings)
                     .required_attr("y", AttrKind::kString)
                     .attr("zs", AttrKind::kStrings)
                     .infer(infer_gradient)
                     .kernel(gradient_kernel));

}  // namespace
}  // namespace kiln::ops
