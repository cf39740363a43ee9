// MemoryRegistry, the per-device caching allocator MemoryPool, and pinned host memory.
#include "runtime/memory.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "core/cpu_features.h"
#include "core/fault_inject.h"
#include "core/huge_pages.h"
#include "core/logging.h"

namespace kiln::rt {

namespace {

constexpr size_t kAlignment = 64;                // every block: a cache line
constexpr size_t kSmallGranule = 512;            // size classes up to kSmallLimit
constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
constexpr size_t kPageBytes = size_t{2} << 20;   // large classes: whole 2 MiB pages

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t{1} << 30)) return str_format("%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (size_t{1} << 20)) return str_format("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  if (bytes >= 1024) return str_format("%.1f KiB", static_cast<double>(bytes) / 1024);
  return str_format("%zu B", bytes);
}

// Large blocks are mapped on 2 MiB boundaries so that transparent huge pages can back
// them; small ones come from the C heap.
bool is_large(size_t capacity) { return capacity >= kPageBytes; }

// core/huge_pages.h: large blocks on 2 MiB boundaries, small ones from the C heap.
void* system_allocate(size_t capacity) { return allocate_huge_page_block(capacity); }
void system_free(void* base, size_t capacity) { free_huge_page_block(base, capacity); }

// Applied on every hand-out of a large block, since a cached block may have been made
// under another policy.
void advise_pages(void* base, size_t capacity, PagePolicy policy) {
  if (!is_large(capacity)) return;
  int advice = policy == PagePolicy::kNormalOnly ? MADV_NOHUGEPAGE : MADV_HUGEPAGE;
  if (madvise(base, capacity, advice) != 0) {
    KILN_LOG(kDebug, "madvise(%s) of %zu bytes failed: %s",
             advice == MADV_HUGEPAGE ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE", capacity, std::strerror(errno));
  }
}

}  // namespace

// ---- MemoryRegistry ----------------------------------------------------------------------

MemoryRegistry& MemoryRegistry::get() {
  // Never destroyed: pools and pinned blocks may unregister during static destruction.
  static MemoryRegistry* registry = new MemoryRegistry();
  return *registry;
}

void MemoryRegistry::add(const Allocation& a) {
  std::unique_lock lock(mutex_);
  live_[reinterpret_cast<uintptr_t>(a.base)] = a;
  version_.fetch_add(1, std::memory_order_release);
}

bool MemoryRegistry::add_if_free(const Allocation& a) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(a.base);
  const size_t bytes = std::max<size_t>(a.size, 1);
  const uintptr_t end = begin > UINTPTR_MAX - bytes ? UINTPTR_MAX : begin + bytes;
  std::unique_lock lock(mutex_);
  auto next = live_.lower_bound(begin);  // the first allocation starting at or after begin
  if (next != live_.end() && next->first < end) return false;
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + std::max<size_t>(prev->second.size, 1) > begin) return false;
  }
  live_[begin] = a;
  version_.fetch_add(1, std::memory_order_release);
  return true;
}

std::optional<Allocation> MemoryRegistry::remove(const void* base) {
  std::unique_lock lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(base));
  if (it == live_.end()) return std::nullopt;
  Allocation a = it->second;
  live_.erase(it);
  version_.fetch_add(1, std::memory_order_release);
  return a;
}

std::optional<Allocation> MemoryRegistry::find(const void* p, size_t bytes) const {
  // An allocation holding the whole range is the lowest one it overlaps.
  std::optional<Allocation> a = find_overlapping(p, bytes);
  if (!a) return std::nullopt;
  uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  uintptr_t base = reinterpret_cast<uintptr_t>(a->base);
  if (begin < base || std::max<size_t>(bytes, 1) > a->size - (begin - base)) return std::nullopt;
  return a;
}

