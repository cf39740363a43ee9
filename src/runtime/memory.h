// Device and pinned host memory. Every live allocation is in one process-wide registry,
// so the C API can tell a device pointer from a host pointer, a pointer of another
// device, or a freed one, and return an error code instead of touching it. Each device
// has a caching allocator (size classes, stream-ordered reuse, statistics).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <vector>

#include "core/status.h"
#include "runtime/device.h"

namespace kiln::rt {

enum class MemoryKind { kDevice, kPinnedHost };

struct Allocation {
  void* base = nullptr;
  size_t size = 0;  // bytes the user asked for (the usable range is [base, base + size))
  MemoryKind kind = MemoryKind::kDevice;
  int device = -1;  // owning device for kDevice
  bool registered = false;  // the caller's host memory, mapped by kilnrtHostRegister
};

// Live allocations by address; lookups find the allocation containing a pointer.
class MemoryRegistry {
 public:
  static MemoryRegistry& get();
  void add(const Allocation& a);
  // Adds `a` unless its range shares a byte with a live allocation (checked and added under
  // one lock, so two threads registering the same memory cannot both succeed).
  bool add_if_free(const Allocation& a);
  // Removes the allocation starting exactly at `base`; nullopt if there is none.
  std::optional<Allocation> remove(const void* base);
  // The live allocation containing [p, p + bytes), or nullopt.
  std::optional<Allocation> find(const void* p, size_t bytes = 1) const;
  // The lowest live allocation sharing a byte with [p, p + bytes), or nullopt: tells a
  // range that starts in host memory but runs into an allocation from one that does not.
  std::optional<Allocation> find_overlapping(const void* p, size_t bytes) const;

 private:
  mutable std::shared_mutex mutex_;
  std::map<uintptr_t, Allocation> live_;
  // Bumped by every add/remove, so a thread may reuse its last lookups (a run of copies
  // between the same buffers) without taking the lock while it is unchanged.
  std::atomic<uint64_t> version_{1};
};

struct MemoryStats {
  size_t in_use = 0;
  size_t cached = 0;
  size_t peak_in_use = 0;
  size_t reserved = 0;
  uint64_t alloc_count = 0;
  uint64_t cache_hits = 0;
  double fragmentation = 0;  // 1 - largest cached block / cached
};

// How large blocks are backed (kilnrtMemMallocPolicy). On the CPU device huge pages are
// transparent huge pages, which the kernel grants as it can: kHugeOnly is advice too.
enum class PagePolicy { kHugeFirst, kHugeOnly, kNormalOnly };

// A device's caching allocator. Blocks are 64-byte aligned and rounded to size classes;
// freed blocks wait in the cache until every stream of the device has passed the point
// of the free (a StreamFence), then serve later allocations of their class. Requests
// beyond the device's memory limit first release cached blocks, then fail.
class MemoryPool {
 public:
  MemoryPool(int device, size_t limit);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // Registers the block in MemoryRegistry as device memory of this device.
  Expected<void*> allocate(size_t bytes, PagePolicy policy = PagePolicy::kHugeFirst);
  // `p` must be the base of a live allocation of this device. `fences` say when the
  // block may be reused (empty: at once).
  Status free(void* p, std::vector<StreamFence> fences);
  MemoryStats stats() const;
  void reset_peak();
  // Returns cached blocks whose fences have passed to the system.
  void empty_cache();
  size_t limit() const { return limit_; }
  size_t reserved() const;
  // True if `p` lies in a block freed to this pool and still held in its cache (so an
  // error can say "already freed" rather than "not device memory").
  bool holds_freed(const void* p) const;

 private:
  struct Block {
    void* base;
    size_t capacity;
    std::vector<StreamFence> fences;
  };
  static size_t size_class(size_t bytes);
  void release_cached_locked(size_t needed);

  int device_;
  size_t limit_;
  mutable std::mutex mutex_;
  std::multimap<size_t, Block> cache_;  // by capacity
  std::map<uintptr_t, size_t> capacity_of_;  // live blocks: base -> capacity
  MemoryStats stats_;
};

// Copies `bytes` from `src` to `dst` as memmove does. Large copies between ranges that do
// not overlap use non-temporal stores: a copy bigger than the caches then does not read
// the destination in and evict everything else first (the copy engine's DMA-like path).
void copy_memory(void* dst, const void* src, size_t bytes);

// Page-locked host memory (mlock where the system allows it), registered as kPinnedHost.
Expected<void*> allocate_pinned_host(size_t bytes);
Status free_pinned_host(void* p);
// Frees every pinned host block still allocated (kilnFinalize).
void free_all_pinned_host();

}  // namespace kiln::rt
