// The DSL kernel of a custom element-wise op (docs/dsl.md): its compute expression
// (ops/custom_expr.h) as a DSL compute over one symbolic extent n, vectorised, generated as
// C++, compiled and cached on disk by src/dsl. FusedElementwise's program calls it once per
// tile (kernels/cpu/fused_elementwise.cc), inside a fused chain or alone.
#pragma once

#include <memory>

#include "core/status.h"
#include "dsl/build_cache.h"
#include "dsl/examples.h"
#include "ops/custom_expr.h"

namespace kiln::kernels {

// y[i] = e(x0[i], ..., x{num_inputs-1}[i]) for i in [0, n): fn(buffers, &n) with buffers
// {x0, ..., y} (y must not alias an input). Built once per (expression, input count) and
// process; `kernel` keeps the library loaded.
struct DslTileKernel {
  dsl::EntryFn fn = nullptr;
  std::shared_ptr<dsl::Kernel> kernel;
};

// `split` is the schedule: 0 or 1 the loop vectorized whole (the default), > 1 split by that
// factor with the inner loop vectorized (a tuned schedule: the node attribute dsl_split that
// kiln compile --tuning-db sets). Errors: the expression does not lower (a kiln bug: the parser
// admits only what lowers), the system compiler failed or is missing, the library did not load.
Expected<DslTileKernel> dsl_tile_kernel(const ops::CustomExpr& e, int num_inputs, int64_t split = 0);

// The DSL source of that kernel's compute as loop IR, for `kiln inspect`-style dumps and tests.
Expected<std::string> dsl_tile_kernel_ir(const ops::CustomExpr& e, int num_inputs, int64_t split = 0);

// The same compute over [rows, cols] (every input of that shape) as a DSL example operator, for
// kiln tune --op FILE (an element-wise op of one's own, tuned with dsl/tuning.h's knobs); its
// name is dsl_tile_signature's. Errors as dsl_tile_kernel's for an unbound or bad expression.
Expected<dsl::Example> dsl_elementwise_example(const ops::CustomExpr& e, int num_inputs, dsl::Expr rows,
                                                dsl::Expr cols);

// The elements of a tile, FusedElementwise's unit of work and so the extent the kernel is
// called with (and tuned at).
inline constexpr int64_t kDslTileElements = 1024;

// The kernel's key in a tuning database (dsl/tuning.h): "elementwise/N EXPR" with N inputs and
// the expression text; its shape there is [1, kDslTileElements].
std::string dsl_tile_signature(const ops::CustomExpr& e, int num_inputs);

}  // namespace kiln::kernels
