// What an ExecutionState keeps between executions, private to graph_executor.cc: the pool of
// finished tensors, the memory plan recorded from the first execution (PlannedBlock), and the
// .kiln's arena plan laid out from the first execution on (ExecutionState::use_arena_layout).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/logging.h"
#include "core/offset_assignment.h"
#include "kernels/cpu/lent_workspace.h"
#include "runtime/graph_executor.h"
#include "runtime/plan_memory.h"

namespace kiln::rt {

// The memory plan an execution state makes from its first execution, and the one block of
// memory it lays the outputs of every later execution out in. The first execution records, in order, each output it was asked for (its
// bytes) and the point where that output's block was parked free again; the state's
// executions all have the same input shapes (SignatureStates keeps one state per shape
// signature), so the next ones ask for the same sizes in the same order. assign_offsets (the
// compiler's offset assignment) places those lifetimes in one block, and from then on the
// r-th output asked for is a tensor at its planned offset: no arena lock, no size lookup, and
// the block is the plan's size, not the sum of every size the exact-size pool kept.
//
// The plan is only used while an execution keeps to the recorded order: every request and
// every release is checked against it, and on the first difference (a data-dependent shape,
// a failed step, a tensor some caller kept) the rest of the execution takes its memory from
// the arena as before. Planned tensors handed out are tracked one by one, and a plan some of
// whose tensors did not come back by the end of an execution is dropped, so the block is
// never handed out twice. The block stays alive as long as any of its tensors does (each
// tensor's deleter holds the PlannedBlock).
class PlannedBlock final : public TensorAllocator {
 public:
  explicit PlannedBlock(Tensor memory, size_t max_freed) : memory_(std::move(memory)) {
    freed_.reserve(max_freed);
  }
  char* base() { return static_cast<char*>(memory_.raw_data()); }
  // The block's bytes (a workspace is a view: no storage of its own, so its elements count).
  size_t size() const { return memory_.size_bytes(); }
  // Hands out `next` once: Tensor::allocate under a scope of this block takes it.
  void* allocate(size_t) override { return std::exchange(next_, nullptr); }
  // A planned tensor's last owner went away without being parked (a view in another value
  // kept the block, and that value was dropped): noted for the pool to see at its next trim.
  void deallocate(void* p, size_t) override {
    std::lock_guard lock(mutex_);
    if (freed_.size() < freed_.capacity()) freed_.push_back(p);
  }
  void set_next(void* p) { next_ = p; }
  // Moves the blocks freed since the last call into `out` (cleared first).
  void take_freed(std::vector<void*>* out) {
    out->clear();
    std::lock_guard lock(mutex_);
    out->swap(freed_);
    freed_.reserve(out->capacity());
  }

 private:
  Tensor memory_;
  void* next_ = nullptr;
  std::mutex mutex_;
  std::vector<void*> freed_;
};

// Finished tensors by block size, sorted; each bin's vector keeps its capacity, so parking
// and taking allocate nothing once the first execution has sized the bins. After the first
// execution, the outputs come from the plan above where it holds.
class ExecutionState::Pool final : public ops::OutputRecycler {
 public:
  bool reuse(DataType dtype, const std::vector<int64_t>& dims, TensorInit init, Tensor* out) override {
    size_t bytes = 0;
    if (!Tensor::storage_bytes_for(dtype, dims, &bytes)) return false;
    if (layout_ && take_laid_out(bytes, dtype, dims, init, out)) return true;
    if (plan_ && !diverged_ && take_planned(bytes, dtype, dims, init, out)) return true;
    Bin& bin = bin_of(bytes);
    ++bin.demand;
    if (bin.tensors.empty()) {
      if (!recording()) return false;
      // Recording: allocate here (as the kernel context would) to learn the block's address.
      Expected<Tensor> fresh = Tensor::allocate(dtype, dims, init);
      if (!fresh.ok()) return false;
      *out = std::move(fresh).value();
    } else {
      *out = std::move(bin.tensors.back());
      bin.tensors.pop_back();
      out->reuse_storage(dtype, dims, init);
      parked_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      recycled_.fetch_add(1, std::memory_order_relaxed);
    }
    if (recording()) record_request(bytes, out->raw_data());
    return true;
  }

