// kiln.Error (python/src/errors.h).
#include "python/src/errors.h"

#include "python/src/binders.h"

namespace kiln::python {
namespace {

PyObject* error_type = nullptr;  // kiln.Error, created once by bind_errors

kilnError code_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange: return KILN_ERROR_INVALID_PARAM;
    case StatusCode::kNotFound: return KILN_ERROR_INVALID_FILE;
    case StatusCode::kDataLoss: return KILN_ERROR_PARSE_FILE;
    case StatusCode::kUnsupported: return KILN_ERROR_FEATURE_UNSUPPORTED;
    case StatusCode::kResourceExhausted: return KILN_ERROR_BAD_ALLOC;
    case StatusCode::kInternal: return KILN_ERROR_INTERNAL_ERROR;
    default: return KILN_ERROR_FAILURE;
  }
}

}  // namespace

void throw_error(kilnError code, const std::string& message) {
  py::object error = py::reinterpret_borrow<py::object>(error_type)(message);
  error.attr("code") = code;
  PyErr_SetObject(error_type, error.ptr());
  throw py::error_already_set();
}

void throw_api_error(kilnError code, const char* call) {
  const char* msg = kilnGetRecentErrMsg();
  if (msg && *msg) throw_error(code, msg);
  throw_error(code, std::string(call) + " failed with error " + std::to_string(code));
}

void throw_status(const Status& status) { throw_error(code_of(status), status.to_string()); }

void bind_errors(py::module_& m) {
  error_type = PyErr_NewExceptionWithDoc(
      "kiln.Error",
      "A Kiln failure. str(e) names the thing at fault; e.code is the kilnError code of "
      "include/kiln/kiln.h (100000 KILN_ERROR_INVALID_PARAM for a wrong argument, ...).",
      PyExc_Exception, nullptr);
  py::object type = py::reinterpret_borrow<py::object>(error_type);
  type.attr("code") = KILN_ERROR_FAILURE;
  m.attr("Error") = type;
  for (const auto& [name, code] : std::initializer_list<std::pair<const char*, kilnError>>{
           {"ERROR_INVALID_PARAM", KILN_ERROR_INVALID_PARAM},
           {"ERROR_UNINITIALIZE", KILN_ERROR_UNINITIALIZE},
           {"ERROR_INVALID_FILE", KILN_ERROR_INVALID_FILE},
           {"ERROR_MODEL_INPUT_NOT_MATCH", KILN_ERROR_MODEL_INPUT_NOT_MATCH},
           {"ERROR_MODEL_OUTPUT_NOT_MATCH", KILN_ERROR_MODEL_OUTPUT_NOT_MATCH},
           {"ERROR_INVALID_RESOURCE_HANDLE", KILN_ERROR_INVALID_RESOURCE_HANDLE},
           {"ERROR_FEATURE_UNSUPPORTED", KILN_ERROR_FEATURE_UNSUPPORTED},
           {"ERROR_FAILURE", KILN_ERROR_FAILURE}})
    m.attr(name) = code;
}

}  // namespace kiln::python
