// A model of an older ai.onnx opset brought to opset 13, which per-channel DequantizeLinear
// (`axis`) needs (docs/quantization.md). ONNX's own version converter does the work
// (onnx/version_converter); some of its adapters need input ranks the model does not declare
// (Softmax 12 -> 13 keeps the old meaning only by knowing the rank), so the shapes Kiln
// inferred are handed to it as value_info first. PP-OCRv4's recogniser (opset 9) and detector
// (opset 11) are models that need this.
#pragma once

#include <onnx/onnx_pb.h>

#include "core/status.h"
#include "ir/graph.h"

namespace kiln::quant {

// Converts `model` to ai.onnx opset `target` when it imports an older one; `typed` is the same
// model imported (and typed) by Kiln. Returns whether it converted. The declared value_info is
// dropped afterwards (it described the old graph). Errors name the op the converter refused.
Expected<bool> upgrade_opset(onnx::ModelProto& model, int64_t target, const ir::Graph& typed);

}  // namespace kiln::quant
