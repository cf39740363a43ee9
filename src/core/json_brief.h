// A JSON value from untrusted input, shown in an error message: short, and never recursing
// deeper than a few levels (nlohmann::json::dump recurses once per level of nesting, so a
// value nested a million deep, a few MB of '[', would overflow the stack).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln {

// True when `v` nests at most `depth` arrays or objects deep. Recurses at most `depth` levels.
inline bool json_nesting_within(const nlohmann::json& v, int depth) {
  if (!v.is_structured()) return true;
  if (depth <= 0) return false;
  for (const nlohmann::json& e : v)
    if (!json_nesting_within(e, depth - 1)) return false;
  return true;
}

// `v` as JSON text, cut to `max_chars` (then ending in "..."), invalid UTF-8 replaced; a
// value nested deeper than 8 levels is named by its type only.
inline std::string json_brief(const nlohmann::json& v, size_t max_chars = 120) {
  if (!json_nesting_within(v, 8)) return std::string("(") + v.type_name() + " nested too deep)";
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) s.resize(max_chars), s += "...";
  return s;
}

}  // namespace kiln
