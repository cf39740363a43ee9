// Per-layer sensitivity and automatic float fallback (`kiln quantize --sensitivity`,
// docs/quantization.md "Sensitivity"), AMCT's and TensorRT's layer-precision search:
//
//   1. the float model and the fully quantised model run on held-out evaluation samples (a
//      split of the calibration data, not used for the ranges);
//   2. per quantisable node: the metric with only that node int8 (everything else float), and
//      with only that node float (everything else int8);
//   3. starting from "everything int8", the most sensitive node (lowest metric when alone in
//      int8) goes back to float, then the next, until the budget is met; each step is measured,
//      not estimated.
//
// Metrics, over the evaluation samples against the float model's outputs:
//   cosine: mean over samples of the cosine similarity of all outputs flattened together;
//   top1:   the fraction of samples whose argmax over the last axis of output 0 agrees (each row
//           of a [N, classes] output counts).
//   mask_iou: the intersection over union of the masks {output 0 > threshold} of the float model
//           and the variant, pooled over the samples (1 when both are empty). For maps that are
//           thresholded downstream (a text detector's probability map, a segmentation): cosine
//           barely moves when a box edge moves by a pixel, the mask's IoU does.
// Every variant is compiled by Kiln (-O3, QDQ folded into int8 kernels) and run on Kiln.
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/calibration_data.h"

namespace kiln::quant {

enum class SensitivityMetric { kCosine, kTop1, kMaskIou };

struct SensitivityOptions {
  SensitivityMetric metric = SensitivityMetric::kCosine;
  // The budget: the metric the chosen model must reach (cosine, or top-1 agreement as a fraction:
  // 1 - the allowed drop). Below 0: no selection, the analysis only.
  double target = -1;
  double mask_threshold = 0.5;  // kMaskIou's threshold on output 0
  // Called with one line of progress ("sensitivity 12/72: conv3 ...").
  std::function<void(const std::string&)> progress;
};

struct LayerSensitivity {
  std::string node;
  double only_int8 = 0;   // the metric with only this node quantised
  double only_float = 0;  // the metric with every other node quantised
  bool kept_float = false;
};

struct SensitivityResult {
  std::vector<LayerSensitivity> layers;  // most sensitive first
  double all_int8 = 0;                   // the metric of the fully quantised model
  double chosen = 0;                     // of the chosen model
  std::set<std::string> quantised;       // the chosen model's quantised nodes
  bool budget_met = true;
  // Median latency (ms, one sample, the process's thread count) of the float, fully
  // quantised and chosen models.
  double float_ms = 0, all_int8_ms = 0, chosen_ms = 0;
};

// The ONNX bytes of the model with exactly `quantised` nodes quantised (the float model for an
// empty set): the caller's QDQ writer with the calibrated parameters.
using VariantBuilder = std::function<Expected<std::string>(const std::set<std::string>& quantised)>;

// `nodes`: every node the full plan quantises (names as qdq_plan's node_label). `eval` holds
// the evaluation samples, inputs in `inputs` order.
Expected<SensitivityResult> analyse_sensitivity(const std::vector<std::string>& nodes, const VariantBuilder& build,
                                                const std::vector<ModelInput>& inputs,
                                                const std::vector<Sample>& eval, const SensitivityOptions& options);

}  // namespace kiln::quant
