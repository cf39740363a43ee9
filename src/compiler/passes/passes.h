// The built-in graph passes, one factory per file, and the function that registers them
// in pipeline order.
#pragma once

#include "compiler/pass_manager.h"

namespace kiln::compiler {

PassInfo constant_node_folding_pass();  // Constant nodes -> initializers (required)
PassInfo shape_inference_pass();        // dtype and shape of every value (required)
PassInfo gradient_lowering_pass();      // Gradient nodes -> ordinary ops (required)
PassInfo constant_folding_pass();       // constant inputs and static Shape -> initializers (-O1)
PassInfo algebraic_simplify_pass();     // identities, no-ops, chains (-O1)
PassInfo batchnorm_folding_pass();      // BatchNormalization into Conv/ConvTranspose/Gemm (-O1)
PassInfo cse_pass();                    // common-subexpression elimination (-O1)
PassInfo dead_node_removal_pass();      // nodes reaching no output (-O0, optional)

void register_builtin_passes(PassRegistry& registry);

}  // namespace kiln::compiler
