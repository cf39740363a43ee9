// The SentencePiece tokenizer (llm/tokenizer.h) against the SentencePiece library's Python
// binding on the same models (make_test_data.py's tokenizer/ and, with byte fallback,
// tokenizer_bytes/): the same ids for each test string, the same text back; the streaming
// decoder's text after every token is the binding's decode of that prefix, short of an
// unfinished character. This binary links libprotobuf (through the compiler), so a
// load that works here is also the check that the shim's own protobuf copy stays apart.
#include "llm/tokenizer.h"

#include <gtest/gtest.h>

#include "llm/streaming_decoder.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "llm_test_data.h"

namespace kiln::llm {
namespace {

nlohmann::json reference(const std::string& dir = "tokenizer") {
  std::ifstream in(test::data_dir() + "/" + dir + "/reference.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

void expect_binding_equal(const std::string& dir) {
  SCOPED_TRACE(dir);
  auto tok = Tokenizer::load(test::data_dir() + "/" + dir + "/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const nlohmann::json ref = reference(dir);
  EXPECT_EQ((*tok)->vocab_size(), ref["vocab_size"].get<int64_t>());
  EXPECT_EQ((*tok)->bos_id(), ref["bos_id"].get<int64_t>());
  EXPECT_EQ((*tok)->eos_id(), ref["eos_id"].get<int64_t>());
  ASSERT_FALSE(ref["cases"].empty());
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    auto ids = (*tok)->encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int64_t>>()) << "'" << text << "'";
    auto back = (*tok)->decode(c["ids"].get<std::vector<int64_t>>());
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, c["decoded"].get<std::string>()) << "'" << text << "'";
  }
}

TEST(Tokenizer, EncodesAndDecodesAsSentencePiecesOwnBinding) { expect_binding_equal("tokenizer"); }

TEST(Tokenizer, EncodesAndDecodesWithByteFallbackAsTheBinding) { expect_binding_equal("tokenizer_bytes"); }

TEST(Tokenizer, TextThatIsNotUtf8IsAnErrorNamingTheByte) {
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  // A stray continuation byte, a truncated sequence, an overlong '/', a surrogate, past U+10FFFF.
  for (const std::string& bad : {std::string("light\x80"), std::string("ab\xE6\x9D"), std::string("\xC0\xAF"),
                                 std::string("x\xED\xA0\x80"), std::string("\xF4\x90\x80\x80")}) {
    auto ids = (*tok)->encode(bad);
    ASSERT_FALSE(ids.ok()) << bad;
    EXPECT_NE(ids.status().message().find("not valid UTF-8"), std::string::npos) << ids.status().to_string();
  }
  auto at = (*tok)->encode("light\x80");
  EXPECT_NE(at.status().message().find("byte 0x80 at offset 5"), std::string::npos) << at.status().to_string();
  EXPECT_TRUE((*tok)->encode("caf\xC3\xA9 \xE6\x9D\xB1 \xF0\x9F\x94\xA5").ok());  // 2, 3 and 4 bytes
}

// Token by token, the decoder has out the binding's decode of the prefix without its trailing
// U+FFFD (a character whose bytes have not all come), and never a piece that is not whole
// characters; finish() completes the binding's decode of all the ids.
TEST(Tokenizer, StreamingDecoderEmitsWholeCharactersOfEachPrefix) {
  for (const std::string dir : {"tokenizer", "tokenizer_bytes"}) {
    SCOPED_TRACE(dir);
    auto tok = Tokenizer::load(test::data_dir() + "/" + dir + "/tokenizer.model");
    ASSERT_TRUE(tok.ok()) << tok.status().to_string();
    const std::string fffd = "\xEF\xBF\xBD";
    int split_characters = 0;  // prefixes whose decode ends inside a character
    const nlohmann::json ref = reference(dir);  // held: a loop over a temporary's member dangles
    for (const auto& c : ref["cases"]) {
      StreamingDecoder stream(**tok);
      const auto ids = c["ids"].get<std::vector<int64_t>>();
      const auto prefixes = c["prefixes"].get<std::vector<std::string>>();
      std::string joined;
      for (size_t k = 0; k < ids.size(); ++k) {
        auto piece = stream.push(ids[k]);
        ASSERT_TRUE(piece.ok()) << piece.status().to_string();
        EXPECT_EQ(piece->find(fffd), std::string::npos) << "piece " << k << " of '" << c["text"] << "'";
        joined += *piece;
        std::string want = prefixes[k];
        if (want.size() >= 3 && want.compare(want.size() - 3, 3, fffd) == 0) ++split_characters;
        while (want.size() >= 3 && want.compare(want.size() - 3, 3, fffd) == 0) want.resize(want.size() - 3);
        EXPECT_EQ(joined, want) << "after token " << k << " of '" << c["text"] << "'";
      }
      auto rest = stream.finish();
      ASSERT_TRUE(rest.ok()) << rest.status().to_string();
      EXPECT_EQ(joined + *rest, c["decoded"].get<std::string>());
      EXPECT_EQ(stream.emitted(), c["decoded"].get<std::string>());
    }
    // The byte-fallback model does split characters (else this test would not test it).
    if (dir == "tokenizer_bytes") {
      EXPECT_GT(split_characters, 0);
    }
  }
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer/tokenizer.model");
  ASSERT_TRUE(tok.ok());
  StreamingDecoder stream(**tok);
  auto bad = stream.push((*tok)->vocab_size());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside the tokenizer's vocabulary"), std::string::npos);
  EXPECT_TRUE(stream.ids().empty());
}

TEST(Tokenizer, BadFilesAndIdsAreErrorsNamingThem) {
  auto missing = Tokenizer::load(test::data_dir() + "/tokenizer/no-such.model");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no-such.model: no such file"), std::string::npos)
      << missing.status().to_string();
  // A file that is not a SentencePiece model (the reference JSON).
  auto not_model = Tokenizer::load(test::data_dir() + "/tokenizer/reference.json");
  ASSERT_FALSE(not_model.ok());
  EXPECT_NE(not_model.status().message().find("is not a SentencePiece model"), std::string::npos)
      << not_model.status().to_string();
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto bad = (*tok)->decode({3, (*tok)->vocab_size(), 4});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("outside the tokenizer's vocabulary"), std::string::npos);
  EXPECT_FALSE((*tok)->decode({-1}).ok());
}

}  // namespace
}  // namespace kiln::llm
