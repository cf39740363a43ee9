// Offset assignment: greedy orders and fits over lifetimes (see offset_assignment.h).
#include "core/offset_assignment.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace kiln {
namespace {

enum class Fit { kFirst, kBest };

// Places buffers in `order`: each goes into a gap between the buffers already placed whose
// lifetimes overlap its own (the lowest gap that fits, or the smallest one), else on top.
size_t place(const std::vector<int>& order, const std::vector<size_t>& sizes,
             const std::vector<int>& first, const std::vector<int>& last, Fit fit,
             std::vector<size_t>* offsets) {
  offsets->assign(sizes.size(), 0);
  std::vector<int> placed;
  placed.reserve(order.size());
  std::vector<std::pair<size_t, size_t>> busy;  // [offset, end) of time-overlapping buffers
  size_t arena = 0;
  for (int b : order) {
    const size_t size = sizes[b];
    if (size == 0) continue;  // occupies nothing; offset 0
    busy.clear();
    for (int p : placed)
      if (first[p] <= last[b] && first[b] <= last[p])
        busy.emplace_back((*offsets)[p], (*offsets)[p] + sizes[p]);
    std::sort(busy.begin(), busy.end());
    size_t cur = 0;
    size_t chosen = std::numeric_limits<size_t>::max();
    size_t chosen_gap = std::numeric_limits<size_t>::max();
    for (const auto& [begin, end] : busy) {
      if (begin > cur) {
        const size_t gap = begin - cur;
        if (gap >= size) {
          if (fit == Fit::kFirst) {
            chosen = cur;
            break;
          }
          if (gap < chosen_gap) {
            chosen_gap = gap;
            chosen = cur;
          }
        }
      }
      cur = std::max(cur, end);
    }
    if (chosen == std::numeric_limits<size_t>::max()) chosen = cur;
    (*offsets)[b] = chosen;
    arena = std::max(arena, chosen + size);
    placed.push_back(b);
  }
  return arena;
}

// Largest buffers first (ties: earlier first, then lower index, so the plan is deterministic).
std::vector<int> order_by_size(const std::vector<size_t>& sizes, const std::vector<int>& first) {
  std::vector<int> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (sizes[a] != sizes[b]) return sizes[a] > sizes[b];
    return first[a] < first[b];
  });
  return order;
}

// TFLite's greedy-by-breadth: visit steps from the one with the most live bytes down, and at
// each place its not yet placed buffers, largest first. The peak step is then packed tightly.
std::vector<int> order_by_breadth(const std::vector<size_t>& sizes, const std::vector<int>& first,
                                  const std::vector<int>& last) {
  if (sizes.empty()) return {};
  const int steps = *std::max_element(last.begin(), last.end()) + 1;
  std::vector<std::vector<int>> live(static_cast<size_t>(steps));
  std::vector<size_t> breadth(static_cast<size_t>(steps), 0);
  for (size_t b = 0; b < sizes.size(); ++b)
    for (int s = first[b]; s <= last[b]; ++s) {
      live[s].push_back(static_cast<int>(b));
      breadth[s] += sizes[b];
    }
  std::vector<int> step_order(static_cast<size_t>(steps));
  std::iota(step_order.begin(), step_order.end(), 0);
  std::stable_sort(step_order.begin(), step_order.end(),
                   [&](int a, int b) { return breadth[a] > breadth[b]; });
  std::vector<int> order;
  order.reserve(sizes.size());
  std::vector<bool> taken(sizes.size(), false);
  for (int s : step_order) {
    std::vector<int>& here = live[s];
    std::stable_sort(here.begin(), here.end(), [&](int a, int b) { return sizes[a] > sizes[b]; });
    for (int b : here)
      if (!taken[b]) {
        taken[b] = true;
        order.push_back(b);
      }
  }
  return order;
}

}  // namespace

size_t assign_offsets(const std::vector<size_t>& sizes, const std::vector<int>& first,
                      const std::vector<int>& last, std::vector<size_t>* offsets,
                      std::string* strategy) {
  struct Candidate {
    const char* name;
    const std::vector<int>* order;
    Fit fit;
  };
  const std::vector<int> by_size = order_by_size(sizes, first);
  const std::vector<int> by_breadth = order_by_breadth(sizes, first, last);
  const Candidate candidates[] = {
      {"greedy-by-size/first-fit", &by_size, Fit::kFirst},
      {"greedy-by-size/best-fit", &by_size, Fit::kBest},
      {"greedy-by-breadth/first-fit", &by_breadth, Fit::kFirst},
      {"greedy-by-breadth/best-fit", &by_breadth, Fit::kBest},
  };
  size_t best = std::numeric_limits<size_t>::max();
  std::vector<size_t> trial;
  for (const Candidate& c : candidates) {
    const size_t arena = place(*c.order, sizes, first, last, c.fit, &trial);
    if (arena < best) {  // ties keep the earlier (simpler) strategy
      best = arena;
      *offsets = trial;
      if (strategy) *strategy = c.name;
    }
  }
  return best;
}

}  // namespace kiln
