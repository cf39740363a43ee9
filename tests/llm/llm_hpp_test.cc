// include/kiln/llm.hpp, the C++17 RAII wrapper over llm.h, built as C++17 against libkiln.so:
// tokens streamed through a std::function and read back equal PyTorch's greedy decode of the
// tests' Llama-style decoder; failing calls throw kiln::Error with Kiln's code and message; an
// exception thrown by the token callback cancels its request and comes out of run(), while the
// other requests go on and still equal PyTorch.
#include "kiln/llm.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

std::string model_dir() { return std::string(KILN_LLM_TEST_DATA_DIR) + "/llama-tiny"; }

struct Reference {
  std::vector<std::vector<int64_t>> prompts, tokens;
};

Reference load_reference() {
  Reference r;
  std::ifstream in(model_dir() + "/reference.json");
  EXPECT_TRUE(in) << model_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  if (!in) return r;
  nlohmann::json j = nlohmann::json::parse(in);
  for (const auto& s : j["sequences"]) {
    r.prompts.push_back(s["prompt"].get<std::vector<int64_t>>());
    r.tokens.push_back(s["tokens"].get<std::vector<int64_t>>());
  }
  return r;
}

std::vector<int64_t> first(const std::vector<int64_t>& v, size_t n) { return {v.begin(), v.begin() + n}; }

TEST(LlmHpp, StreamsAndReadsBackPyTorchsGreedyTokens) {
  const Reference ref = load_reference();
  ASSERT_GE(ref.prompts.size(), 8u);
  kiln::Runtime runtime;
  kiln::llm::Engine engine(model_dir());
  EXPECT_EQ(engine.info().vocab, 512);
  std::map<int64_t, std::vector<int64_t>> streamed;
  std::map<int64_t, int> lasts;
  engine.on_token([&](int64_t request, int64_t token, bool last) {
    streamed[request].push_back(token);
    lasts[request] += last;
    return true;
  });
  kiln::llm::RequestParams params;
  params.maxNewTokens = 24;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < 8; ++i) ids.push_back(engine.add_request(ref.prompts[i], params));
  EXPECT_FALSE(engine.step());  // prefill and one decode: two tokens each
  for (int64_t id : ids) EXPECT_EQ(engine.poll(id).size(), 2u);
  engine.run();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<int64_t> want = first(ref.tokens[i], 24);
    EXPECT_EQ(engine.tokens(ids[i]), want) << "request " << i;
    EXPECT_EQ(streamed[ids[i]], want) << "request " << i;
    EXPECT_EQ(lasts[ids[i]], 1);
    EXPECT_EQ(engine.poll(ids[i]), first(std::vector<int64_t>(want.begin() + 2, want.end()), 22));
    EXPECT_EQ(engine.status(ids[i]), KILN_LLM_REQUEST_FINISHED);
  }
  EXPECT_EQ(engine.stats().blocksUsed, 0);
  EXPECT_EQ(engine.stats().finished, 8);
  // Moved, the engine still works; released requests are gone.
  kiln::llm::Engine moved = std::move(engine);
  moved.release(ids[0]);
  EXPECT_THROW(moved.tokens(ids[0]), kiln::Error);
}

