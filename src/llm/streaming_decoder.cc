// Incremental detokenization (streaming_decoder.h).
#include "llm/streaming_decoder.h"

namespace kiln::llm {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD, what an unfinished byte sequence decodes to

// The length of `text` without its trailing U+FFFD characters.
size_t stable_length(const std::string& text) {
  size_t end = text.size();
  while (end >= 3 && text.compare(end - 3, 3, kReplacement) == 0) end -= 3;
  return end;
}

}  // namespace

std::string StreamingDecoder::take(const std::string& text, size_t end) {
  // Decoding is append-only past a held-back U+FFFD run, so what is out is a prefix of `text`;
  // should it not be (a tokenizer that rewrites earlier text), nothing is emitted that would
  // repeat or contradict it: the new bytes past its length are.
  if (end <= emitted_.size()) return {};
  std::string piece = text.substr(emitted_.size(), end - emitted_.size());
  emitted_ += piece;
  return piece;
}

Expected<std::string> StreamingDecoder::push(int64_t token) {
  ids_.push_back(token);
  Expected<std::string> text = tokenizer_->decode(ids_);
  if (!text.ok()) {
    ids_.pop_back();  // the sequence stays decodable
    return text.status();
  }
  return take(*text, stable_length(*text));
}

Expected<std::string> StreamingDecoder::finish() {
  KILN_ASSIGN_OR_RETURN(std::string text, tokenizer_->decode(ids_));
  return take(text, text.size());
}

}  // namespace kiln::llm
