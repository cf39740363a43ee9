// The description of a model input or output as ONNX Runtime's NodeArg shows it, shared by
// the session's two execution paths (session.cc over the C API, value_session.cc for
// strings, sequences and optionals).
#pragma once

#include <string>

#include <pybind11/pybind11.h>

#include "kiln/kiln.h"

namespace kiln::python {

namespace py = pybind11;

struct NodeArg {
  std::string name;
  py::list shape;  // ints; None or a symbolic name for an open dim; None for an unknown rank
  bool unknown_rank = false;
  std::string type;  // "tensor(float)", "seq(tensor(float))", "optional(tensor(float))"
  py::object dtype;  // of the tensor or of each item; None for strings
};

// ONNX Runtime's type string of a tensor element type ("tensor(float)").
std::string ort_type(kilnDataType t);

// The NumPy dtype carrying a Kiln type; bfloat16 travels as its raw bits in uint16 (NumPy
// has no bfloat16). None for strings and undefined types.
py::object numpy_dtype(kilnDataType t);

}  // namespace kiln::python
