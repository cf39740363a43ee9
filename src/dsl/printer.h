// Text form of expressions and of the lowered loop IR (read like TVM's lowered TIR).
#pragma once

#include <string>

#include "dsl/expr.h"
#include "dsl/stmt.h"

namespace kiln::dsl {

std::string to_string(const Expr& e);
// One statement per line, two spaces per nesting level.
std::string to_string(const StmtPtr& s, int indent = 0);

}  // namespace kiln::dsl
