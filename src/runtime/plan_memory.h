// The block that the memory plans of one execution context's states share.
//
// A model with open dims keeps one execution state per input-shape signature
// (signature_states.h), each with a memory plan that lays its activations out in one block.
// The context runs one execution at a time, so the plans need not have blocks of their own:
// sharing one (as large as the largest plan) puts every signature's activations at the same
// addresses, and an execution at a new width finds the lines the previous width just wrote in
// the caches instead of blocks last touched several executions ago. It also holds the largest
// plan's bytes instead of the sum of all of them.
//
// A plan whose tensor is still held by someone at the end of an execution is dropped (the
// holder keeps its memory alive); if that memory is the shared block, retire() takes the block
// out of service, so that no other state writes under the held tensor: the others move to a
// new block at their next execution (generation()).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln::rt {

class PlanMemory {
 public:
  PlanMemory() = default;
  // Over memory the caller owns and keeps alive (a workspace given at load): block() hands out
  // that memory and never more.
  PlanMemory(void* base, size_t bytes);
  // A block of at least `bytes`: the current one when it is large enough, else a new one
  // (which becomes the current one, a new generation). Not thread-safe: one context, one
  // execution at a time.
  Expected<Tensor> block(size_t bytes);
  // Changes whenever the current block is replaced or retired: a plan laid out over another
  // generation's block moves to the current one before its next execution.
  uint64_t generation() const { return generation_; }
  // Takes the block starting at `base` out of service, if it is the current one.
  void retire(const void* base);
  size_t bytes() const { return capacity_; }

 private:
  Tensor block_;
  size_t capacity_ = 0;
  bool external_ = false;
  uint64_t generation_ = 0;
};

}  // namespace kiln::rt
