// BatchNormalization folded into the Conv before it, on the ONNX model `kiln quantize` writes
// (docs/quantization.md). Quantising the model as exported would put a QuantizeLinear between
// each convolution and its normalisation: the int8 convolution would then requantise the
// unnormalised sum (a range unrelated to what follows) and the normalisation would run in
// float between DequantizeLinear and QuantizeLinear. Folded first, as ONNX Runtime's quantiser
// pre-processing and AMCT do, the weights carry the normalisation and the int8 kernel writes
// the normalised, activated value directly.
//
//   W'[o] = W[o] * s[o],  B'[o] = (B[o] - mean[o]) * s[o] + beta[o],  s = gamma / sqrt(var + eps)
//
// computed in double and stored as float32.
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "core/status.h"

namespace kiln::quant {

// Folds every BatchNormalization (inference form: one output) whose input is the only use of a
// Conv's output, with Conv's W (and B, if any) and the normalisation's four parameters constant
// float32 initializers that nothing else reads. The Conv takes the normalisation's output name
// and new initializers; the normalisation disappears. Returns how many were folded.
// `model_dir`: where external-data initializers live.
Expected<int> fold_batchnorm_into_conv(onnx::ModelProto& model, const std::string& model_dir);

// The same for a Mul and/or an Add by constants after a Conv (PaddlePaddle's "learnable affine
// block", after every convolution of PP-OCRv4's detector): a chain Conv -> Mul(k) -> Add(d)
// (or Add alone, or several, in any order), k and d float32 initializers nothing else reads,
// each one value or one per output channel ([C, 1, ..] or [1, C, 1, ..]), either operand
// order, each intermediate read only by the next: a Mul makes W'[o] = W[o] * k[o] and
// B'[o] = B[o] * k[o], an Add B'[o] = B[o] + d[o] (double, stored float32).
// Left in place, the Mul and Add run in float between the convolution's DequantizeLinear and
// the next QuantizeLinear (two more passes over the activation) and the QuantizeLinear
// measures the unscaled sum. Returns how many Mul and Add nodes were folded.
Expected<int> fold_scale_shift_into_conv(onnx::ModelProto& model, const std::string& model_dir);

}  // namespace kiln::quant
