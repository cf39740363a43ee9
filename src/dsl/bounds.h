// Bounds inference: index arithmetic normalised to linear forms, and the interval an index
// takes over loop ranges, so that out-of-bounds reads are found before any code runs.
#pragma once

#include <map>
#include <string>

#include "core/status.h"
#include "dsl/expr.h"

namespace kiln::dsl {

// Integer expression normalised: sums of terms with constant coefficients, constants folded.
Expr simplify(const Expr& e);

// What is known of `e >= 0` when every free variable (a symbolic dim) is >= 1.
enum class Proof { kTrue, kFalse, kUnknown };
Proof prove_nonnegative(const Expr& e);

// Loop variables (by node) to their inclusive range [lo, hi].
using Ranges = std::map<const ExprNode*, std::pair<Expr, Expr>>;

// The inclusive interval of integer `e` when its loop variables span `ranges`; other
// variables are symbolic dims, constant here. Fails for expressions it cannot bound
// (a float cast to an index, a division by a non-constant).
Status bound(const Expr& e, const Ranges& ranges, Expr* lo, Expr* hi);

}  // namespace kiln::dsl
