// The OpenAI completions codec of src/serve without a server: what a request parses to, what
// each malformed one is refused with, and the JSON of answers, events and errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "serve/completions_codec.h"

namespace kiln::serve {
namespace {

using nlohmann::json;

void expect_refused(const std::string& body, const std::string& words) {
  auto r = parse_completion_request(body);
  ASSERT_FALSE(r.ok()) << body;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
}

TEST(CompletionsCodecTest, ARequestParsesWithOpenAIDefaults) {
  auto r = parse_completion_request(R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->params.prompts, (std::vector<std::vector<int64_t>>{{1, 2, 3}}));
  EXPECT_EQ(r->params.max_tokens, 16);
  EXPECT_EQ(r->params.sampling.temperature, 1.0f);
  EXPECT_FALSE(r->params.stream);
  r = parse_completion_request(
      R"({"model":"m","prompt":[[1],[2,3]],"max_tokens":5,"temperature":0,"top_p":0.5,"top_k":-1,"seed":9,)"
      R"("stop":7,"stream":true,"n":1,"echo":false,"logprobs":null,"user":"u"})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->params.prompts.size(), 2u);
  EXPECT_EQ(r->params.max_tokens, 5);
  EXPECT_EQ(r->params.sampling.temperature, 0.0f);
  EXPECT_EQ(r->params.sampling.top_p, 0.5f);
  EXPECT_EQ(r->params.sampling.top_k, 0);
  EXPECT_EQ(r->params.sampling.seed, 9u);
  EXPECT_EQ(r->params.stop, (std::vector<int64_t>{7}));
  EXPECT_TRUE(r->params.stream);
  EXPECT_FALSE(r->params.ignore_eos);
}

TEST(CompletionsCodecTest, TextPromptsAreKeptForTheModelsTokenizer) {
  auto r = parse_completion_request(R"({"model":"m","prompt":"caf\u00e9 \u6771","ignore_eos":true})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->params.texts, (std::vector<std::string>{"caf\xC3\xA9 \xE6\x9D\xB1"}));
  EXPECT_TRUE(r->params.prompts.empty());
  EXPECT_TRUE(r->params.ignore_eos);
  r = parse_completion_request(R"({"model":"m","prompt":["a",""]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->params.texts, (std::vector<std::string>{"a", ""}));
}

TEST(CompletionsCodecTest, TextStopSequencesAreAStringOrUpToFour) {
  auto r = parse_completion_request(R"({"model":"m","prompt":"a","stop":"\n\n"})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->params.stop_strings, (std::vector<std::string>{"\n\n"}));
  EXPECT_TRUE(r->params.stop.empty());
  r = parse_completion_request(R"({"model":"m","prompt":[1],"stop":["END","\u6771\u4eac","x","y"]})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->params.stop_strings, (std::vector<std::string>{"END", "\xE6\x9D\xB1\xE4\xBA\xAC", "x", "y"}));
  r = parse_completion_request(R"({"model":"m","prompt":[1],"stop":null})");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->params.stop_strings.empty());
}

TEST(CompletionsCodecTest, MalformedRequestsNameTheField) {
  expect_refused("{", "not valid JSON");
  expect_refused("3", "not a JSON object");
  expect_refused(R"({"prompt":[1]})", "no 'model'");
  expect_refused(R"({"model":"m"})", "no 'prompt'");
  expect_refused(R"({"model":"m","prompt":["a",[1]]})", "'prompt'[1] is [1]: a list of prompts holds texts only");
  expect_refused(R"({"model":"m","prompt":["a",2]})", "'prompt'[1] is 2");
  expect_refused(R"({"model":"m","prompt":[1,"a"]})", "'prompt'[1]");
  expect_refused(R"({"model":"m","prompt":[1],"ignore_eos":1})", "'ignore_eos'");
  expect_refused(R"({"model":"m","prompt":[[1],[]]})", "'prompt'[1] must be a non-empty array");
  expect_refused(R"({"model":"m","prompt":[1,18446744073709551615]})", "'prompt'[1]");
  expect_refused(R"({"model":"m","prompt":[1],"max_tokens":0})", "'max_tokens' is 0");
  expect_refused(R"({"model":"m","prompt":[1],"temperature":2.5})", "'temperature'");
  expect_refused(R"({"model":"m","prompt":[1],"top_p":0})", "'top_p' is 0");
  expect_refused(R"({"model":"m","prompt":[1],"seed":-1})", "'seed'");
  expect_refused(R"({"model":"m","prompt":[1],"stop":["a","b","c","d","e"]})", "'stop' has 5 strings, at most 4");
  expect_refused(R"({"model":"m","prompt":[1],"stop":""})", "'stop' is an empty string");
  expect_refused(R"({"model":"m","prompt":[1],"stop":["x",""]})", "'stop'[1] is an empty string");
  expect_refused(R"({"model":"m","prompt":[1],"stop":["x",7]})", "'stop'[1] is 7: a list of stop sequences holds texts");
  expect_refused(R"({"model":"m","prompt":[1],"stop":[7,"x"]})", "'stop'[1]");
  expect_refused(R"({"model":"m","prompt":[1],"stream":1})", "'stream'");
  expect_refused(R"({"model":"m","prompt":[1],"best_of":3})", "only 1");
  expect_refused(R"({"model":"m","prompt":[1],"logprobs":2})", "only null");
  expect_refused(R"({"model":"m","prompt":[1],"suffix":"x"})", "unknown field 'suffix'");
  // A value nested a million deep is named, not printed (printing recurses once per level).
  const std::string deep = std::string(1000000, '[') + std::string(1000000, ']');
  expect_refused(R"({"model":"m","prompt":[[1],)" + deep + "]}", "nested too deep");
  expect_refused(R"({"model":"m","prompt":[1],"n":)" + deep + "}", "nested too deep");
}

TEST(CompletionsCodecTest, AnswersEventsAndErrorsAreOpenAIShaped) {
  const CompletionHeader h{"cmpl-3", 1700000000, "m"};
  std::vector<Completion::Choice> choices(2);
  choices[0].tokens = {4, 5};
  choices[0].finish_reason = "length";
  choices[1].finish_reason = "stop";
  json j = json::parse(encode_completion(h, {{1, 2, 3}, {9}}, choices, {"caf\xC3\xA9"}));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"], "cmpl-3");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["choices"][0]["token_ids"], json({4, 5}));
  EXPECT_EQ(j["choices"][0]["text"], "caf\xC3\xA9");
  EXPECT_EQ(j["choices"][1]["text"], "");  // past the texts given
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 4}, {"completion_tokens", 2}, {"total_tokens", 6}}));
  const std::string event = encode_completion_event(h, 1, {8}, "\xE6\x9D\xB1", "");
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_EQ(event.substr(event.size() - 2), "\n\n");
  json e = json::parse(event.substr(6));
  EXPECT_EQ(e["choices"][0]["index"], 1);
  EXPECT_TRUE(e["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(e["choices"][0]["text"], "\xE6\x9D\xB1");
  json err = json::parse(openai_error_body(404, "unknown model 'x'"));
  EXPECT_EQ(err["error"]["type"], "not_found_error");
  EXPECT_EQ(err["error"]["code"], "model_not_found");
  EXPECT_EQ(json::parse(openai_error_body(400, "bad"))["error"]["type"], "invalid_request_error");
}

}  // namespace
}  // namespace kiln::serve
