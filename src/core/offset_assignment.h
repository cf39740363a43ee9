// Offset assignment for buffers with known sizes and lifetimes: where each buffer goes in one
// arena so that buffers alive at the same time never overlap. The compiler's memory plan
// (compiler/memory_plan.h) runs it over a graph's values in node order; an execution state
// (runtime/graph_executor.cc) runs it over the allocations its first execution made.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kiln {

// Places buffers given by size and lifetime [first, last] (inclusive, in any unit of time):
// tries greedy-by-size and greedy-by-breadth orders with first-fit and best-fit placement and
// keeps the smallest arena. Returns the arena size; `offsets` gets one offset per buffer. Sizes
// must be multiples of the alignment the caller wants offsets in.
size_t assign_offsets(const std::vector<size_t>& sizes, const std::vector<int>& first,
                      const std::vector<int>& last, std::vector<size_t>* offsets,
                      std::string* strategy = nullptr);

}  // namespace kiln
