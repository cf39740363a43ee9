// Writes the QDQ model: edits the float ModelProto along a QdqPlan (qdq_plan.h), with the
// activation parameters from calibration (docs/quantization.md "The QDQ model").
//
// Names of what it adds (made unique with a numeric suffix when taken):
//   activation t: initializers t_scale (float scalar), t_zero_point (uint8 / int8 scalar);
//     nodes t_QuantizeLinear -> t_quantized, t_DequantizeLinear -> t_dequantized;
//   weight w: initializers w_quantized (int8), w_scale (float [C]), w_zero_point (int8 zeros
//     [C]); node w_DequantizeLinear (axis) -> w_dequantized;
//   bias b: b_quantized (int32), b_scale, b_zero_point (int32 zeros); b_DequantizeLinear.
// Float initializers no node reads any more are dropped. Needs ai.onnx opset >= 13
// (DequantizeLinear's axis).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/status.h"
#include "quant/qdq_plan.h"
#include "quant/quant_params.h"

namespace kiln::quant {

struct WeightReport {
  std::string tensor;
  int axis = 0;
  int64_t channels = 0;
  float scale_min = 0, scale_max = 0;
  bool bias = false;  // an int32 bias (axis 0, scale x_scale * w_scale)
};

// Rewrites `model` in place. `activations` must hold every tensor of plan.activations.
// `model_dir` resolves external data of the weights. Errors name the tensor at fault.
Expected<std::vector<WeightReport>> write_qdq(onnx::ModelProto& model, const QdqPlan& plan,
                                              const std::map<std::string, QuantParams>& activations,
                                              ActivationType type, const std::string& model_dir);

// The ai.onnx opset the model imports (0 if none).
int64_t onnx_opset(const onnx::ModelProto& model);

}  // namespace kiln::quant