TEST(LlmHpp, ErrorsThrowAndCallbackExceptionsCancelTheirRequest) {
  const Reference ref = load_reference();
  ASSERT_GE(ref.prompts.size(), 2u);
  kiln::Runtime runtime;
  try {
    kiln::llm::Engine missing(model_dir() + "/no-such-dir");
    ADD_FAILURE() << "a missing decoder directory did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_FILE);
    EXPECT_NE(std::string(e.what()).find("not a Kiln decoder directory"), std::string::npos) << e.what();
  }
  kiln::llm::EngineOptions options;
  options.recordLogits = 1;
  kiln::llm::Engine engine(model_dir(), options);
  try {
    engine.add_request({1, 512, 3});
    ADD_FAILURE() << "an id outside the vocabulary did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_PARAM);
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
  kiln::llm::RequestParams params;
  params.maxNewTokens = 16;
  const int64_t a = engine.add_request(ref.prompts[0], params);
  const int64_t b = engine.add_request(ref.prompts[1], params);
  engine.on_token([&](int64_t request, int64_t, bool) {
    if (request == a && engine.tokens(a).size() == 3) throw std::runtime_error("stop here");
    return true;
  });
  EXPECT_THROW(engine.run(), std::runtime_error);
  EXPECT_EQ(engine.status(a), KILN_LLM_REQUEST_CANCELLED);
  EXPECT_EQ(engine.tokens(a), first(ref.tokens[0], 3));
  engine.on_token(nullptr);
  engine.run();  // the other request goes on
  EXPECT_EQ(engine.tokens(b), first(ref.tokens[1], 16));
  EXPECT_EQ(engine.logits(b, 0).size(), 512u);
  EXPECT_THROW(engine.logits(b, 16), kiln::Error);
  EXPECT_EQ(engine.stats().blocksUsed, 0);
}

}  // namespace

namespace {

// kiln::llm::Tokenizer: ids and text equal SentencePiece's Python binding (the fixture's
// byte-fallback model, reference.json), a text request generates what <s> + those ids do with
// </s> as a stop token, and bad input throws kiln::Error with the C API's code.
TEST(LlmHpp, TokenizerEncodesAsTheBindingAndTextRequestsMatchTheirIds) {
  const std::string dir = std::string(KILN_LLM_TEST_DATA_DIR) + "/tokenizer_bytes";
  std::ifstream in(dir + "/reference.json");
  ASSERT_TRUE(in) << dir;
  const nlohmann::json ref = nlohmann::json::parse(in);
  kiln::llm::Tokenizer tok(dir + "/tokenizer.model");
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ(tok.bos_id(), ref["bos_id"].get<int64_t>());
  EXPECT_EQ(tok.eos_id(), ref["eos_id"].get<int64_t>());
  for (const auto& c : ref["cases"]) {
    const auto ids = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tok.encode(c["text"].get<std::string>(), false), ids);
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>());
  }
  // NFKC makes the 3 bytes of U+337F the 12 of "株式会社", 12 byte tokens: more ids than the first
  // buffer holds, so encode asks again at the size reported.
  EXPECT_EQ(tok.encode("\xE3\x8D\xBF", false), tok.encode("\xE6\xA0\xAA\xE5\xBC\x8F\xE4\xBC\x9A\xE7\xA4\xBE", false));
  EXPECT_GT(tok.encode("\xE3\x8D\xBF", false).size(), 5u);
  kiln::llm::Tokenizer moved = std::move(tok);
  EXPECT_EQ(tok.get(), nullptr);
  try {
    moved.decode({moved.vocab_size()});
    ADD_FAILURE() << "an id outside the vocabulary did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_PARAM);
    EXPECT_NE(std::string(e.what()).find("outside the tokenizer's vocabulary"), std::string::npos) << e.what();
  }
  try {
    moved.encode("ab\xff");
    ADD_FAILURE() << "text that is not UTF-8 did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_PARAM);
  }
  try {
    kiln::llm::Tokenizer missing(dir + "/no-such.model");
    ADD_FAILURE() << "a missing model did not throw";
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), KILN_ERROR_INVALID_FILE);
  }
  kiln::Runtime runtime;
  kiln::llm::Engine engine(model_dir());
  kiln::llm::RequestParams params;
  params.maxNewTokens = 12;
  const std::string text = ref["cases"][3]["text"];
  const int64_t a = engine.add_text_request(text, moved, params);
  const int64_t eos = moved.eos_id();
  params.stopTokens = &eos;
  params.numStopTokens = 1;
  const int64_t b = engine.add_request(moved.encode(text), params);
  engine.run();
  EXPECT_EQ(engine.tokens(a), engine.tokens(b));
  EXPECT_FALSE(engine.tokens(a).empty());
}

}  // namespace
