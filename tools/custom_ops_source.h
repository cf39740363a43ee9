// The files `--custom-ops` takes (kiln compile, kiln tune): a plugin library
// (include/kiln/custom_op.h) or a Python file of kiln.dsl.custom_op definitions.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::tools {

// Registers the custom ops of `path` and returns them ("domain::OpType"). A file ending in
// .py is run by the Python interpreter Kiln was built with (kiln.dsl's exporter), in a child
// process bounded by a timeout; it prints their definitions (the custom-op text form of each
// compute), which are checked and registered as a plugin's are. Any other file is loaded as a
// plugin library. Errors: those of compiler::load_custom_op_plugin; for a Python file, the
// file's own error as FILE:LINE: Type: message (a syntax error, an exception, a compute that
// is not element-wise), an interpreter that cannot import the kiln package, a timeout.
Expected<std::vector<std::string>> load_custom_ops(const std::string& path);

}  // namespace kiln::tools
