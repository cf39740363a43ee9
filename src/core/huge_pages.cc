#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace kiln {

void* allocate_huge_page_block(size_t bytes) {
  if (bytes < kHugePageBytes) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  // Over-map by one huge page and trim both ends to a 2 MiB boundary.
  size_t span = bytes + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (aligned > begin) munmap(raw, aligned - begin);
  uintptr_t tail = aligned + bytes;
  uintptr_t end = begin + span;
  if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
  // Advice only: without huge pages the block still works, with 4 KiB pages.
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

void free_huge_page_block(void* p, size_t bytes) {
  if (!p) return;
  if (bytes < kHugePageBytes)
    std::free(p);
  else
    munmap(p, bytes);
}

}  // namespace kiln