namespace {

// One answer of find_overlapping, good for any range inside [lo, hi) while the registry's
// version is `version`: the allocation there, or none (a gap between allocations).
struct CachedLookup {
  uint64_t version = 0;  // 0: empty
  uintptr_t lo = 0;
  uintptr_t hi = 0;
  std::optional<Allocation> allocation;
};

// Two per thread: a copy looks up its destination and its source.
thread_local CachedLookup cached_lookups[2];
thread_local unsigned next_cached_lookup = 0;

}  // namespace

std::optional<Allocation> MemoryRegistry::find_overlapping(const void* p, size_t bytes) const {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
  if (bytes == 0) bytes = 1;
  const uintptr_t end = begin > UINTPTR_MAX - bytes ? UINTPTR_MAX : begin + bytes;
  const uint64_t seen = version_.load(std::memory_order_acquire);
  for (const CachedLookup& c : cached_lookups) {
    if (c.version == seen && begin >= c.lo && end <= c.hi) return c.allocation;
  }
  std::shared_lock lock(mutex_);
  const uint64_t version = version_.load(std::memory_order_relaxed);  // stable under the lock
  // The allocation starting at or below `begin` may reach into the range; otherwise the
  // first one starting inside it.
  auto next = live_.upper_bound(begin);
  uintptr_t gap_lo = 0;
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    uintptr_t prev_end = prev->first + prev->second.size;
    if (prev_end > begin) {
      if (end <= prev_end) {
        CachedLookup& c = cached_lookups[next_cached_lookup++ % 2];
        c = CachedLookup{version, prev->first, prev_end, prev->second};
      }
      return prev->second;
    }
    gap_lo = prev_end;
  }
  if (next != live_.end() && next->first < end) return next->second;
  CachedLookup& c = cached_lookups[next_cached_lookup++ % 2];
  c = CachedLookup{version, gap_lo, next != live_.end() ? next->first : UINTPTR_MAX, std::nullopt};
  return std::nullopt;
}

// ---- MemoryPool --------------------------------------------------------------------------

MemoryPool::MemoryPool(int device, size_t limit) : device_(device), limit_(limit) {}

MemoryPool::~MemoryPool() {
  std::lock_guard lock(mutex_);
  MemoryRegistry& registry = MemoryRegistry::get();
  for (const auto& [base, capacity] : capacity_of_) {
    void* p = reinterpret_cast<void*>(base);
    registry.remove(p);
    system_free(p, capacity);
  }
  capacity_of_.clear();
  for (auto& [capacity, block] : cache_) system_free(block.base, capacity);
  cache_.clear();
}

size_t MemoryPool::size_class(size_t bytes) {
  if (bytes <= kSmallLimit) return round_up(std::max<size_t>(bytes, 1), kSmallGranule);
  return round_up(bytes, kPageBytes);
}

Expected<void*> MemoryPool::allocate(size_t bytes, PagePolicy policy) {
  if (bytes == 0) return invalid_argument("cpu:%d: allocation of 0 bytes", device_);
  // Checked before rounding, which could overflow.
  if (bytes > limit_) {
    return resource_exhausted("cpu:%d: %zu bytes (%s) exceed the device memory limit of %zu bytes (%s)",
                              device_, bytes, format_bytes(bytes).c_str(), limit_, format_bytes(limit_).c_str());
  }
  if (uint64_t event = fault::should_fail(fault::Site::kAlloc)) {
    return fault::injected_error(fault::Site::kAlloc, event,
                                 str_format("cpu:%d: device allocation of %zu bytes", device_, bytes));
  }
  const size_t capacity = size_class(bytes);
  std::lock_guard lock(mutex_);
  stats_.alloc_count++;
  void* base = nullptr;
  auto [first, last] = cache_.equal_range(capacity);
  for (auto it = first; it != last; ++it) {
    if (fences_passed(it->second.fences)) {
      base = it->second.base;
      cache_.erase(it);
      stats_.cached -= capacity;
      stats_.cache_hits++;
      break;
    }
  }
  if (base == nullptr) {
    if (stats_.reserved + capacity > limit_) release_cached_locked(capacity);
    if (stats_.reserved + capacity > limit_) {
      stats_.alloc_count--;
      return resource_exhausted(
          "cpu:%d: cannot allocate %zu bytes (%s): the device memory limit is %zu bytes (%s), "
          "%zu bytes in use and %zu bytes cached for streams still running",
          device_, bytes, format_bytes(bytes).c_str(), limit_, format_bytes(limit_).c_str(), stats_.in_use,
          stats_.cached);
    }
    base = system_allocate(capacity);
    if (base == nullptr) {
      stats_.alloc_count--;
      return resource_exhausted("cpu:%d: the system refused %zu bytes (%s) for an allocation of %zu bytes",
                                device_, capacity, format_bytes(capacity).c_str(), bytes);
    }
    stats_.reserved += capacity;
  }
  advise_pages(base, capacity, policy);
  capacity_of_[reinterpret_cast<uintptr_t>(base)] = capacity;
  stats_.in_use += capacity;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  MemoryRegistry::get().add(Allocation{base, bytes, MemoryKind::kDevice, device_});
  return base;
}

