// Incremental detokenization over a sliding window of ids (streaming_decoder.h).
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

Expected<std::string> StreamingDecoder::decode_from(size_t begin) const {
  return tokenizer_->decode(std::vector<int64_t>(ids_.begin() + static_cast<std::ptrdiff_t>(begin), ids_.end()));
}

std::string StreamingDecoder::take(const std::string& window_text, size_t end) {
  if (end <= window_out_) return {};
  std::string piece = window_text.substr(window_out_, end - window_out_);
  window_out_ = end;
  emitted_ += piece;
  return piece;
}

Expected<std::string> StreamingDecoder::redecode_all(bool final) {
  KILN_ASSIGN_OR_RETURN(std::string text, decode_from(0));
  window_begin_ = 0;
  complete_end_ = 0;
  base_.clear();
  // What is out is a prefix of the text unless the tokenizer rewrote earlier text; then nothing
  // is let out that would repeat or contradict it, only the bytes past its length.
  window_out_ = emitted_.size();
  const size_t end = final ? text.size() : stable_length(text);
  std::string piece = take(text, end);
  if (end == text.size()) {
    complete_end_ = ids_.size();
    base_ = std::move(text);
  }
  return piece;
}

Expected<std::string> StreamingDecoder::push(int64_t token) {
  if (token < 0 || token >= tokenizer_->vocab_size()) {
    return invalid_argument("token id %lld is outside the tokenizer's vocabulary of %lld",
                            static_cast<long long>(token), static_cast<long long>(tokenizer_->vocab_size()));
  }
  ids_.push_back(token);
  Expected<std::string> window = decode_from(window_begin_);
  if (!window.ok()) {
    ids_.pop_back();  // the sequence stays decodable
    return window.status();
  }
  // The window's ids before complete_end_ decode as they did (their characters are complete and
  // the start-of-text rule was spent on them), so its text extends base_; should it not, the
  // whole sequence is decoded once and the window starts afresh.
  if (window->compare(0, base_.size(), base_) != 0 || window->size() < window_out_) return redecode_all(false);
  const size_t end = stable_length(*window);
  std::string piece = take(*window, end);
  if (end < window->size()) return piece;  // an unfinished character: the window keeps it
  // Complete: slide the window to the ids since the last complete point, when they write
  // something (else the start-of-text rule would fall on later ids); else just extend the base.
  const size_t newest = complete_end_;
  complete_end_ = ids_.size();
  Expected<std::string> newest_text = newest > window_begin_ ? decode_from(newest) : Expected<std::string>(*window);
  if (!newest_text.ok()) return newest_text.status();
  if (newest > window_begin_ && !newest_text->empty()) {
    window_begin_ = newest;
    base_ = std::move(*newest_text);
  } else {
    base_ = std::move(*window);
  }
  window_out_ = base_.size();
  return piece;
}

Expected<std::string> StreamingDecoder::finish() {
  KILN_ASSIGN_OR_RETURN(std::string window, decode_from(window_begin_));
  if (window.compare(0, base_.size(), base_) != 0 || window.size() < window_out_) return redecode_all(true);
  return take(window, window.size());
}

}  // namespace kiln::llm
