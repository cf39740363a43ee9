// A request's generated text as it streams, ended by text stop sequences: the streaming
// decoder (streaming_decoder.h: whole characters, O(new tokens) per token) feeding the stop
// string matcher (stop_strings.h: OpenAI's semantics, the stop string left out, nothing let out
// that could still become part of one). One object per generated sequence; kiln serve's
// completions, Python's LlmEngine.stream()/generate() and `kiln generate --stop` all use it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "llm/stop_strings.h"
#include "llm/streaming_decoder.h"
#include "llm/tokenizer.h"

namespace kiln::llm {

class TextStream {
 public:
  // `tokenizer` must outlive the stream. invalid_argument for an empty stop string.
  static Expected<TextStream> create(const Tokenizer& tokenizer, std::vector<std::string> stop_strings = {});

  struct Step {
    std::string text;      // text that became final with this token
    bool stopped = false;  // a stop string completed: stop generating; `text` is the last
  };
  // Appends a generated token. After a stop, tokens are ignored (nothing more is let out). An
  // id outside the tokenizer's vocabulary is an error.
  Expected<Step> push(int64_t token);
  // The end of the sequence (its last token came, or it was cut at max tokens): the text held
  // back, up to a stop string should the held text complete one (then stopped() turns true).
  Expected<std::string> finish();

  bool stopped() const { return matcher_.stopped(); }
  // The text let out so far (the whole text once finished or stopped).
  const std::string& text() const { return text_; }
  // The tokens pushed before the stop (all of them while none matched), the one that completed
  // the stop string included.
  size_t tokens() const { return decoder_.ids().size(); }

 private:
  TextStream(const Tokenizer& tokenizer, StopStringMatcher matcher) : decoder_(tokenizer), matcher_(std::move(matcher)) {}
  std::string let_out(StopStringMatcher::Step step);

  StreamingDecoder decoder_;
  StopStringMatcher matcher_;
  std::string text_;
};

}  // namespace kiln::llm
