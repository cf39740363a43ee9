// OpenAI completions requests and answers as JSON (completions_codec.h).
#include "serve/completions_codec.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "core/json_brief.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

constexpr size_t kMaxStopStrings = 4;  // OpenAI's limit

bool is_int64(const json& j) {
  return j.is_number_integer() &&
         (!j.is_number_unsigned() || j.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
}

Expected<int64_t> int_field(const json& j, const char* name, int64_t lo, int64_t hi) {
  if (!is_int64(j) || j.get<int64_t>() < lo || j.get<int64_t>() > hi)
    return invalid_argument("'%s' is %s, expected an integer in %lld..%lld", name, json_brief(j).c_str(), (long long)lo,
                            (long long)hi);
  return j.get<int64_t>();
}

Expected<double> number_field(const json& j, const char* name, double lo, double hi) {
  if (!j.is_number() || j.get<double>() < lo || j.get<double>() > hi)
    return invalid_argument("'%s' is %s, expected a number in %g..%g", name, json_brief(j).c_str(), lo, hi);
  return j.get<double>();
}

// A list of token ids; `what` names it in errors.
Expected<std::vector<int64_t>> token_ids(const json& j, const std::string& what) {
  if (!j.is_array() || j.empty()) return invalid_argument("%s must be a non-empty array of token ids", what.c_str());
  std::vector<int64_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    if (!is_int64(j[i]))
      return invalid_argument("%s[%zu] is %s, not a token id (an integer)", what.c_str(), i, json_brief(j[i]).c_str());
    ids.push_back(j[i].get<int64_t>());
  }
  return ids;
}

