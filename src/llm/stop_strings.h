// Text stop sequences (OpenAI's "stop": "text"): finds the first stop string in a text that
// arrives piece by piece, and says how much of the text can be let out before it is known
// whether it begins a stop string. One matcher for kiln serve, Python and kiln generate
// (through llm::TextStream).
//
// Semantics (OpenAI's): generation ends at the earliest position where any stop string occurs
// in the text; the text returned is what precedes it, the stop string itself and anything after
// it are dropped. A stop string may span several pieces. Streaming never lets out text that a
// later piece could turn into part of a stop string: the longest suffix of the text that is a
// proper prefix of some stop string is held back until later text decides it (or finish()).
// With valid UTF-8 pieces and stop strings, held-back text starts at a character boundary, so
// what is let out is always whole characters.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::llm {

class StopStringMatcher {
 public:
  // invalid_argument for an empty stop string (it would match before any text), naming its
  // index. No stop strings: every piece passes through unchanged.
  static Expected<StopStringMatcher> create(std::vector<std::string> stop_strings);
  StopStringMatcher() = default;

  struct Step {
    std::string text;      // what can be let out now (before any stop string)
    bool stopped = false;  // a stop string matched: `text` is the last of the output
  };
  // Appends `piece` to the text. After a match every later push returns nothing, stopped.
  Step push(const std::string& piece);
  // The text still held back (no stop string can complete any more); empty after a match.
  std::string finish();

  bool stopped() const { return stopped_; }
  // The stop string that matched; empty while none did.
  const std::string& matched() const { return matched_; }
  bool empty() const { return stops_.empty(); }

 private:
  explicit StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // The length of the longest suffix of `text` that is a proper prefix of a stop string.
  size_t held_suffix_length(const std::string& text) const;

  std::vector<std::string> stops_;
  std::string held_;  // a suffix of the text so far that may begin a stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace kiln::llm