Status MemoryPool::free(void* p, std::vector<StreamFence> fences) {
  std::lock_guard lock(mutex_);
  auto it = capacity_of_.find(reinterpret_cast<uintptr_t>(p));
  if (it == capacity_of_.end()) {
    return invalid_argument("%p is not the base of a live allocation of cpu:%d", p, device_);
  }
  size_t capacity = it->second;
  capacity_of_.erase(it);
  // Unregistered at once: from here on the pointer is an error for the C API, even while
  // the block waits in the cache.
  MemoryRegistry::get().remove(p);
  cache_.emplace(capacity, Block{p, capacity, std::move(fences)});
  stats_.in_use -= capacity;
  stats_.cached += capacity;
  return ok_status();
}

MemoryStats MemoryPool::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats s = stats_;
  s.fragmentation = 0;
  if (s.cached > 0 && !cache_.empty()) {
    size_t largest = cache_.rbegin()->first;
    s.fragmentation = 1.0 - static_cast<double>(largest) / static_cast<double>(s.cached);
  }
  return s;
}

void MemoryPool::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
}

void MemoryPool::empty_cache() {
  std::lock_guard lock(mutex_);
  release_cached_locked(SIZE_MAX);
}

size_t MemoryPool::reserved() const {
  std::lock_guard lock(mutex_);
  return stats_.reserved;
}

bool MemoryPool::holds_freed(const void* p) const {
  uintptr_t q = reinterpret_cast<uintptr_t>(p);
  std::lock_guard lock(mutex_);
  for (const auto& [capacity, block] : cache_) {
    uintptr_t base = reinterpret_cast<uintptr_t>(block.base);
    if (q >= base && q < base + capacity) return true;
  }
  return false;
}

// Returns cached blocks whose fences have passed, largest first (fewest system calls),
// until `needed` more bytes fit under the limit (SIZE_MAX: every passed block).
void MemoryPool::release_cached_locked(size_t needed) {
  for (auto it = cache_.end(); it != cache_.begin();) {
    --it;
    if (needed <= limit_ - stats_.reserved) return;
    if (!fences_passed(it->second.fences)) continue;
    size_t capacity = it->first;
    system_free(it->second.base, capacity);
    stats_.cached -= capacity;
    stats_.reserved -= capacity;
    it = cache_.erase(it);
  }
}

// ---- Copies ------------------------------------------------------------------------------

namespace {

// From this size on, streaming stores beat glibc 2.36's memcpy on the development machine
// (Zen 5, 32 MiB L3): 17-20 vs 15.5 GB/s at 8 MiB, 11 vs 7 GB/s at 64 MiB; below it the
// memcpy that keeps both buffers in cache wins (26 vs 18 GB/s at 4 MiB).
constexpr size_t kStreamingCopyBytes = size_t{8} << 20;

#if defined(__x86_64__)
// dst is 32-byte aligned and bytes a multiple of 128.
__attribute__((target("avx2"))) void stream_copy_avx2(char* dst, const char* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 128) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
}

