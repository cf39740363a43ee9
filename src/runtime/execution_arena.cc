// ExecutionArena: the allocator one execution context's activations come from (size classes,
// retention across executions, the caller's workspace of kilnmdlLoadFromFileWithMem).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/fault_inject.h"
#include "core/huge_pages.h"
#include "core/logging.h"
#include "runtime/memory.h"
#include "runtime/model_runtime.h"

namespace kiln::rt {

// ---- ExecutionArena ------------------------------------------------------------------------

namespace {

// A size no execution has asked for in this many executions may go back to the heap...
constexpr uint64_t kTrimAfterRuns = 4;
// ... when the arena holds more than this many times the largest peak of the recent
// executions. A model whose input shapes vary (open dims: OCR line widths, sequence lengths)
// keeps the blocks of the shapes it alternates between, so switching shapes does not fault
// fresh pages in, while a model that moved on from a large shape gives its memory back within
// kPeakWindow executions. Measured on PP-OCRv4 rec fed widths 160/320/640/1280 in random order
// (bench/dynamic_shapes.sh, 1 thread, 200 steps): the shape switches cost ~75 us per run of
// the loop with a factor of 2, ~36 us with 4 (the four widths' activations sum to about twice
// the largest's, and the blocks parked for the next execution count as in use).
constexpr size_t kRetainFactor = 4;

size_t round_up(size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

// Heap blocks come in size classes, four per power of two (at most 25% above the request),
// so that an input shape a little larger or smaller than the last one reuses the blocks the
// arena holds instead of faulting fresh pages in. With exact sizes every new shape allocated
// all its activations anew: `kiln ocr` on 8 images of different sizes made ~460K page faults,
// and first runs at a new PP-OCRv4 det size took 4-10x a warm run.
size_t heap_size_class(size_t bytes) {
  if (bytes <= 4096) return round_up(bytes);
  size_t top = size_t{1} << (63 - __builtin_clzll(bytes));  // the largest power of two <= bytes
  size_t step = top / 4;
  return (bytes + step - 1) / step * step;
}

}  // namespace

ExecutionArena::ExecutionArena(size_t limit) : limit_(limit) {}

ExecutionArena::ExecutionArena(void* base, size_t size)
    : base_(static_cast<char*>(base)), size_(size) {}

ExecutionArena::~ExecutionArena() {
  // Every block is back by now: each buffer's deleter holds a reference to the arena.
  for (auto& [bytes, b] : buckets_) release_bucket_locked(b, bytes);
}

void ExecutionArena::release_bucket_locked(Bucket& b, size_t bytes) {
  if (!base_) {
    for (void* p : b.free) free_huge_page_block(p, bytes);
    stats_.held -= b.free.size() * bytes;
  }
  b.free.clear();
}

void* ExecutionArena::allocate(size_t bytes) {
  std::lock_guard lock(mutex_);
  if (uint64_t event = fault::should_fail(fault::Site::kAlloc)) {
    // As a refusal for want of memory: the execution fails with BAD_ALLOC (model_runtime.cc).
    refused_ = true;
    refused_bytes_ = bytes;
    refused_injected_ = event;
    return nullptr;
  }
  if (!base_) {
    bytes = heap_size_class(bytes);
    // Best fit among the free blocks of this class up to twice its size: a block larger than
    // asked for is remembered with its own class so that it returns to its own list.
    for (auto it = buckets_.lower_bound(bytes); it != buckets_.end() && it->first <= 2 * bytes; ++it) {
      Bucket& fit = it->second;
      if (fit.free.empty()) continue;
      void* p = fit.free.back();
      fit.free.pop_back();
      fit.last_run = run_;
      ++stats_.reused_blocks;
      if (it->first != bytes) larger_blocks_[p] = it->first;
      stats_.in_use += it->first;
      if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
      run_peak_ = std::max(run_peak_, stats_.in_use);
      return p;
    }
  }
  Bucket& b = buckets_[bytes];
  b.last_run = run_;
  void* p = nullptr;
  if (!b.free.empty()) {
    p = b.free.back();
    b.free.pop_back();
    ++stats_.reused_blocks;
  } else if (base_) {
    if (bytes > size_ - offset_) {
      refused_ = true;
      refused_bytes_ = bytes;
      return nullptr;
    }
    p = base_ + offset_;
    offset_ += bytes;
    stats_.held = offset_;
    ++stats_.fresh_blocks;
  } else {
    if (limit_ && stats_.held + bytes > limit_) {
      // The device's memory limit bounds an execution context's activations: the free blocks
      // go back first; if that is not room enough, the allocation is refused.
      for (auto& [size, free_bucket] : buckets_) release_bucket_locked(free_bucket, size);
      if (stats_.held + bytes > limit_) {
        refused_ = true;
        refused_bytes_ = bytes;
        refused_held_ = stats_.held;
        return nullptr;
      }
    }
    p = allocate_huge_page_block(bytes);
    if (!p) {
      refused_ = true;
      refused_bytes_ = bytes;
      return nullptr;
    }
    stats_.held += bytes;
    ++stats_.fresh_blocks;
  }
  stats_.in_use += bytes;
  if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  run_peak_ = std::max(run_peak_, stats_.in_use);
  return p;
}

void ExecutionArena::deallocate(void* p, size_t bytes) {
  std::lock_guard lock(mutex_);
  if (!base_) {
    bytes = heap_size_class(bytes);
    if (!larger_blocks_.empty()) {
      auto it = larger_blocks_.find(p);
      if (it != larger_blocks_.end()) {
        bytes = it->second;
        larger_blocks_.erase(it);
      }
    }
  }
  // The vector keeps its capacity, so the steady state pushes without allocating.
  buckets_[bytes].free.push_back(p);
  stats_.in_use -= bytes;
}

void ExecutionArena::begin_run() {
  std::lock_guard lock(mutex_);
  ++run_;
  refused_ = false;
  refused_bytes_ = 0;
  refused_injected_ = 0;
  refused_held_ = 0;
  if (base_) {
    // Start each execution from an empty workspace, so the bound of model_sizes holds per
    // execution however earlier executions cut it up. (Nothing is in use between
    // executions: outputs are copied out and every activation released.)
    if (stats_.in_use == 0) {
      for (auto& [bytes, b] : buckets_) b.free.clear();
      offset_ = 0;
      stats_.held = 0;
    }
    return;
  }
  // The peak of the execution that just ended joins the window; the budget follows the window.
  recent_peaks_[run_ % kPeakWindow] = run_peak_;
  run_peak_ = stats_.in_use;
  size_t budget = 0;
  for (size_t peak : recent_peaks_) budget = std::max(budget, peak);
  budget *= kRetainFactor;
  if (stats_.held <= budget) return;
  // Over budget: the sizes unused longest go first, while the arena holds too much.
  std::vector<std::pair<uint64_t, size_t>> stale;  // (last run, size)
  for (const auto& [bytes, b] : buckets_)
    if (b.last_run + kTrimAfterRuns < run_) stale.emplace_back(b.last_run, bytes);
  std::sort(stale.begin(), stale.end());
  for (const auto& [last, bytes] : stale) {
    if (stats_.held <= budget) break;
    auto it = buckets_.find(bytes);
    release_bucket_locked(it->second, it->first);
    buckets_.erase(it);
  }
}

void ExecutionArena::release_free() {
  std::lock_guard lock(mutex_);
  if (base_) return;
  for (auto& [bytes, b] : buckets_) release_bucket_locked(b, bytes);
}

bool ExecutionArena::refused(size_t* bytes, uint64_t* injected, size_t* held) const {
  std::lock_guard lock(mutex_);
  if (bytes) *bytes = refused_bytes_;
  if (injected) *injected = refused_injected_;
  if (held) *held = refused_held_;
  return refused_;
}

ExecutionArena::Stats ExecutionArena::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace kiln::rt
