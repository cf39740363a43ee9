// The text of a growing token sequence, piece by piece, for streaming (kiln serve's SSE events,
// kiln generate's one-request output, Python's stream()): each push() returns only text that
// later tokens cannot change, at a cost that does not grow with the sequence.
//
// Why not decode each token alone: SentencePiece decodes a piece differently while nothing has
// been written yet (its leading space is dropped, and a piece that is only "▁" writes nothing),
// and with byte fallback a character of several UTF-8 bytes may come as several tokens
// (<0xE6><0x9D><0xB1>), each alone decoding to U+FFFD. Why not decode the whole sequence at
// every token (what this class did first): the 1000th token then costs a decode of 1000 ids.
//
// So a window of recent ids is decoded instead (vLLM's prefix/read offsets): the window starts
// at a token boundary where every earlier character is complete, and its first tokens (the
// "base") decode to non-empty text, so SentencePiece's start-of-text rule is spent inside the
// base, exactly where it does not matter. The text past the base is then the text these ids add
// to the whole decode, returned once it no longer ends in U+FFFD (an unfinished character is
// held back until its last byte comes, or finish()). Each push decodes the window, and when the
// window's text is complete it slides: the ids since the last complete point become the new
// base (a second small decode). The window is a few tokens, unless tokens keep ending in an
// unfinished character or write nothing (control ids), which it then spans. The pieces joined are
// the decode of all the ids.
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
  // character's bytes arrive). An id outside the tokenizer's vocabulary is an error, and the
  // sequence stays as it was.
  Expected<std::string> push(int64_t token);
  // The text held back (an unfinished character at the very end stays U+FFFD): what is left
  // when no token follows.
  Expected<std::string> finish();

  const std::vector<int64_t>& ids() const { return ids_; }
  const std::string& emitted() const { return emitted_; }
  // Ids the last push decoded (tests and benchmarks: the cost per token).
  size_t window_size() const { return ids_.size() - window_begin_; }

 private:
  Expected<std::string> decode_from(size_t begin) const;
  // Lets out window text up to byte `end` (beyond what is out of it); returns it.
  std::string take(const std::string& window_text, size_t end);
  // The whole sequence decoded again (the fallback should a window ever disagree with what
  // is out: a tokenizer whose later pieces rewrite earlier text).
  Expected<std::string> redecode_all(bool final);

  const Tokenizer* tokenizer_;
  std::vector<int64_t> ids_;
  std::string emitted_;        // the text returned so far
  size_t window_begin_ = 0;    // first id of the window
  size_t complete_end_ = 0;    // ids before this decoded to complete text at the last push
  std::string base_;           // decode of ids_[window_begin_, complete_end_)
  size_t window_out_ = 0;      // bytes of the window's text that are out (>= base_.size())
};

}  // namespace kiln::llm
