// The lowered loop IR: loops, stores, buffer allocations, guards and run-time checks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsl/expr.h"

namespace kiln::dsl {

enum class ForKind { kSerial, kParallel, kVectorized, kUnrolled };

enum class StmtKind {
  kFor,       // var in [0, extent), kind, body[0]
  kSeq,       // body...
  kStore,     // tensor[indices] = value
  kLetFloat,  // float name = value (a reduction accumulator)
  kAssign,    // name = value
  kIf,        // if (cond) body[0]
  kAllocate,  // float name[extent] for a tensor computed into a temporary buffer (local: in the
              // enclosing loop's body, of a constant size: a cache stage's region)
  kCheck,     // run-time check: if (!cond) the kernel returns an error naming `message`
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;

struct Stmt {
  StmtKind kind;
  std::string name;     // loop var, buffer, accumulator or check message
  Expr var;             // kFor: the loop variable
  Expr a;               // kFor: extent; kIf/kCheck: cond; kAllocate: size
  std::shared_ptr<TensorNode> tensor;  // kStore, kAllocate
  std::vector<Expr> indices;           // kStore
  Expr value;           // kStore, kLetFloat, kAssign
  ForKind for_kind = ForKind::kSerial;
  bool reduce_loop = false;  // kFor: a loop over a reduction axis
  int reduce_op = 0;         // kFor with reduce_loop: the ReduceOp, for a vector reduction
  std::string accumulator;   // kFor with reduce_loop: the accumulator it updates, if any
  int64_t reduce_lanes = 0;  // kFor with an accumulator: > 1 accumulates in that many partials
  int64_t simd_width = 0;    // kFor vectorized: > 0 the vector length in elements (simdlen), else the target's widest
  bool local = false;        // kAllocate: a local buffer (tensor->shape: its constant dims)
  std::vector<StmtPtr> body;
};

}  // namespace kiln::dsl
