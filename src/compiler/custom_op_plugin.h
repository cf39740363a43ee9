// Custom-op plugins (include/kiln/custom_op.h, docs/dsl.md): loading a plugin library,
// registering its definitions as ops the compiler accepts, and the definitions the
// custom_op_lowering pass rewrites nodes with.
//
// Trust: a plugin is native code and runs in this process with the user's rights. Loading
// reports what the plugin reports or throws (a C++ exception is caught at each call into it)
// and checks what it returns, but a plugin that crashes or corrupts memory takes the process
// with it. Not thread-safe: load plugins before compiling.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "kiln/custom_op.h"
#include "ops/custom_expr.h"

namespace kiln::compiler {

struct CustomOpDefinition {
  std::string domain;
  std::string op_type;
  int num_inputs = 1;
  std::vector<std::string> attr_names;
  std::vector<float> attr_defaults;
  std::string compute;       // as the plugin gave it
  ops::CustomExpr expr;      // parsed and checked
  kilnCustomOpInferFn infer = nullptr;  // plugin code, or null (broadcast)
  std::string plugin;        // the library it came from
};

// dlopens `path`, calls its entry point and registers each op it defines (an op schema with
// the plugin's shape inference, checked, and the definition's reference kernel). Returns the
// ops registered ("domain::OpType"). Errors name the plugin: not a loadable library, no
// entry point, another ABI version, the entry refused or threw, a definition malformed
// (unknown function, input out of range, undeclared attribute) or already defined.
Expected<std::vector<std::string>> load_custom_op_plugin(const std::string& path);

// Registers definitions that come from no library: a Python file's (kiln.dsl.custom_op, run by
// `kiln compile --custom-ops FILE.py`), its ops' shapes the broadcast of their inputs
// (`infer` must be null). The same checks and errors as a plugin's definitions, naming
// `source`. Returns the ops registered.
Expected<std::vector<std::string>> register_custom_op_definitions(const std::string& source,
                                                                  const std::vector<kilnCustomOpDef>& defs);

// The node's values of the definition's attributes (float or int ONNX attributes; the
// defaults where the node sets none), in definition order. Error: another attribute kind.
Expected<std::vector<float>> custom_op_attr_values(const CustomOpDefinition& def, const ir::Node& node);

// The definition registered for (domain, op_type), or null.
const CustomOpDefinition* find_custom_op(const std::string& domain, const std::string& op_type);

}  // namespace kiln::compiler
