// Collects the statistics of the tensors to calibrate by running the float model on Kiln
// (docs/quantization.md "Calibration"): each tensor becomes an extra graph output of the
// model compiled at -O0 (where every ONNX tensor keeps its name, as `kiln compare` relies
// on), and the calibration samples run through the graph executor in batches.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/calibration_data.h"
#include "quant/tensor_stats.h"

namespace kiln::quant {

struct CalibratorOptions {
  // Samples stacked into one execution along axis 0 when every input's axis 0 is open and
  // the samples' shapes agree; a model with a static batch of 1 runs one sample at a time,
  // one with a static batch B > 1 runs B samples at a time (a remainder is left out).
  int64_t batch_size = 8;
  bool histograms = false;  // a second pass fills the |x| histograms (percentile, entropy)
  // Called after each execution: (pass, samples done, samples in all). Pass is 1 or 2.
  std::function<void(int, int64_t, int64_t)> progress;
};

// `graph` is the model compiled at -O0 (it gets the extra outputs). `inputs` gives the
// order of each sample's tensors. Errors name the tensor or the failing batch.
// `samples_used`, if given, receives how many samples ran (fewer than data.samples.size() only
// for a static batch that does not divide them).
Expected<std::map<std::string, TensorStats>> collect_statistics(std::shared_ptr<ir::Graph> graph,
                                                                const std::vector<ModelInput>& inputs,
                                                                const std::vector<std::string>& tensors,
                                                                const CalibrationSet& data,
                                                                const CalibratorOptions& options,
                                                                int64_t* samples_used = nullptr);

// The model inputs to feed (graph inputs without an initializer), dims -1 where open.
std::vector<ModelInput> model_inputs(const ir::Graph& graph);

}  // namespace kiln::quant
