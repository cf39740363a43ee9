// The SentencePiece tokenizer (llm/tokenizer.h) against the SentencePiece library's Python
// binding on the same model (make_test_data.py's tokenizer/): the same ids for each test
// string, the same text back. This binary links libprotobuf (through the compiler), so a
// load that works here is also the check that the shim's own protobuf copy stays apart.
#include "llm/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llm_test_data.h"

namespace kiln::llm {
namespace {

nlohmann::json reference() {
  std::ifstream in(test::data_dir() + "/tokenizer/reference.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

TEST(Tokenizer, EncodesAndDecodesAsSentencePiecesOwnBinding) {
  auto tok = Tokenizer::load(test::data_dir() + "/tokenizer/tokenizer.model");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const nlohmann::json ref = reference();
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
