// `kiln quantize` (tools/quantize_command.cc): post-training int8 quantisation to a QDQ ONNX
// model. Exposed for `kiln compile --precision int8 --calibration DATA`, which quantises and
// compiles in one step.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace kiln::tools {

struct QuantizeArgs {
  std::string model;
  std::string calibration;
  std::string output;
  std::string preprocess;
  std::string method = "minmax";
  double percentile = 99.99;
  std::string activation_type = "u8";
  std::string op_types;
  std::string exclude;
  int64_t calibration_size = 0;
  uint32_t seed = 0;
  int64_t batch_size = 8;
  std::string report;
  // Sensitivity analysis and float fallback (quant/sensitivity.h).
  std::string sensitivity;      // --sensitivity FILE: the per-layer report
  std::string accuracy_budget;  // "0.3%": the top-1 agreement drop allowed
  double min_cosine = -1;
  double min_mask_iou = -1;     // --min-mask-iou: the IoU of {output 0 > --mask-threshold}
  double mask_threshold = 0.5;
  double eval_fraction = 0.2;
  int threads = 0;
  const CLI::Option* threads_opt = nullptr;
};

// Runs the quantisation as the command does (messages on stderr, the JSON summary on stdout or
// to args.report); returns the exit code (subcommand.h).
int run_quantize(const QuantizeArgs& args);

}  // namespace kiln::tools
