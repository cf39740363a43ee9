// The text of a growing token sequence, piece by piece, for streaming (kiln serve's SSE events,
// kiln generate's one-request output): each push() returns only text that later tokens cannot
// change.
//
// Why not decode each token alone: SentencePiece decodes a piece differently at the start of a
// text (the leading space is dropped), and with byte fallback a character of several UTF-8
// bytes may come as several tokens (<0xE6><0x9D><0xB1>), each alone decoding to U+FFFD. So the
// whole sequence is decoded again at every token and the difference from what is out already
// is returned, holding back a trailing U+FFFD (an unfinished character, completed by the next
// tokens) until the next token or finish(). The pieces joined are the decode of all the ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "llm/tokenizer.h"

namespace kiln::llm {

class StreamingDecoder {
 public:
  // `tokenizer` must outlive this decoder.
  explicit StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Appends `token`; returns the text that became final with it (often empty while a
  // character's bytes arrive). An id outside the tokenizer's vocabulary is an error.
  Expected<std::string> push(int64_t token);
  // The text held back (an unfinished character at the very end stays U+FFFD): what is left
  // when no token follows.
  Expected<std::string> finish();

  const std::vector<int64_t>& ids() const { return ids_; }
  const std::string& emitted() const { return emitted_; }

 private:
  // The part of `text` beyond what is out, up to `end` bytes of it.
  std::string take(const std::string& text, size_t end);

  const Tokenizer* tokenizer_;
  std::vector<int64_t> ids_;
  std::string emitted_;  // the text returned so far
};

}  // namespace kiln::llm
