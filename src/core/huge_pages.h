// Host memory for large buffers, backed by transparent huge pages where the kernel grants
// them: from 2 MiB on, blocks are mapped on 2 MiB boundaries and advised MADV_HUGEPAGE, so
// that touching a fresh block costs one page fault per 2 MiB instead of 512. First touches
// of fresh memory dominate the first run of a model at a new input shape (measured: PP-OCRv4
// det at a new image size, 45 ms warm, 235 ms cold, most of the difference page faults).
#pragma once

#include <cstddef>

namespace kiln {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// 64-byte aligned; from kHugePageBytes on, 2 MiB aligned and advised for huge pages. Null
// when out of memory. Free with the same size.
void* allocate_huge_page_block(size_t bytes);
void free_huge_page_block(void* p, size_t bytes);

}  // namespace kiln
