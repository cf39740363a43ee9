// Lowering: a schedule becomes one loop-IR function, after legality and bounds checks.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "dsl/schedule.h"
#include "dsl/stmt.h"

namespace kiln::dsl {

// A lowered kernel: `body` reads and writes the buffers `args` (placeholders and outputs,
// float32, dense row-major) with the symbolic `dims` bound when it runs.
struct LoweredFunc {
  std::string name;
  std::vector<Tensor> args;
  std::vector<Expr> dims;  // kVar nodes, in the order a caller binds them
  StmtPtr body;
};

// Lowers `schedule` into a function taking `args` in that order. Errors (invalid argument):
// an illegal primitive (unknown loop, split by < 1, non-adjacent fuse), a parallel or
// vectorized reduction loop (a race), a vectorized loop that is not innermost, nested
// parallel loops, an inlined reduction or output, a placeholder or output missing from
// `args`, a symbolic dim bound by no argument. Out of range: a read that bounds inference
// proves out of bounds; reads it cannot decide become run-time checks in the body.
Expected<LoweredFunc> lower(const Schedule& schedule, const std::vector<Tensor>& args,
                            const std::string& name);

// The function as text: signature, then the loop IR.
std::string to_string(const LoweredFunc& f);

}  // namespace kiln::dsl