// OpenAI's text stop sequences: a string or a list of up to 4, none empty (an empty one would
// end every choice before its first token).
Expected<std::vector<std::string>> stop_strings(const json& v) {
  if (v.is_string()) {
    if (v.get<std::string>().empty()) return invalid_argument("'stop' is an empty string");
    return std::vector<std::string>{v.get<std::string>()};
  }
  if (v.size() > kMaxStopStrings)
    return invalid_argument("'stop' has %zu strings, at most %zu are allowed", v.size(), kMaxStopStrings);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return invalid_argument("'stop'[%zu] is %s: a list of stop sequences holds texts only, or token ids only", i,
                              json_brief(v[i]).c_str());
    if (v[i].get<std::string>().empty()) return invalid_argument("'stop'[%zu] is an empty string", i);
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

json envelope(const CompletionHeader& h) {
  return {{"id", h.id}, {"object", "text_completion"}, {"created", h.created}, {"model", h.model}};
}

json choice_json(size_t index, const std::vector<int64_t>& tokens, const std::string& text,
                 const std::string& finish_reason) {
  return {{"index", index},
          {"text", text},
          {"token_ids", tokens},
          {"logprobs", nullptr},
          {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
}

}  // namespace

Expected<CompletionRequest> parse_completion_request(const std::string& body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("the request body is not valid JSON");
  if (!j.is_object()) return invalid_argument("the request body is not a JSON object");
  CompletionRequest r;
  r.params.sampling.temperature = 1.0f;  // OpenAI's default
  bool has_prompt = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "model") {
      if (!v.is_string()) return invalid_argument("'model' must be a string");
      r.model = v.get<std::string>();
    } else if (key == "prompt") {
      has_prompt = true;
      // OpenAI's four forms: text, a list of texts, token ids, a list of token-id lists (the
      // model's tokenizer encodes the texts: LlmModel::prepare).
      if (v.is_string()) {
        r.params.texts.push_back(v.get<std::string>());
      } else if (v.is_array() && !v.empty() && v[0].is_string()) {
        for (size_t i = 0; i < v.size(); ++i) {
          if (!v[i].is_string())
            return invalid_argument("'prompt'[%zu] is %s: a list of prompts holds texts only, or token-id lists "
                                    "only", i, json_brief(v[i]).c_str());
          r.params.texts.push_back(v[i].get<std::string>());
        }
      } else if (v.is_array() && !v.empty() && v[0].is_array()) {
        for (size_t i = 0; i < v.size(); ++i) {
          KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ids, token_ids(v[i], str_format("'prompt'[%zu]", i)));
          r.params.prompts.push_back(std::move(ids));
        }
      } else {
        KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ids, token_ids(v, "'prompt'"));
        r.params.prompts.push_back(std::move(ids));
      }
    } else if (key == "max_tokens") {
      if (!v.is_null()) {
        KILN_ASSIGN_OR_RETURN(r.params.max_tokens, int_field(v, "max_tokens", 1, 1 << 20));
      }
    } else if (key == "temperature") {
      if (!v.is_null()) {
        KILN_ASSIGN_OR_RETURN(double t, number_field(v, "temperature", 0, 2));
        r.params.sampling.temperature = static_cast<float>(t);
      }
    } else if (key == "top_p") {
      if (!v.is_null()) {
        KILN_ASSIGN_OR_RETURN(double p, number_field(v, "top_p", 0, 1));
        if (p == 0) return invalid_argument("'top_p' is 0, expected a number in (0, 1]");
        r.params.sampling.top_p = static_cast<float>(p);
      }
    } else if (key == "top_k") {  // vLLM's extension; -1 as there: every token
      if (!v.is_null()) {
        KILN_ASSIGN_OR_RETURN(int64_t k, int_field(v, "top_k", -1, std::numeric_limits<int32_t>::max()));
        r.params.sampling.top_k = k < 0 ? 0 : k;
      }
    } else if (key == "seed") {
      if (!v.is_null()) {
        KILN_ASSIGN_OR_RETURN(int64_t seed, int_field(v, "seed", 0, std::numeric_limits<int64_t>::max()));
        r.params.sampling.seed = static_cast<uint64_t>(seed);
      }
    } else if (key == "stop") {
      if (v.is_null()) continue;
      if (v.is_string() || (v.is_array() && !v.empty() && v[0].is_string())) {
        KILN_ASSIGN_OR_RETURN(r.params.stop_strings, stop_strings(v));
      } else if (is_int64(v)) {
        r.params.stop.push_back(v.get<int64_t>());
      } else {
        KILN_ASSIGN_OR_RETURN(r.params.stop, token_ids(v, "'stop'"));
      }
    } else if (key == "ignore_eos") {  // vLLM's extension
      if (!v.is_boolean()) return invalid_argument("'ignore_eos' must be true or false");
      r.params.ignore_eos = v.get<bool>();
    } else if (key == "stream") {
      if (!v.is_boolean()) return invalid_argument("'stream' must be true or false");
      r.params.stream = v.get<bool>();
    } else if (key == "n" || key == "best_of") {
      if (!v.is_null() && !(is_int64(v) && v.get<int64_t>() == 1))
        return invalid_argument("'%s' is %s: only 1 is supported", key.c_str(), json_brief(v).c_str());
    } else if (key == "echo") {
      if (!v.is_null() && v != false) return invalid_argument("'echo' is %s: only false is supported", json_brief(v).c_str());
    } else if (key == "logprobs") {
      if (!v.is_null()) return invalid_argument("'logprobs' is %s: only null is supported", json_brief(v).c_str());
    } else if (key == "user") {
      if (!v.is_string()) return invalid_argument("'user' must be a string");
    } else {
      return invalid_argument("unknown field '%s' (known: model, prompt, max_tokens, temperature, top_p, top_k, seed, "
                              "stop, ignore_eos, stream, n, best_of, echo, logprobs, user)", key.c_str());
    }
  }
  if (r.model.empty()) return invalid_argument("no 'model': name the model to complete with");
  if (!has_prompt) return invalid_argument("no 'prompt': give the prompt's text or token ids");
  return r;
}

std::string encode_completion(const CompletionHeader& h, const std::vector<std::vector<int64_t>>& prompts,
                              const std::vector<Completion::Choice>& choices, const std::vector<std::string>& texts) {
  json j = envelope(h);
  j["choices"] = json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    j["choices"].push_back(choice_json(i, choices[i].tokens, i < texts.size() ? texts[i] : "", choices[i].finish_reason));
    prompt_tokens += static_cast<int64_t>(prompts[i].size());
    completion_tokens += static_cast<int64_t>(choices[i].tokens.size());
  }
  j["usage"] = {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}};
  return j.dump();
}

std::string encode_completion_event(const CompletionHeader& h, size_t index, const std::vector<int64_t>& tokens,
                                    const std::string& text, const std::string& finish_reason) {
  json j = envelope(h);
  j["choices"] = json::array({choice_json(index, tokens, text, finish_reason)});
  return "data: " + j.dump() + "\n\n";
}

std::string openai_error_body(int http_status, const std::string& message) {
  const char* type = http_status == 404   ? "not_found_error"
                     : http_status < 500  ? "invalid_request_error"
                     : http_status == 503 ? "overloaded_error"
                                          : "server_error";
  json code = http_status == 404 ? json("model_not_found") : json(nullptr);
  // As error_body: bytes of the request that are not UTF-8 are written as U+FFFD.
  return json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kiln::serve