  bool reuse_view(const Tensor& base, const std::vector<int64_t>& dims, Tensor* out) override {
    ++shell_demand_;
    if (shells_.empty()) return false;
    // The last shell with room for the dims (so that become_view_of allocates nothing), else the last.
    size_t k = shells_.size() - 1;
    for (size_t i = shells_.size(); i-- > 0;)
      if (shells_[i].dims().capacity() >= dims.size()) {
        k = i;
        break;
      }
    std::swap(shells_[k], shells_.back());
    *out = std::move(shells_.back());
    shells_.pop_back();
    out->become_view_of(base, dims);
    recycled_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Takes the tensor of `v` when its block is free to reuse, or else keeps the tensor object
  // without its storage as a shell for a view (reuse_view); `v` is empty afterwards.
  void park(RuntimeValue& v) {
    if (v.is_tensor() && !v.tensor().storage_reusable() && shells_.size() < kMaxShells) {
      v.tensor().release_storage();
      shells_.push_back(std::move(v.tensor()));
    } else if (v.is_tensor() && v.tensor().storage_reusable()) {
      if (recording()) {
        // Straight back to the arena, whose free lists reuse blocks across sizes (up to twice
        // as large): the recorded execution's peak is what the process's peak memory is.
        record_release(v.tensor().raw_data());
      } else if (!park_laid_out(v.tensor()) && !park_planned(v.tensor())) {
        size_t bytes = v.tensor().storage_bytes();
        bin_of(bytes).tensors.push_back(std::move(v.tensor()));
        parked_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      }
    }
    v = RuntimeValue();
  }

  // At the end of an execution: each size keeps at most as many blocks as this execution
  // asked the pool for; the rest go back to the arena. So shapes that change do not hoard
  // memory, and the blocks of tensors kernels allocate by themselves (not through the kernel
  // context, so never asked for here) return to the arena's free lists, where those kernels
  // find them again. The first execution's record becomes the plan here.
  void trim() {
    if (layout_) {
      drain_freed();
      if (!keep_bins_)
        for (Bin& b : bins_) b.demand = 0;
    }
    if (recording()) {
      make_plan();
    } else if (plan_) {
      // Executions that keep leaving the plan (shapes that depend on the data) drop it, and
      // the next one records again (up to kMaxRecordings).
      diverged_runs_ = diverged_ ? diverged_runs_ + 1 : 0;
      if (diverged_runs_ >= kMaxDivergedRuns) {
        drop_plan();
      } else {
        check_plan_returned();
      }
    }
    for (Bin& b : bins_) {
      while (b.tensors.size() > b.demand) {
        b.tensors.pop_back();
        parked_bytes_.fetch_sub(b.bytes, std::memory_order_relaxed);
      }
      b.demand = 0;
    }
    // Shells too: as many as this execution asked for. Kept all (up to kMaxShells), the shells
    // of tensors no view reuses (the bound inputs, views of a model without view ops) pile up,
    // one more per execution, and shells_ grows (allocates) every few executions.
    while (shells_.size() > shell_demand_) shells_.pop_back();
    shell_demand_ = 0;
    next_event_ = 0;
    diverged_ = false;
  }
  void clear() {
    bins_.clear();
    shells_.clear();
    shell_demand_ = 0;
    drop_layout_block();
    drop_plan();
    trace_ = Trace();
    recordings_ = 0;
    parked_bytes_.store(0, std::memory_order_relaxed);
  }
  // Read by Model::stats while an execution may be running.
  uint64_t recycled() const { return recycled_.load(std::memory_order_relaxed); }
  size_t parked_bytes() const { return parked_bytes_.load(std::memory_order_relaxed); }
  size_t planned_bytes() const { return planned_bytes_.load(std::memory_order_relaxed); }
  uint64_t planned_outputs() const { return planned_outputs_.load(std::memory_order_relaxed); }
  bool take_new_plan() { return std::exchange(new_plan_, false); }
  void share_plan_memory(std::shared_ptr<PlanMemory> memory) { shared_ = std::move(memory); }
  void use_arena_layout(std::shared_ptr<const ArenaLayout> layout, bool keep_bins) {
    layout_ = std::move(layout);
    keep_bins_ = keep_bins;
  }
  bool has_arena_layout() const { return layout_ != nullptr; }
  // The largest range of the plan's block that no value holds while step `step` runs, 64-byte
  // aligned, lent to its kernel (kernels/cpu/lent_workspace.h): not an entry out (live_: the
  // step's inputs and everything a later step still reads, views' bases included) nor one of
  // the step's own outputs, which its kernel takes during the run. Empty before the block is
  // laid out. No allocation: busy_ was sized with the block.
  kernels::LentWorkspace free_range(size_t step) {
    if (!layout_block_ || step + 1 >= layout_->step_begin.size()) return {};
    const std::vector<ArenaLayout::Entry>& entries = layout_->entries;
    busy_.assign(live_.begin(), live_.end());
    for (uint32_t k = layout_->step_begin[step]; k < layout_->step_begin[step + 1]; ++k) busy_.push_back(k);
    std::sort(busy_.begin(), busy_.end(),
              [&](uint32_t a, uint32_t b) { return entries[a].offset < entries[b].offset; });
    size_t best_begin = 0, best_end = 0, free_from = 0;
    const uintptr_t base = reinterpret_cast<uintptr_t>(layout_block_->base());
    auto consider = [&](size_t begin, size_t end) {
      begin = align64_up(base + begin) - base;
      if (end > begin && end - begin > best_end - best_begin) best_begin = begin, best_end = end;
    };
    for (uint32_t e : busy_) {
      consider(free_from, entries[e].offset);
      free_from = std::max(free_from, entries[e].offset + entries[e].size);
    }
    consider(free_from, layout_block_->size());
    return {layout_block_->base() + best_begin, best_end - best_begin};
  }
  // The step's planned workspace (model/arena_plan.h) when it holds `bytes` and no value still
  // out lies in it (a value the run keeps past its planned end: a view, a tensor someone kept),
  // else free_range(step): a kernel that asks for more than `kiln compile` noted (more threads
  // than at compile time) still borrows what is free. Empty before the block is laid out.
  kernels::LentWorkspace planned_range(size_t step, size_t bytes) {
    if (!layout_block_ || step >= layout_->workspace.size()) return {};
    const ArenaLayout::Range& w = layout_->workspace[step];
    if (w.size < bytes || !workspace_enabled()) return free_range(step);
    for (uint32_t o : live_) {
      const ArenaLayout::Entry& b = layout_->entries[o];
      if (w.offset < b.offset + b.size && b.offset < w.offset + w.size) return free_range(step);
    }
    return {layout_block_->base() + w.offset, w.size, true};
  }
  // planned_range as a lender, asked when the step's kernel wants a workspace; empty without a
  // plan or with KILN_ARENA_LOAN=0.
  kernels::WorkspaceLender lender(size_t step) {
    if (!layout_ || !loan_enabled()) return {};
    return {[](void* pool, size_t s, size_t bytes) { return static_cast<Pool*>(pool)->planned_range(s, bytes); },
            this, step};
  }
  void begin_step(size_t step) {
    // The planned outputs of the step before that no request took: its kernel made them itself.
    if (layout_block_ && step > 0 && step < layout_->step_begin.size())
      for (uint32_t k = layout_->step_begin[step - 1]; k < layout_->step_begin[step]; ++k)
        if (layout_held_[k] != Held::kOut && !layout_noted_[k])
          note(k, "its kernel made it itself (a view, or an allocation of its own): its planned place stays unused");
    step_ = step;
  }

 private:
  struct Bin {
    size_t bytes;
    std::vector<Tensor> tensors;
    size_t demand = 0;  // outputs of this size asked for in this execution
  };
  // One event of an execution, in order: output `request` asked for, or its block parked free.
  struct Event {
    uint32_t request;
    bool release;
  };
  struct Trace {
    std::vector<size_t> bytes;            // per request
    std::vector<Event> events;
    std::unordered_map<const void*, uint32_t> live;  // block -> request, while recording
    bool valid = true;  // false once something the plan cannot follow happened
  };
  enum class Held : uint8_t { kInPool, kOut, kFreed };
  struct Plan {
    size_t block_bytes = 0;
    std::shared_ptr<PlannedBlock> block;  // made by materialize()
    uint64_t generation = 0;              // of the shared PlanMemory the block came from
    std::vector<size_t> bytes, offsets;   // per request
    std::vector<Event> events;
    std::vector<Tensor> tensors;          // per request, while in the pool
    std::vector<Held> held;               // per request
    std::vector<size_t> offset_index;     // per request: its offset's index in `offsets_sorted`
    std::vector<size_t> offsets_sorted;   // the distinct offsets
    std::vector<uint32_t> out_at;         // per distinct offset: the request handed out there
    std::vector<void*> freed;             // scratch for PlannedBlock::take_freed
  };

  // Executions recorded at most per state: a model whose executions keep differing (shapes
  // that depend on the data) goes on with the exact-size pool alone.
  static constexpr int kMaxRecordings = 2;
  // Requests recorded at most: a plan is made for a model's activations, not for unbounded
  // loops of them.
  static constexpr size_t kMaxRequests = 1 << 16;
  // Executions in a row that left the plan before it is dropped.
  static constexpr int kMaxDivergedRuns = 3;

  bool recording() const { return !layout_ && !plan_ && recordings_ < kMaxRecordings && trace_.valid; }

  // ---- The .kiln's arena plan (use_arena_layout) ----
  // Entries handed out and not back yet are `live_`: an entry is handed out only when its range
  // overlaps none of them, whatever the plan says, so a plan the run does not keep to (a view
  // outliving its base, a size the kernel changed) costs memory, never a value overwritten.
  bool materialize_layout() {
    const ArenaLayout& l = *layout_;
    Expected<Tensor> memory = [&]() -> Expected<Tensor> {
      if (shared_) return shared_->block(l.arena_bytes);
      TensorAllocatorScope heap(nullptr);
      return Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(l.arena_bytes)}, TensorInit::kUninitialized);
    }();
    if (!memory.ok()) {
      KILN_LOG(kDebug, "the arena plan's block of %zu bytes cannot be had (%s): outputs taken outside the plan",
               l.arena_bytes, memory.status().to_string().c_str());
      layout_failed_ = true;
      return false;
    }
    if (shared_) layout_generation_ = shared_->generation();
    const size_t n = l.entries.size();
    layout_block_ = std::make_shared<PlannedBlock>(std::move(memory).value(), n);
    layout_tensors_.assign(n, Tensor());
    layout_held_.assign(n, Held::kFreed);
    layout_noted_.assign(n, false);
    live_.clear();
    live_.reserve(n);
    busy_.reserve(2 * n);
    layout_freed_.reserve(n);
    planned_bytes_.store(l.arena_bytes, std::memory_order_relaxed);
    return true;
  }
  void drop_layout_block() {
    if (!layout_block_) return;
    // A tensor still out is held by someone: no plan may write under it again.
    if (shared_ && !live_.empty()) shared_->retire(layout_block_->base());
    layout_block_.reset();
    layout_tensors_.clear();
    live_.clear();
    planned_bytes_.store(0, std::memory_order_relaxed);
  }
  // Says once per entry why it was not served from the plan.
  void note(size_t e, const char* why) {
    if (layout_noted_[e]) return;
    layout_noted_[e] = true;
    const ArenaLayout::Entry& entry = layout_->entries[e];
    KILN_LOG(kDebug, "value '%s' of node %s (planned %zu bytes at offset %zu of the arena plan): %s",
             entry.value->name().c_str(), entry.node->label().c_str(), entry.size, entry.offset, why);
  }
  bool overlaps_live(size_t e) const {
    const ArenaLayout::Entry& a = layout_->entries[e];
    for (uint32_t o : live_) {
      const ArenaLayout::Entry& b = layout_->entries[o];
      if (a.offset < b.offset + b.size && b.offset < a.offset + a.size) return true;
    }
    return false;
  }
  void retire_live(size_t i, Held to) {
    layout_held_[live_[i]] = to;
    live_[i] = live_.back();
    live_.pop_back();
  }
  // Entries whose last tensor went (a view kept the block and was dropped) leave live_.
  void drain_freed() {
    if (!layout_block_) return;
    layout_block_->take_freed(&layout_freed_);
    for (void* q : layout_freed_) {
      const size_t offset = static_cast<size_t>(static_cast<char*>(q) - layout_block_->base());
      for (size_t i = 0; i < live_.size(); ++i)
        if (layout_->entries[live_[i]].offset == offset) {
          layout_tensors_[live_[i]] = Tensor();
          retire_live(i, Held::kFreed);
          break;
        }
    }
  }
  bool take_laid_out(size_t bytes, DataType dtype, const std::vector<int64_t>& dims, TensorInit init, Tensor* out) {
    const ArenaLayout& l = *layout_;
    if (step_ + 1 >= l.step_begin.size() || layout_failed_) return false;
    const uint32_t begin = l.step_begin[step_], end = l.step_begin[step_ + 1];
    if (begin == end) return false;
    // A shared block another state replaced moves this plan to the current one once none of
    // its tensors is out.
    if (layout_block_ && shared_ && layout_generation_ != shared_->generation() && live_.empty())
      layout_block_.reset();
    if (!layout_block_ && !materialize_layout()) return false;
    size_t e = end;
    for (size_t k = begin; k < end && e == end; ++k)
      if (layout_held_[k] != Held::kOut && l.entries[k].size == bytes) e = k;
    if (e == end) {
      for (size_t k = begin; k < end; ++k)
        if (layout_held_[k] != Held::kOut)
          note(k, "its kernel asked for another size: served outside the plan");
      return false;
    }
    if (overlaps_live(e)) {
      drain_freed();
      if (overlaps_live(e)) {
        note(e, "its place is still held by a value the plan has dead (a view of it, or a tensor kept): served "
                "outside the plan");
        return false;
      }
    }
    if (layout_held_[e] == Held::kFreed) {
      layout_block_->set_next(layout_block_->base() + l.entries[e].offset);
      TensorAllocatorScope scope(layout_block_);
      // Made with room for seven dims: the tensor objects of the plan pass on to views (as
      // shells) and come back from them, and reuse_storage / become_view_of allocate nothing
      // for a dims vector that has the room.
      const int64_t bytes = static_cast<int64_t>(l.entries[e].size);
      Expected<Tensor> t = Tensor::allocate(DataType::kUInt8, {1, 1, 1, 1, 1, 1, bytes}, TensorInit::kUninitialized);
      if (!t.ok()) return false;
      layout_tensors_[e] = std::move(t).value();
    }
    *out = std::move(layout_tensors_[e]);
    if (out->dims().capacity() < dims.size()) {
      // The tensor object came back from a view of fewer dims: its storage moves into a shell
      // with room for these dims, and the small object becomes the shell.
      for (Tensor& shell : shells_)
        if (shell.dims().capacity() >= dims.size()) {
          shell.become_view_of(*out, out->dims());
          out->release_storage();
          std::swap(shell, *out);
          break;
        }
    }
    layout_held_[e] = Held::kOut;
    live_.push_back(static_cast<uint32_t>(e));
    out->reuse_storage(dtype, dims, init);
    recycled_.fetch_add(1, std::memory_order_relaxed);
    planned_outputs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // Takes back a tensor in the plan's block: the live entry at its offset (a copy sharing a
  // planned block, such as an Identity's output, returns its base's entry). False for others.
  bool park_laid_out(Tensor& t) {
    if (!layout_block_) return false;
    char* data = static_cast<char*>(t.raw_data());
    if (data < layout_block_->base() || data >= layout_block_->base() + layout_block_->size()) return false;
    const size_t offset = static_cast<size_t>(data - layout_block_->base());
    for (size_t i = 0; i < live_.size(); ++i)
      if (layout_->entries[live_[i]].offset == offset) {
        layout_tensors_[live_[i]] = std::move(t);
        retire_live(i, Held::kInPool);
        return true;
      }
    t = Tensor();  // not a tensor the plan has out: let it go
    return true;
  }

  void record_request(size_t bytes, const void* data) {
    if (trace_.bytes.size() >= kMaxRequests) {
      trace_.valid = false;
      return;
    }
    auto r = static_cast<uint32_t>(trace_.bytes.size());
    trace_.bytes.push_back(bytes);
    trace_.events.push_back({r, false});
    trace_.live[data] = r;
  }
  void record_release(const void* data) {
    auto it = trace_.live.find(data);
    if (it == trace_.live.end()) return;  // a block a kernel allocated by itself
    trace_.events.push_back({it->second, true});
    trace_.live.erase(it);
  }

  // The end of a recorded execution: lifetimes in event positions (blocks never parked free
  // live to the end), their offsets, the block, and a tensor per request.
  void make_plan() {
    ++recordings_;
    Trace trace = std::move(trace_);
    trace_ = Trace();
    const size_t n = trace.bytes.size();
    if (!trace.valid || n == 0) return;
    std::vector<int> first(n), last(n, static_cast<int>(trace.events.size()));
    for (size_t e = 0; e < trace.events.size(); ++e)
      (trace.events[e].release ? last : first)[trace.events[e].request] = static_cast<int>(e);
    auto plan = std::make_unique<Plan>();
    plan->block_bytes = assign_offsets(trace.bytes, first, last, &plan->offsets);
    if (plan->block_bytes == 0) return;
    plan->bytes = std::move(trace.bytes);
    plan->events = std::move(trace.events);
    plan->offsets_sorted = plan->offsets;
    std::sort(plan->offsets_sorted.begin(), plan->offsets_sorted.end());
    plan->offsets_sorted.erase(std::unique(plan->offsets_sorted.begin(), plan->offsets_sorted.end()),
                               plan->offsets_sorted.end());
    plan->offset_index.resize(n);
    for (size_t r = 0; r < n; ++r)
      plan->offset_index[r] = index_of_offset(*plan, plan->offsets[r]);
    plan->out_at.assign(plan->offsets_sorted.size(), 0);
    plan->held.assign(n, Held::kFreed);
    plan->tensors.resize(n);
    plan->freed.reserve(n);
    plan_ = std::move(plan);
    new_plan_ = true;
  }

  // The plan's block and tensors, made by the first execution that follows the plan (so the
  // recorded execution's blocks can go back first: ExecutionState::take_new_plan).
  bool materialize() {
    Plan& p = *plan_;
    Expected<Tensor> memory = [&]() -> Expected<Tensor> {
      if (shared_) return shared_->block(p.block_bytes);
      TensorAllocatorScope heap(nullptr);  // one block of its own, not the arena's free lists
      return Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(p.block_bytes)},
                              TensorInit::kUninitialized);
    }();
    if (!memory.ok()) return false;
    if (shared_) p.generation = shared_->generation();
    p.block = std::make_shared<PlannedBlock>(std::move(memory).value(), p.bytes.size());
    for (size_t r = 0; r < p.bytes.size(); ++r)
      if (!make_planned_tensor(r)) return false;
    planned_bytes_.store(p.block_bytes, std::memory_order_relaxed);
    return true;
  }

  static size_t index_of_offset(const Plan& plan, size_t offset) {
    return static_cast<size_t>(
        std::lower_bound(plan.offsets_sorted.begin(), plan.offsets_sorted.end(), offset) -
        plan.offsets_sorted.begin());
  }

  // (Re)makes request r's tensor over its place in the block: a uint8 tensor of its bytes,
  // which reuse_storage turns into whatever the execution asks for.
  bool make_planned_tensor(size_t r) {
    Plan& p = *plan_;
    p.block->set_next(p.block->base() + p.offsets[r]);
    TensorAllocatorScope scope(p.block);
    Expected<Tensor> t = Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(p.bytes[r])},
                                          TensorInit::kUninitialized);
    if (!t.ok()) return false;
    p.tensors[r] = std::move(t).value();
    p.held[r] = Held::kInPool;
    return true;
  }

  // The next event must be request r of `bytes`, with r's tensor in the pool.
  bool take_planned(size_t bytes, DataType dtype, const std::vector<int64_t>& dims, TensorInit init,
                    Tensor* out) {
    // A plan over a shared block another state replaced or retired moves to the current one
    // at the start of an execution (every tensor of it is in the pool then, or freed).
    if (plan_->block && shared_ && next_event_ == 0 && plan_->generation != shared_->generation()) {
      plan_->block.reset();
      for (size_t r = 0; r < plan_->tensors.size(); ++r) {
        plan_->tensors[r] = Tensor();
        plan_->held[r] = Held::kFreed;
      }
    }
    if (!plan_->block && !materialize()) {
      drop_plan();  // no memory for it: none of its tensors is out, the arena serves as before
      return diverge();
    }
    Plan& p = *plan_;
    if (next_event_ >= p.events.size() || p.events[next_event_].release) return diverge();
    const uint32_t r = p.events[next_event_].request;
    if (p.bytes[r] != bytes) return diverge();
    if (p.held[r] == Held::kFreed && !make_planned_tensor(r)) return diverge();
    if (p.held[r] != Held::kInPool) return diverge();
    ++next_event_;
    *out = std::move(p.tensors[r]);
    p.held[r] = Held::kOut;
    p.out_at[p.offset_index[r]] = r;
    out->reuse_storage(dtype, dims, init);
    recycled_.fetch_add(1, std::memory_order_relaxed);
    planned_outputs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  bool diverge() {
    diverged_ = true;
    return false;
  }

  // Puts a planned tensor back (checking the release against the plan); false for any other.
  bool park_planned(Tensor& t) {
    if (!plan_ || !plan_->block) return false;
    Plan& p = *plan_;
    char* data = static_cast<char*>(t.raw_data());
    if (data < p.block->base() || data >= p.block->base() + p.block->size()) return false;
    const size_t offset = static_cast<size_t>(data - p.block->base());
    const size_t index = index_of_offset(p, offset);
    const uint32_t r = index < p.out_at.size() ? p.out_at[index] : 0;
    if (index >= p.out_at.size() || p.offsets[r] != offset || p.held[r] != Held::kOut) {
      // Not a tensor the plan handed out (a copy sharing a planned block): let it go, and
      // follow the plan no further in this execution.
      diverged_ = true;
      t = Tensor();
      return true;
    }
    if (!diverged_) {
      if (next_event_ < p.events.size() && p.events[next_event_].release &&
          p.events[next_event_].request == r)
        ++next_event_;
      else
        diverged_ = true;
    }
    p.tensors[r] = std::move(t);
    p.held[r] = Held::kInPool;
    return true;
  }

  // After a planned execution: every tensor handed out is back, or its block was freed (a
  // view kept it and went); one still out is held by someone, so the plan goes (its block
  // lives on with that tensor) and the next execution records again.
  void check_plan_returned() {
    Plan& p = *plan_;
    if (!p.block) return;  // not made yet: nothing of it is out
    p.block->take_freed(&p.freed);
    for (void* q : p.freed) {
      const size_t index = index_of_offset(p, static_cast<size_t>(static_cast<char*>(q) - p.block->base()));
      if (index < p.out_at.size() && p.held[p.out_at[index]] == Held::kOut) p.held[p.out_at[index]] = Held::kFreed;
    }
    if (std::find(p.held.begin(), p.held.end(), Held::kOut) != p.held.end()) drop_plan();
  }
  void drop_plan() {
    diverged_runs_ = 0;
    if (!plan_) return;
    // A tensor of the plan still out is held by someone: the shared block must not be written
    // under it by this or any other state's plan again.
    if (shared_ && plan_->block &&
        std::find(plan_->held.begin(), plan_->held.end(), Held::kOut) != plan_->held.end())
      shared_->retire(plan_->block->base());
    planned_bytes_.store(0, std::memory_order_relaxed);
    plan_.reset();
  }

  // The bin of `bytes`, made on first use (the only allocation: a size's first execution).
  Bin& bin_of(size_t bytes) {
    auto it = std::lower_bound(bins_.begin(), bins_.end(), bytes,
                               [](const Bin& b, size_t n) { return b.bytes < n; });
    if (it == bins_.end() || it->bytes != bytes) it = bins_.insert(it, Bin{bytes, {}, 0});
    return *it;
  }
  // Shells kept at most: more than the views one execution makes of most models, and a bound
  // for those that make many.
  static constexpr size_t kMaxShells = 256;
  std::vector<Bin> bins_;
  std::vector<Tensor> shells_;
  size_t shell_demand_ = 0;  // reuse_view calls of the current execution
  std::vector<uint32_t> busy_;  // free_range's entries held during a step
  static size_t align64_up(size_t n) { return (n + 63) & ~size_t{63}; }
  // KILN_ARENA_LOAN=0 turns the loans off (for A/B measurements).
  static bool loan_enabled() {
    static const bool enabled = [] {
      const char* v = std::getenv("KILN_ARENA_LOAN");
      return !v || std::strcmp(v, "0") != 0;
    }();
    return enabled;
  }
  // KILN_ARENA_WORKSPACE=0 ignores the plan's workspaces (the free part is lent instead; A/B).
  static bool workspace_enabled() {
    static const bool enabled = [] {
      const char* v = std::getenv("KILN_ARENA_WORKSPACE");
      return !v || std::strcmp(v, "0") != 0;
    }();
    return enabled;
  }
  Trace trace_;
  int recordings_ = 0;
  std::unique_ptr<Plan> plan_;
  std::shared_ptr<const ArenaLayout> layout_;  // the .kiln's plan, or none
  bool keep_bins_ = true;
  size_t step_ = 0;                            // the step running (begin_step)
  std::shared_ptr<PlannedBlock> layout_block_;
  uint64_t layout_generation_ = 0;
  bool layout_failed_ = false;
  std::vector<Tensor> layout_tensors_;  // per entry, while in the pool
  std::vector<Held> layout_held_;       // per entry
  std::vector<bool> layout_noted_;      // per entry: its debug line said
  std::vector<uint32_t> live_;          // entries out
  std::vector<void*> layout_freed_;     // scratch for PlannedBlock::take_freed
  std::shared_ptr<PlanMemory> shared_;  // the context's block for every state's plan, or none
  size_t next_event_ = 0;  // position in plan_->events of this execution
  bool diverged_ = false;  // this execution left the plan
  bool new_plan_ = false;  // made by the last trim, for take_new_plan
  int diverged_runs_ = 0;  // executions in a row that left it
  std::atomic<uint64_t> recycled_{0};
  std::atomic<size_t> parked_bytes_{0};
  std::atomic<size_t> planned_bytes_{0};
  std::atomic<uint64_t> planned_outputs_{0};
};

}  // namespace kiln::rt
