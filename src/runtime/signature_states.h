// The execution states of one execution context, one per input-shape signature.
//
// An ExecutionState keeps, between executions, the tensors its values used (its pool), so a
// model run again at the same shapes finds every activation block where it left it and
// allocates nothing. One state shared by a model run at changing shapes (a dynamic model fed
// OCR lines of several widths, in any order) instead gives back and re-takes blocks at every
// change of shape, and each execution finds its activations at new addresses, cold in the
// caches: on PP-OCRv4 rec that cost 0.15-0.25 ms per run. So each signature (the dims of
// every input) gets a state of its own, made on first sight and reused, as a model compiled
// at that shape would have: this is the per-signature memory plan of a dynamic model.
//
// The states' memory plans share one block (plan_memory.h): an execution at a new shape
// finds its activations at the addresses the previous shape's execution just wrote, warm in
// the caches, and the plans hold the largest one's bytes, not the sum.
//
// Bounds: at most kMaxStates signatures, and the states other than the largest together park
// at most as many bytes as the largest one (so a ladder of sizes such as widths
// 160/320/640/1280 is kept whole, and a model whose shapes moved on keeps at most twice the
// memory of its largest shape). The least recently used states go first; a state given up
// returns its blocks to the context's arena.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/graph_executor.h"
#include "runtime/plan_memory.h"

namespace kiln::rt {

class SignatureStates {
 public:
  static constexpr size_t kMaxStates = 8;

  using Signature = std::vector<std::vector<int64_t>>;

  SignatureStates() = default;
  SignatureStates(const SignatureStates&) = delete;
  SignatureStates& operator=(const SignatureStates&) = delete;

  // The state of `signature`, made if new. Valid until the next acquire() or clear().
  ExecutionState& acquire(const Signature& signature);
  // After an execution's end_run: gives up least recently used states beyond the bounds,
  // never the one just used.
  void trim();
  // Gives every state up (their blocks back to the arena).
  void clear();
  // The states' plans lay out in [base, base + bytes) (a workspace given at load) instead of a
  // block from the heap. Set before the first acquire().
  void use_workspace(void* base, size_t bytes);

  struct Stats {
    size_t signatures = 0;          // states kept now
    uint64_t recycled_outputs = 0;  // over every state ever kept
    size_t parked_bytes = 0;        // parked now, over the states kept
    size_t planned_bytes = 0;       // the states' memory plans' sizes (their shared block is the largest)
    uint64_t planned_outputs = 0;   // outputs placed by plans, over the states kept
    uint64_t evicted = 0;           // states given up by trim()
  };
  // May be called while an execution runs on a state.
  Stats stats() const;

 private:
  struct Entry {
    Signature signature;
    std::unique_ptr<ExecutionState> state;
    uint64_t last_use = 0;
  };
  mutable std::mutex mutex_;  // guards the list against stats(); the context has one user
  std::vector<Entry> entries_;
  std::shared_ptr<PlanMemory> plan_memory_ = std::make_shared<PlanMemory>();
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  size_t current_ = 0;  // index of the entry acquire() returned last
  uint64_t clock_ = 0;
  uint64_t recycled_by_evicted_ = 0;
  uint64_t evicted_ = 0;
};

}  // namespace kiln::rt
