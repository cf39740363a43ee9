// The object behind include/kiln/llm.h's kilnllmTokenizer handle, for the code inside Kiln that
// is handed one and needs the tokenizer itself (the Python package's text streams, which run
// llm::TextStream over a kiln.Tokenizer). Users see the handle only.
#pragma once

#include <memory>

#include "llm/tokenizer.h"

struct kilnllmTokenizer {
  std::unique_ptr<kiln::llm::Tokenizer> tokenizer;
};
