// The calibration set of `kiln quantize --calibration DATA` (docs/quantization.md "Data layout").
//
// DATA is a folder in one of three layouts, told apart by what it holds:
//   1. sample folders: DATA/<sample>/<input>.npy, one sub-folder per sample holding one file
//      per model input, named after the input (characters other than letters, digits, '.', '_'
//      and '-' replaced by '_'); any model;
//   2. plain .npy files: DATA/*.npy, for a model with one input; each file holds one sample
//      (the input's shape without its batch dim) or a batch (the input's rank, samples along
//      axis 0);
//   3. images: DATA/*.{png,jpg,...}, for a model with one rank-4 float input, turned into
//      tensors by a --preprocess spec (image_preprocess.h).
// Files are taken in name order. Every sample is checked against the model input: dtype,
// rank, every static dim, and for floating-point data that every value is finite. Errors
// name the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln::quant {

// A model input as calibration sees it; dims of -1 are open.
struct ModelInput {
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> dims;
};

struct CalibrationDataOptions {
  std::string path;
  std::string preprocess;   // --preprocess spec; required for images
  int64_t max_samples = 0;  // --calibration-size; 0 takes every sample
  uint32_t seed = 0;        // picks the samples when there are more than max_samples
};

// One sample: a tensor per model input (in ModelInput order), each with a batch dim of 1
// for inputs of rank >= 1.
using Sample = std::vector<Tensor>;

struct CalibrationSet {
  std::vector<Sample> samples;
  std::string layout;      // "sample folders", "npy files", "images"
  int64_t available = 0;   // samples found before --calibration-size
};

Expected<CalibrationSet> load_calibration_data(const std::vector<ModelInput>& inputs,
                                               const CalibrationDataOptions& options);

// The file name layout 1 expects for an input.
std::string input_file_name(const std::string& input);

}  // namespace kiln::quant
