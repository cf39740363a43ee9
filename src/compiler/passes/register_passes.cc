// The built-in pipeline: the order the passes run in.
#include "compiler/passes/passes.h"

#include "core/logging.h"

namespace kiln::compiler {

void register_builtin_passes(PassRegistry& registry) {
  for (PassInfo p : {constant_node_folding_pass(), shape_inference_pass(), custom_op_lowering_pass(),
                     gradient_lowering_pass(),
                     qdq_folding_pass(), constant_folding_pass(), dynamic_quant_fusion_pass(),
                     symbolic_shape_folding_pass(), algebraic_simplify_pass(),
                     batchnorm_folding_pass(), layernorm_fusion_pass(), gelu_fusion_pass(),
                     hardswish_fusion_pass(), attention_fusion_pass(), conv_fusion_pass(),
                     matmul_fusion_pass(), elementwise_fusion_pass(), cse_pass(),
                     dead_node_removal_pass(), channel_padding_pass(), int8_layout_pass(),
                     qlinear_residual_fusion_pass(), layout_assignment_pass(),
                     precision_assignment_pass(), aipp_conv_fusion_pass(), memory_scheduling_pass()}) {
    Status s = registry.add(std::move(p));
    if (!s.ok()) KILN_LOG(kError, "registering built-in passes: %s", s.to_string().c_str());
  }
}

}  // namespace kiln::compiler
