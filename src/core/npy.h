// NumPy .npy files: read and write tensors of every numeric dtype (float16/32/64,
// bfloat16, int8..int64, uint8..uint64, bool). Strings are not supported.
// bfloat16 has no NumPy dtype; Kiln writes it with descr "bfloat16" (the name
// ml_dtypes registers) and reads it back.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

// Reads format versions 1.0, 2.0 and 3.0, little- or big-endian, C or Fortran order.
// Errors name the file and what is wrong with it.
Expected<Tensor> read_npy(const std::string& path);
Expected<Tensor> parse_npy(const void* data, size_t size, const std::string& name_for_errors);
// Writes format 1.0 (2.0 if the header needs it), little-endian, C order.
Status write_npy(const std::string& path, const Tensor& tensor);

}  // namespace kiln
