// kiln.Error (an Exception with .code, a kilnError value of include/kiln/kiln.h) and the
// ways C++ code raises it.
#pragma once

#include <string>

#include "core/status.h"
#include "kiln/kiln.h"

namespace kiln::python {

// Raises kiln.Error(message) with .code = code. Call with the GIL held.
[[noreturn]] void throw_error(kilnError code, const std::string& message);
// A failed C API call: kilnGetRecentErrMsg(), or the call's name and the code.
[[noreturn]] void throw_api_error(kilnError code, const char* call);
// A failed Status; the code is the nearest kilnError (KILN_ERROR_INVALID_PARAM for an
// invalid argument, KILN_ERROR_FAILURE otherwise).
[[noreturn]] void throw_status(const Status& status);

}  // namespace kiln::python
