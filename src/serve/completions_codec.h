// OpenAI's completions protocol (POST /v1/completions): prompts as text (encoded by the model's
// tokenizer, LlmModel::prepare) or token ids, stop sequences as text (up to 4) or token ids,
// answers carrying `token_ids` beside `text` (empty for a model without a tokenizer). Parsing is
// strict: an unknown field, a value of the wrong type or out of range is invalid_argument naming
// the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "serve/llm_model.h"

namespace kiln::serve {

struct CompletionRequest {
  std::string model;
  CompletionParams params;
};

// Parses a request body: {"model", "prompt" (text, a list of texts, token ids, or a list of
// token-id lists),
// "max_tokens" (default 16), "temperature" (default 1; 0 is greedy), "top_p", "top_k",
// "seed", "stop" (a text, up to 4 texts, a token id or token ids), "ignore_eos" (vLLM's), "stream", and "n"/"best_of" 1, "echo" false, "logprobs"
// null, "user" accepted as OpenAI clients send them}.
Expected<CompletionRequest> parse_completion_request(const std::string& body);

// The envelope of every answer: id, object, created (Unix seconds), model.
struct CompletionHeader {
  std::string id;  // "cmpl-<n>"
  int64_t created = 0;
  std::string model;
};

// The non-streamed answer: every choice's tokens, text (`texts[i]`, "" past its end),
// finish_reason and the usage counts.
std::string encode_completion(const CompletionHeader& h, const std::vector<std::vector<int64_t>>& prompts,
                              const std::vector<Completion::Choice>& choices, const std::vector<std::string>& texts);
// One server-sent event ("data: {...}\n\n") of choice `index`: new tokens and the text they
// completed (finish_reason null) or, with `finish_reason` set, its end (with the text held back
// until then).
std::string encode_completion_event(const CompletionHeader& h, size_t index, const std::vector<int64_t>& tokens,
                                    const std::string& text, const std::string& finish_reason);

// OpenAI's error object: {"error": {"message", "type", "param": null, "code"}}, the type and
// code following the HTTP status.
std::string openai_error_body(int http_status, const std::string& message);

}  // namespace kiln::serve