// SSE2 is part of x86-64: the fallback needs no check.
void stream_copy_sse2(char* dst, const char* src, size_t bytes) {
  for (size_t i = 0; i < bytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
}

void stream_copy(char* dst, const char* src, size_t bytes) {
  static const bool has_avx2 = cpu_features().avx2;
  // Head up to a 64-byte boundary of dst and the tail past the last whole 128 bytes go
  // through memcpy; the streaming stores need aligned destinations.
  size_t head = (64 - reinterpret_cast<uintptr_t>(dst) % 64) % 64;
  std::memcpy(dst, src, head);
  size_t body = (bytes - head) / 128 * 128;
  if (has_avx2) {
    stream_copy_avx2(dst + head, src + head, body);
  } else {
    stream_copy_sse2(dst + head, src + head, body);
  }
  // Streaming stores are weakly ordered: fence them before the copy counts as done.
  _mm_sfence();
  std::memcpy(dst + head + body, src + head + body, bytes - head - body);
}
#endif

}  // namespace

void copy_memory(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  uintptr_t s = reinterpret_cast<uintptr_t>(src);
  bool overlap = d < s + bytes && s < d + bytes;
  if (bytes >= kStreamingCopyBytes && !overlap) {
    stream_copy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memmove(dst, src, bytes);
}

// ---- Pinned host memory ------------------------------------------------------------------

namespace {

struct PinnedBlocks {
  std::mutex mutex;
  std::unordered_map<void*, size_t> span_of;  // base -> mapped bytes (whole pages)
};

PinnedBlocks& pinned_blocks() {
  static PinnedBlocks* blocks = new PinnedBlocks();
  return *blocks;
}

size_t page_size() {
  static const size_t bytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return bytes;
}

}  // namespace

Expected<void*> allocate_pinned_host(size_t bytes) {
  if (bytes == 0) return invalid_argument("pinned host allocation of 0 bytes");
  const size_t page = page_size();
  if (bytes > SIZE_MAX - page) return resource_exhausted("pinned host allocation of %zu bytes is too large", bytes);
  if (uint64_t event = fault::should_fail(fault::Site::kAlloc))
    return fault::injected_error(fault::Site::kAlloc, event, str_format("pinned host allocation of %zu bytes", bytes));
  // Whole pages of its own, so mlock and munlock touch no neighbour.
  size_t span = round_up(bytes, page);
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return resource_exhausted("the system refused %zu bytes (%s) of pinned host memory: %s", bytes,
                              format_bytes(bytes).c_str(), std::strerror(errno));
  }
  if (mlock(p, span) != 0) {
    // RLIMIT_MEMLOCK is small by default; the memory still works as a staging buffer.
    KILN_LOG(kDebug, "mlock of %zu bytes of host memory failed (%s); using it unlocked", span,
             std::strerror(errno));
  }
  PinnedBlocks& blocks = pinned_blocks();
  {
    std::lock_guard lock(blocks.mutex);
    blocks.span_of[p] = span;
  }
  MemoryRegistry::get().add(Allocation{p, bytes, MemoryKind::kPinnedHost, -1});
  return p;
}

Status free_pinned_host(void* p) {
  PinnedBlocks& blocks = pinned_blocks();
  size_t span = 0;
  {
    std::lock_guard lock(blocks.mutex);
    auto it = blocks.span_of.find(p);
    if (it == blocks.span_of.end()) return invalid_argument("%p is not the base of a live pinned host allocation", p);
    span = it->second;
    blocks.span_of.erase(it);
    MemoryRegistry::get().remove(p);
  }
  munlock(p, span);
  munmap(p, span);
  return ok_status();
}

void free_all_pinned_host() {
  PinnedBlocks& blocks = pinned_blocks();
  std::unordered_map<void*, size_t> span_of;
  {
    std::lock_guard lock(blocks.mutex);
    span_of.swap(blocks.span_of);
    for (const auto& [p, span] : span_of) MemoryRegistry::get().remove(p);
  }
  for (const auto& [p, span] : span_of) {
    munlock(p, span);
    munmap(p, span);
  }
}

}  // namespace kiln::rt
