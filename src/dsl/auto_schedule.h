// The default schedule: a correct, reasonably fast first version of any compute.
#pragma once

#include "dsl/schedule.h"

namespace kiln::dsl {

// For every stage not yet scheduled: intermediates without a reduction are inlined into
// their consumers; otherwise the data-parallel loops (all but the innermost when there is
// no reduction) are fused into one parallel outermost loop, and the innermost
// data-parallel loop is vectorized (a 1-D compute is split by 256 to get both). The
// innermost reduction loop is vectorised by the code generator.
void auto_schedule(Schedule& s);

}  // namespace kiln::dsl
