// Streamed text with stop strings (text_stream.h).
#include "llm/text_stream.h"

namespace kiln::llm {

Expected<TextStream> TextStream::create(const Tokenizer& tokenizer, std::vector<std::string> stop_strings) {
  KILN_ASSIGN_OR_RETURN(StopStringMatcher matcher, StopStringMatcher::create(std::move(stop_strings)));
  return TextStream(tokenizer, std::move(matcher));
}

std::string TextStream::let_out(StopStringMatcher::Step step) {
  text_ += step.text;
  return std::move(step.text);
}

Expected<TextStream::Step> TextStream::push(int64_t token) {
  if (matcher_.stopped()) return Step{"", true};
  KILN_ASSIGN_OR_RETURN(std::string piece, decoder_.push(token));
  StopStringMatcher::Step step = matcher_.push(piece);
  const bool stopped = step.stopped;
  return Step{let_out(std::move(step)), stopped};
}

Expected<std::string> TextStream::finish() {
  if (matcher_.stopped()) return std::string();
  KILN_ASSIGN_OR_RETURN(std::string rest, decoder_.finish());
  std::string out = let_out(matcher_.push(rest));
  if (!matcher_.stopped()) out += let_out({matcher_.finish(), false});
  return out;
}

}  // namespace kiln::llm
