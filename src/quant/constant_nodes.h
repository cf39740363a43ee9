// Constant nodes turned into initializers on the ONNX model `kiln quantize` writes
// (docs/quantization.md): some exporters (PaddlePaddle's, for PP-OCR) store every weight as a
// Constant node's `value`, and the quantiser quantises weights that are initializers.
#pragma once

#include <onnx/onnx_pb.h>

#include "core/status.h"

namespace kiln::quant {

// Moves the tensor of every top-level Constant node (default domain, attribute `value`) into an
// initializer named after the node's output, and drops the node. Returns how many.
int constant_nodes_to_initializers(onnx::ModelProto& model);

}  // namespace kiln::quant
