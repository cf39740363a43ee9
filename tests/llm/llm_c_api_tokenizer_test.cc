// include/kiln/llm.h's tokenizer through libkiln.so, as a C user meets it (nothing of src/
// included): ids and text equal SentencePiece's own Python binding on the fixture's models
// (make_test_data.py's tokenizer/ and, with byte fallback, tokenizer_bytes/: reference.json),
// a text request generates what the same ids given as tokens do, and bad input (missing or
// corrupt model files, short buffers, text that is not UTF-8, ids outside the vocabulary, dead
// handles) is an error code with a message, never a crash or a write past the buffer.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/llm.h"
#include "../process_temp_dir.h"

namespace {

std::string data_dir() { return KILN_LLM_TEST_DATA_DIR; }

bool message_has(const char* what) { return std::strstr(kilnGetRecentErrMsg(), what) != nullptr; }

nlohmann::json reference(const std::string& dir) {
  std::ifstream in(data_dir() + "/" + dir + "/reference.json");
  EXPECT_TRUE(in.good()) << dir << ": no test data (ctest runs the llm.make_test_data fixture first)";
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

kilnllmTokenizer* load(const std::string& dir) {
  kilnllmTokenizer* tok = nullptr;
  EXPECT_EQ(kilnllmCreateTokenizer((data_dir() + "/" + dir + "/tokenizer.model").c_str(), &tok), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  return tok;
}

std::vector<int64_t> tokenize(const kilnllmTokenizer* tok, const std::string& text, bool bos) {
  size_t n = 0;
  EXPECT_EQ(kilnllmTokenize(tok, text.c_str(), bos ? 1 : 0, nullptr, 0, &n),
            text.empty() && !bos ? KILN_SUCCESS : KILN_ERROR_STORAGE_OVER_LIMIT);
  std::vector<int64_t> ids(n);
  EXPECT_EQ(kilnllmTokenize(tok, text.c_str(), bos ? 1 : 0, ids.data(), ids.size(), &n), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  return ids;
}

std::string detokenize(const kilnllmTokenizer* tok, const std::vector<int64_t>& ids) {
  size_t n = 0;
  EXPECT_EQ(kilnllmDetokenize(tok, ids.data(), ids.size(), nullptr, 0, &n), KILN_ERROR_STORAGE_OVER_LIMIT);
  std::string text(n + 1, '\0');
  EXPECT_EQ(kilnllmDetokenize(tok, ids.data(), ids.size(), text.data(), text.size(), &n), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  EXPECT_EQ(text[n], '\0');
  text.resize(n);
  return text;
}

int64_t get(kilnError (*fn)(const kilnllmTokenizer*, int64_t*), const kilnllmTokenizer* tok) {
  int64_t v = -2;
  EXPECT_EQ(fn(tok, &v), KILN_SUCCESS) << kilnGetRecentErrMsg();
  return v;
}

// (kilnInit is llm_c_api_test.cc's global environment, in this binary too.)

class LlmCApiTokenizer : public ::testing::TestWithParam<std::string> {};

TEST_P(LlmCApiTokenizer, EncodesAndDecodesAsSentencePiecesBinding) {
  const nlohmann::json ref = reference(GetParam());
  kilnllmTokenizer* tok = load(GetParam());
  ASSERT_TRUE(tok);
  EXPECT_EQ(get(kilnllmTokenizerVocabSize, tok), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ(get(kilnllmTokenizerBosId, tok), ref["bos_id"].get<int64_t>());
  EXPECT_EQ(get(kilnllmTokenizerEosId, tok), ref["eos_id"].get<int64_t>());
  ASSERT_FALSE(ref["cases"].empty());
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(tokenize(tok, text, false), ids) << "'" << text << "'";
    std::vector<int64_t> with_bos{ref["bos_id"].get<int64_t>()};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    EXPECT_EQ(tokenize(tok, text, true), with_bos) << "'" << text << "'";
    EXPECT_EQ(detokenize(tok, ids), c["decoded"].get<std::string>()) << "'" << text << "'";
    EXPECT_EQ(detokenize(tok, with_bos), c["decoded"].get<std::string>()) << "<s> decodes to nothing";
  }
  EXPECT_EQ(kilnllmDestroyTokenizer(tok), KILN_SUCCESS);
}

INSTANTIATE_TEST_SUITE_P(Models, LlmCApiTokenizer, ::testing::Values("tokenizer", "tokenizer_bytes"));

TEST(LlmCApiTokenizerErrors, ShortBuffersGiveTheSizeAndAreNotWritten) {
  kilnllmTokenizer* tok = load("tokenizer");
  ASSERT_TRUE(tok);
  const nlohmann::json c = reference("tokenizer")["cases"][0];
  const std::string text = c["text"];
  const size_t want = c["ids"].size() + 1;  // with <s>
  std::vector<int64_t> ids(want + 4, -7);
  size_t n = 0;
  EXPECT_EQ(kilnllmTokenize(tok, text.c_str(), 1, ids.data(), want - 1, &n), KILN_ERROR_STORAGE_OVER_LIMIT);
  EXPECT_EQ(n, want);
  EXPECT_TRUE(message_has("ids holds")) << kilnGetRecentErrMsg();
  for (int64_t v : ids) EXPECT_EQ(v, -7) << "written although short";
  EXPECT_EQ(kilnllmTokenize(tok, text.c_str(), 1, ids.data(), want, &n), KILN_SUCCESS);
  EXPECT_EQ(ids[want], -7) << "written past the ids";
  const std::string decoded = c["decoded"];
  std::string buf(decoded.size() + 8, '#');
  // Room for the text but not its NUL.
  EXPECT_EQ(kilnllmDetokenize(tok, ids.data(), want, buf.data(), decoded.size(), &n), KILN_ERROR_STORAGE_OVER_LIMIT);
  EXPECT_EQ(n, decoded.size());
  EXPECT_EQ(buf, std::string(decoded.size() + 8, '#'));
  EXPECT_EQ(kilnllmDetokenize(tok, ids.data(), want, buf.data(), decoded.size() + 1, &n), KILN_SUCCESS);
  EXPECT_EQ(std::string(buf.c_str()), decoded);
  EXPECT_EQ(buf[decoded.size() + 1], '#') << "written past the text and its NUL";
  // An empty text without <s> is no ids (a successful query); no ids decode to "".
  EXPECT_EQ(kilnllmTokenize(tok, "", 0, nullptr, 0, &n), KILN_SUCCESS);
  EXPECT_EQ(n, 0u);
  char empty[1] = {'#'};
  EXPECT_EQ(kilnllmDetokenize(tok, nullptr, 0, empty, 1, &n), KILN_SUCCESS);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(empty[0], '\0');
  EXPECT_EQ(kilnllmDestroyTokenizer(tok), KILN_SUCCESS);
}

TEST(LlmCApiTokenizerErrors, BadFilesTextIdsAndHandlesAreErrorCodes) {
  kilnllmTokenizer* tok = nullptr;
  EXPECT_EQ(kilnllmCreateTokenizer((data_dir() + "/tokenizer/no-such.model").c_str(), &tok), KILN_ERROR_INVALID_FILE);
  EXPECT_TRUE(message_has("no-such.model: no such file")) << kilnGetRecentErrMsg();
  // A corrupt model: the reference JSON, and the model cut in half.
  EXPECT_EQ(kilnllmCreateTokenizer((data_dir() + "/tokenizer/reference.json").c_str(), &tok), KILN_ERROR_INVALID_FILE);
  EXPECT_TRUE(message_has("is not a SentencePiece model")) << kilnGetRecentErrMsg();
  {
    std::ifstream in(data_dir() + "/tokenizer/tokenizer.model", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_GT(bytes.size(), 100u);
    kiln::test_support::ProcessTempDir dir("kiln_llm_tokenizer");
    const std::string cut = dir.path() + "/cut.model";
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    EXPECT_EQ(kilnllmCreateTokenizer(cut.c_str(), &tok), KILN_ERROR_INVALID_FILE);
    EXPECT_TRUE(message_has("cut.model is not a SentencePiece model")) << kilnGetRecentErrMsg();
  }
  EXPECT_EQ(tok, nullptr);
  EXPECT_EQ(kilnllmCreateTokenizer(nullptr, &tok), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmCreateTokenizer("x.model", nullptr), KILN_ERROR_INVALID_PARAM);

  tok = load("tokenizer");
  ASSERT_TRUE(tok);
  size_t n = 0;
  int64_t ids[8];
  EXPECT_EQ(kilnllmTokenize(tok, "light\x80", 0, ids, 8, &n), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("not valid UTF-8: byte 0x80 at offset 5")) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmTokenize(tok, "\xE6\x9D", 0, ids, 8, &n), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmTokenize(tok, nullptr, 0, ids, 8, &n), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmTokenize(tok, "x", 0, ids, 8, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmTokenize(tok, "x", 0, nullptr, 8, &n), KILN_ERROR_INVALID_PARAM);
  const int64_t vocab = get(kilnllmTokenizerVocabSize, tok);
  char text[64];
  for (const int64_t bad : {vocab, int64_t{-1}, int64_t{1} << 40}) {
    const int64_t in[] = {5, bad, 6};
    EXPECT_EQ(kilnllmDetokenize(tok, in, 3, text, sizeof(text), &n), KILN_ERROR_INVALID_PARAM);
    EXPECT_TRUE(message_has(("token id " + std::to_string(bad) + " is outside the tokenizer's vocabulary").c_str()))
        << kilnGetRecentErrMsg();
  }
  EXPECT_EQ(kilnllmDetokenize(tok, nullptr, 2, text, sizeof(text), &n), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmDetokenize(tok, ids, 0, text, sizeof(text), nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmTokenizerBosId(tok, nullptr), KILN_ERROR_INVALID_PARAM);

  // NULL, foreign and destroyed handles.
  int foreign = 0;
  auto* alien = reinterpret_cast<kilnllmTokenizer*>(&foreign);
  EXPECT_EQ(kilnllmTokenize(nullptr, "x", 0, ids, 8, &n), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmTokenize(alien, "x", 0, ids, 8, &n), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmDestroyTokenizer(tok), KILN_SUCCESS);
  EXPECT_EQ(kilnllmDestroyTokenizer(tok), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmDetokenize(tok, nullptr, 0, text, sizeof(text), &n), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  int64_t v = 0;
  EXPECT_EQ(kilnllmTokenizerEosId(tok, &v), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmTokenizerVocabSize(alien, &v), KILN_ERROR_INVALID_RESOURCE_HANDLE);
}

// A text request is the ids of its text with <s> in front, stopping at </s>: it generates what
// the same ids given as tokens with </s> as a stop token generate (the token path is checked
// against PyTorch in llm_c_api_test.cc), on gpt2-tiny with both fixture tokenizers.
TEST(LlmCApiTokenizerEngine, TextRequestGeneratesWhatItsIdsDo) {
  kilnllmEngineOptions o;
  kilnllmEngineOptionsInit(&o);
  o.maxBatch = 8;
  kilnllmEngine* engine = nullptr;
  ASSERT_EQ(kilnllmCreateEngine((data_dir() + "/gpt2-tiny").c_str(), &o, &engine), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  struct Pair {
    int64_t text, ids, eos;
  };
  std::vector<Pair> pairs;
  std::vector<kilnllmTokenizer*> toks;
  for (const std::string dir : {"tokenizer", "tokenizer_bytes"}) {
    kilnllmTokenizer* tok = load(dir);
    ASSERT_TRUE(tok);
    toks.push_back(tok);
    const int64_t eos = get(kilnllmTokenizerEosId, tok);
    const nlohmann::json ref = reference(dir);  // held: a loop over a temporary's member dangles
    for (const auto& c : ref["cases"]) {
      kilnllmRequestParams p;
      kilnllmRequestParamsInit(&p);
      p.maxNewTokens = 24;
      Pair pair{-1, -1, eos};
      ASSERT_EQ(kilnllmAddTextRequest(engine, tok, c["text"].get<std::string>().c_str(), &p, &pair.text), KILN_SUCCESS)
          << kilnGetRecentErrMsg();
      std::vector<int64_t> ids{get(kilnllmTokenizerBosId, tok)};
      for (int64_t id : c["ids"]) ids.push_back(id);
      p.stopTokens = &eos;
      p.numStopTokens = 1;
      ASSERT_EQ(kilnllmAddRequest(engine, ids.data(), ids.size(), &p, &pair.ids), KILN_SUCCESS) << kilnGetRecentErrMsg();
      pairs.push_back(pair);
    }
  }
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  int stopped = 0;
  for (const Pair& pair : pairs) {
    size_t n = 0, m = 0;
    std::vector<int64_t> a(32), b(32);
    ASSERT_EQ(kilnllmGetRequestTokens(engine, pair.text, a.data(), a.size(), &n), KILN_SUCCESS);
    ASSERT_EQ(kilnllmGetRequestTokens(engine, pair.ids, b.data(), b.size(), &m), KILN_SUCCESS);
    a.resize(n);
    b.resize(m);
    EXPECT_EQ(a, b) << "request " << pair.text;
    ASSERT_FALSE(a.empty());
    // </s> only ever as the last token, and then before the budget.
    for (size_t i = 0; i + 1 < a.size(); ++i) EXPECT_NE(a[i], pair.eos);
    if (a.back() == pair.eos) {
      ++stopped;
    } else {
      EXPECT_EQ(a.size(), 24u);
    }
  }
  // Params' own stop tokens stay: the first token of a request, made a stop token, ends it.
  kilnllmRequestParams p;
  kilnllmRequestParamsInit(&p);
  p.maxNewTokens = 24;
  size_t n = 0;
  int64_t first_token = -1;
  ASSERT_EQ(kilnllmGetRequestTokens(engine, pairs[0].text, &first_token, 1, &n), KILN_SUCCESS);
  p.stopTokens = &first_token;
  p.numStopTokens = 1;
  int64_t id = -1;
  ASSERT_EQ(kilnllmAddTextRequest(engine, toks[0], reference("tokenizer")["cases"][0]["text"].get<std::string>().c_str(),
                                  &p, &id),
            KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS);
  int64_t got[4];
  ASSERT_EQ(kilnllmGetRequestTokens(engine, id, got, 4, &n), KILN_SUCCESS);
  EXPECT_EQ(n, 1u);
  // Bad text requests are errors of that call: not UTF-8, NULLs, a dead tokenizer, a bad size.
  EXPECT_EQ(kilnllmAddTextRequest(engine, toks[0], "light\xFF", nullptr, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("kilnllmAddTextRequest")) << kilnGetRecentErrMsg();
  EXPECT_TRUE(message_has("not valid UTF-8")) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmAddTextRequest(engine, toks[0], nullptr, nullptr, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmAddTextRequest(engine, toks[0], "x", nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("kilnllmAddTextRequest: ")) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmAddTextRequest(nullptr, toks[0], "x", nullptr, &id), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmAddTextRequest(engine, nullptr, "x", nullptr, &id), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  kilnllmRequestParams wrong = p;
  wrong.size = 3;
  EXPECT_EQ(kilnllmAddTextRequest(engine, toks[0], "x", &wrong, &id), KILN_ERROR_INVALID_PARAM);
  for (kilnllmTokenizer* tok : toks) EXPECT_EQ(kilnllmDestroyTokenizer(tok), KILN_SUCCESS);
  EXPECT_EQ(kilnllmAddTextRequest(engine, toks[0], "x", nullptr, &id), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
  std::printf("%d of %zu text requests ended at </s>\n", stopped, pairs.size());
}

// A tokenizer with more pieces (700) than the model has token ids (gpt2-tiny's 512) is not the
// model's: a text request with it is refused naming both sizes, and queues nothing.
TEST(LlmCApiTokenizerEngine, ATokenizerLargerThanTheModelsVocabularyIsRefused) {
  kilnllmEngine* engine = nullptr;
  ASSERT_EQ(kilnllmCreateEngine((data_dir() + "/gpt2-tiny").c_str(), nullptr, &engine), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  kilnllmTokenizer* large = load("tokenizer_large");
  ASSERT_TRUE(large);
  EXPECT_EQ(get(kilnllmTokenizerVocabSize, large), 700);
  int64_t id = -1;
  EXPECT_EQ(kilnllmAddTextRequest(engine, large, "And God said", nullptr, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("kilnllmAddTextRequest")) << kilnGetRecentErrMsg();
  EXPECT_TRUE(message_has("the tokenizer's vocabulary (700) is larger than the model's (512)")) << kilnGetRecentErrMsg();
  EXPECT_EQ(id, -1);
  kilnllmStats stats;
  stats.size = sizeof(stats);
  ASSERT_EQ(kilnllmGetStats(engine, &stats), KILN_SUCCESS);
  EXPECT_EQ(stats.waiting, 0);
  // The same engine takes a tokenizer of its size.
  kilnllmTokenizer* fits = load("tokenizer_bytes");
  ASSERT_TRUE(fits);
  EXPECT_EQ(kilnllmAddTextRequest(engine, fits, "And God said", nullptr, &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmDestroyTokenizer(large), KILN_SUCCESS);
  EXPECT_EQ(kilnllmDestroyTokenizer(fits), KILN_SUCCESS);
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
}

}  // namespace
