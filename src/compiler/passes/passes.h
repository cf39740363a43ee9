// The built-in graph passes, one factory per file, and the function that registers them
// in pipeline order.
#pragma once

#include "compiler/pass_manager.h"

namespace kiln::compiler {

PassInfo constant_node_folding_pass();  // Constant nodes -> initializers (required)
PassInfo shape_inference_pass();        // dtype and shape of every value (required)
PassInfo custom_op_lowering_pass();     // plugin custom ops -> kiln DslElementwise (required)
PassInfo gradient_lowering_pass();      // Gradient nodes -> ordinary ops (required)
PassInfo qdq_folding_pass();         // DQ/Q around Conv, MatMul, Gemm, MaxPool -> int8 ops (-O2)
PassInfo constant_folding_pass();       // constant inputs and static Shape -> initializers (-O1)
PassInfo dynamic_quant_fusion_pass();   // DynamicQuantizeLinear/MatMulInteger/Cast/Mul -> kiln op (-O2)
PassInfo symbolic_shape_folding_pass();  // shape computations over open dims followed by name (-O1)
PassInfo algebraic_simplify_pass();     // identities, no-ops, chains (-O1)
PassInfo batchnorm_folding_pass();      // BatchNormalization into Conv/ConvTranspose/Gemm (-O1)
PassInfo layernorm_fusion_pass();       // LayerNorm decomposition -> kiln LayerNorm (-O2)
PassInfo gelu_fusion_pass();            // GELU erf/tanh forms -> kiln Gelu (-O2)
PassInfo attention_fusion_pass();       // MatMul/scale/mask/Softmax/MatMul -> kiln Attention (-O2)
PassInfo hardswish_fusion_pass();       // x*HardSigmoid(x), x*Clip(x+3,0,6)/6 -> HardSwish (-O2)
PassInfo conv_fusion_pass();            // Conv [+ Add] [+ activation] -> kiln FusedConv (-O2)
PassInfo matmul_fusion_pass();          // MatMul/Gemm [+ Add] [+ act] -> FusedMatMul/Gemm (-O2)
PassInfo elementwise_fusion_pass();     // elementwise op trees -> kiln FusedElementwise (-O2)
PassInfo cse_pass();                    // common-subexpression elimination (-O1)
PassInfo dead_node_removal_pass();      // nodes reaching no output (-O0, optional)
PassInfo channel_padding_pass();        // zero channels up to whole NC1HWC0 blocks (-O3)
PassInfo int8_layout_pass();         // channels-last int8 values between int8 ops (-O3)
PassInfo qlinear_residual_fusion_pass();  // int8 residual Add into the conv epilogue (-O3)
PassInfo layout_assignment_pass();      // blocked NC1HWC0 activations between convs (-O3)
PassInfo precision_assignment_pass();    // bf16 convs / products (--precision; required)
PassInfo aipp_conv_fusion_pass();      // static Aipp + the conv reading its image -> kiln AippConv (-O2)
PassInfo memory_scheduling_pass();      // execution order lowering the arena (-O3)

void register_builtin_passes(PassRegistry& registry);

// The channels per block of the NC1HWC0 layout (PassOptions::channel_block, else the
// compiling CPU's: 16 with AVX-512, 8 without); layout_assignment and channel_padding agree on it.
int64_t layout_channel_block(const PassContext& ctx);

}  // namespace kiln::compiler
