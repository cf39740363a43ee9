#include "runtime/signature_states.h"

#include <algorithm>

namespace kiln::rt {

ExecutionState& SignatureStates::acquire(const Signature& signature) {
  std::lock_guard lock(mutex_);
  ++clock_;
  // Most calls repeat the last signature; the list is short, so a linear search is enough.
  if (current_ < entries_.size() && entries_[current_].signature == signature) {
    entries_[current_].last_use = clock_;
    return *entries_[current_].state;
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].signature == signature) {
      current_ = i;
      entries_[i].last_use = clock_;
      return *entries_[i].state;
    }
  }
  entries_.push_back(Entry{signature, std::make_unique<ExecutionState>(), clock_});
  entries_.back().state->share_plan_memory(plan_memory_);
  current_ = entries_.size() - 1;
  return *entries_.back().state;
}

void SignatureStates::trim() {
  std::lock_guard lock(mutex_);
  for (;;) {
    if (entries_.size() <= 1) return;
    size_t largest = 0, total = 0;
    for (const Entry& e : entries_) {
      ExecutionState::Stats st = e.state->stats();
      size_t b = st.parked_bytes + st.planned_bytes;
      largest = std::max(largest, b);
      total += b;
    }
    if (entries_.size() <= kMaxStates && total - largest <= largest) return;
    size_t victim = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i)
      if (i != current_ && (victim == entries_.size() || entries_[i].last_use < entries_[victim].last_use))
        victim = i;
    recycled_by_evicted_ += entries_[victim].state->stats().recycled_outputs;
    ++evicted_;
    entries_[victim].state->clear();
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(victim));
    if (victim < current_) --current_;
  }
}

void SignatureStates::clear() {
  std::lock_guard lock(mutex_);
  for (Entry& e : entries_) {
    recycled_by_evicted_ += e.state->stats().recycled_outputs;
    e.state->clear();
  }
  entries_.clear();
  // The old block goes with the last state's tensors.
  plan_memory_ = workspace_ ? std::make_shared<PlanMemory>(workspace_, workspace_bytes_) : std::make_shared<PlanMemory>();
  current_ = 0;
}

void SignatureStates::use_workspace(void* base, size_t bytes) {
  std::lock_guard lock(mutex_);
  workspace_ = base;
  workspace_bytes_ = bytes;
  plan_memory_ = std::make_shared<PlanMemory>(base, bytes);
}

SignatureStates::Stats SignatureStates::stats() const {
  std::lock_guard lock(mutex_);
  Stats s;
  s.signatures = entries_.size();
  s.recycled_outputs = recycled_by_evicted_;
  s.evicted = evicted_;
  for (const Entry& e : entries_) {
    ExecutionState::Stats r = e.state->stats();
    s.recycled_outputs += r.recycled_outputs;
    s.parked_bytes += r.parked_bytes;
    s.planned_bytes += r.planned_bytes;
    s.planned_outputs += r.planned_outputs;
  }
  return s;
}

}  // namespace kiln::rt
