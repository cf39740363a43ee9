// Text stop sequences (stop_strings.h).
#include "llm/stop_strings.h"

#include <algorithm>

namespace kiln::llm {

Expected<StopStringMatcher> StopStringMatcher::create(std::vector<std::string> stop_strings) {
  for (size_t i = 0; i < stop_strings.size(); ++i)
    if (stop_strings[i].empty()) return invalid_argument("stop string %zu is empty", i);
  return StopStringMatcher(std::move(stop_strings));
}

size_t StopStringMatcher::held_suffix_length(const std::string& text) const {
  size_t best = 0;
  for (const std::string& stop : stops_) {
    // Only suffixes shorter than the stop string: a whole one would have matched.
    for (size_t len = std::min(text.size(), stop.size() - 1); len > best; --len) {
      if (text.compare(text.size() - len, len, stop, 0, len) == 0) {
        best = len;
        break;
      }
    }
  }
  return best;
}

StopStringMatcher::Step StopStringMatcher::push(const std::string& piece) {
  if (stopped_) return {"", true};
  if (stops_.empty()) return {piece, false};
  // Only the held suffix and the new piece can hold a match: text let out before held none
  // (nor did the held part itself, being shorter than any stop string it begins).
  std::string text = held_ + piece;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = text.find(stop);
    if (at < first) {
      first = at;
      matched_ = stop;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    held_.clear();
    text.resize(first);
    return {std::move(text), true};
  }
  const size_t keep = held_suffix_length(text);
  held_ = text.substr(text.size() - keep);
  text.resize(text.size() - keep);
  return {std::move(text), false};
}

std::string StopStringMatcher::finish() {
  std::string rest;
  rest.swap(held_);
  return rest;
}

}  // namespace kiln::llm
