// Transposes of constant weights folded into the weights, on the ONNX model `kiln quantize`
// writes (docs/quantization.md). Exporters often write a linear layer as
// MatMul(x, Transpose(W)) with W an initializer (PyTorch's BERT export does, for every
// projection); the quantiser quantises constant weights per channel only when MatMul / Gemm /
// Conv read an initializer directly, so the transpose is computed once here, as ONNX Runtime's
// pre-processing (its optimizer's constant folding) does. The transposed tensor takes the
// Transpose's output name; the Transpose disappears, and W with it when nothing else reads it.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/status.h"

namespace kiln::quant {

// Folds every Transpose (default domain) of a float32 initializer that is not a graph input.
// `model_dir`: where external-data initializers live. Returns how many were folded.
Expected<int> fold_constant_transposes(onnx::ModelProto& model, const std::string& model_dir);

}  // namespace kiln::quant
