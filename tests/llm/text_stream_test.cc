// Streamed text over 1000+ tokens (llm/streaming_decoder.h, llm/text_stream.h) against
// SentencePiece's Python binding (make_test_data.py's long_cases: ids mixing multi-byte
// characters, byte-fallback pieces whole and stray, leading and lone spaces, control ids): the
// pieces join to the binding's decode of the whole sequence, the text out at every 37th token is
// the binding's decode of that prefix short of an unfinished character, and each token decodes
// a window of a few ids, not the sequence. Then text stop sequences through a TextStream: the
// text before the stop string as the binding decodes it, cut where a stop string spans tokens.
#include "llm/text_stream.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llm_test_data.h"

namespace kiln::llm {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

nlohmann::json reference(const std::string& dir) {
  std::ifstream in(test::data_dir() + "/" + dir + "/reference.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

std::string without_trailing_fffd(std::string s) {
  while (s.size() >= 3 && s.compare(s.size() - 3, 3, kFffd) == 0) s.resize(s.size() - 3);
  return s;
}

TEST(StreamingDecoder, ThousandsOfTokensJoinToTheBindingsDecodeInASmallWindow) {
  for (const std::string dir : {"tokenizer", "tokenizer_bytes"}) {
    SCOPED_TRACE(dir);
    auto tok = Tokenizer::load(test::data_dir() + "/" + dir + "/tokenizer.model");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const nlohmann::json ref = reference(dir);
    ASSERT_FALSE(ref["long_cases"].empty());
    for (const auto& c : ref["long_cases"]) {
      const auto ids = c["ids"].get<std::vector<int64_t>>();
      ASSERT_GE(ids.size(), 1000u);
      StreamingDecoder stream(**tok);
      std::string joined;
      size_t window_sum = 0, window_max = 0;
      for (size_t k = 0; k < ids.size(); ++k) {
        auto piece = stream.push(ids[k]);
        ASSERT_TRUE(piece.ok()) << piece.status().to_string();
        joined += *piece;
        window_sum += stream.window_size();
        window_max = std::max(window_max, stream.window_size());
        const std::string at = std::to_string(k + 1);
        if (c["checkpoints"].contains(at)) {
          ASSERT_EQ(joined, without_trailing_fffd(c["checkpoints"][at].get<std::string>())) << "after " << at << " ids";
        }
      }
      auto rest = stream.finish();
      ASSERT_TRUE(rest.ok()) << rest.status().to_string();
      EXPECT_EQ(joined + *rest, c["decoded"].get<std::string>());
      // The byte pieces include <0x00>: a NUL inside the text does not end it.
      if (dir == "tokenizer_bytes") {
        EXPECT_NE(c["decoded"].get<std::string>().find('\0'), std::string::npos);
      }
      // O(new tokens) per token: the window the decoder re-reads stays a few ids on average
      // (its longest run is a stretch of tokens that wrote nothing or ended in a broken byte).
      EXPECT_LT(window_sum, 8 * ids.size()) << "mean window " << double(window_sum) / ids.size();
      EXPECT_LT(window_max, 64u);
    }
  }
}

// A stop string found in the binding's decode of a long sequence: the TextStream stops at the
// token that completes it, its text is the binding's decode up to the stop string, and nothing
// it let out before ever held part of it.
TEST(TextStream, StopsAtAStopStringAsTheBindingsTextHasIt) {
  for (const std::string dir : {"tokenizer", "tokenizer_bytes"}) {
    SCOPED_TRACE(dir);
    auto tok = Tokenizer::load(test::data_dir() + "/" + dir + "/tokenizer.model");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const nlohmann::json ref = reference(dir);
    const auto ids = ref["long_cases"][0]["ids"].get<std::vector<int64_t>>();
    const std::string whole = ref["long_cases"][0]["decoded"];
    // Stop strings that occur in the text (several characters, one spanning tokens), the
    // earliest of several, and one that never occurs.
    const std::vector<std::vector<std::string>> stop_sets = {
        {"there be light"}, {"Z\xC3\xBCrich"}, {"1290", "said,"}, {"never in this text"}};
    for (const auto& stops : stop_sets) {
      SCOPED_TRACE(stops[0]);
      size_t first = std::string::npos;
      for (const std::string& s : stops) first = std::min(first, whole.find(s));
      auto stream = TextStream::create(**tok, stops);
      ASSERT_TRUE(stream.ok()) << stream.status().to_string();
      size_t used = 0;
      bool stopped = false;
      std::string joined;
      for (; used < ids.size() && !stopped; ++used) {
        auto step = stream->push(ids[used]);
        ASSERT_TRUE(step.ok()) << step.status().to_string();
        joined += step->text;
        stopped = step->stopped;
        // Never text past the stop string's start.
        if (first != std::string::npos) {
          ASSERT_LE(joined.size(), first);
        }
      }
      if (!stopped) {
        auto rest = stream->finish();
        ASSERT_TRUE(rest.ok());
        joined += *rest;
      }
      EXPECT_EQ(stopped, first != std::string::npos);
      EXPECT_EQ(joined, whole.substr(0, first));
      EXPECT_EQ(stream->text(), joined);
      if (stopped) {
        // The token that completed the stop string is the first whose prefix decode holds it.
        auto before = (*tok)->decode(std::vector<int64_t>(ids.begin(), ids.begin() + used - 1));
        auto through = (*tok)->decode(std::vector<int64_t>(ids.begin(), ids.begin() + used));
        ASSERT_TRUE(before.ok() && through.ok());
        bool in_before = false, in_through = false;
        for (const std::string& s : stops) {
          in_before = in_before || before->find(s) != std::string::npos;
          in_through = in_through || through->find(s) != std::string::npos;
        }
        EXPECT_FALSE(in_before);
        EXPECT_TRUE(in_through);
        EXPECT_EQ(stream->tokens(), used);
        auto after = stream->push(ids[0]);  // ignored after the stop
        ASSERT_TRUE(after.ok());
        EXPECT_EQ(after->text, "");
        EXPECT_TRUE(after->stopped);
      }
    }
  }
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  EXPECT_FALSE(TextStream::create(**tok, {""}).ok());
}

TEST(Tokenizer, ALargerVocabularyThanTheModelsIsAnErrorNamingBothSizes) {
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer_bytes/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE(check_tokenizer_fits(**tok, 512).ok());
  EXPECT_TRUE(check_tokenizer_fits(**tok, 50257).ok());
  Status s = check_tokenizer_fits(**tok, 511);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the tokenizer's vocabulary (512) is larger than the model's (511)"), std::string::npos)
      << s.to_string();
}

}  // namespace
}  // namespace kiln::llm
