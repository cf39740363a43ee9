// Tests of StringNormalizer, StringSplit, StringConcat, RegexFullMatch and TfIdfVectorizer;
// expected values from Python's str methods, the re module and the ONNX node test data.
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

ir::Attribute attr_strs(std::vector<std::string> v) {
  ir::Attribute a;
  a.kind = ir::AttrKind::kStrings;
  a.strings = std::move(v);
  return a;
}

TEST(StringOpsTest, NormalizerFiltersStopwordsAndChangesCase) {
  Tensor x = strs({1, 6}, {"Monday", "tuesday", "wednesday", "Monday", "tuesday", "wednesday"});
  Tensor y = run1("StringNormalizer", 10, {x},
                  {{"case_change_action", attr_s("UPPER")}, {"stopwords", attr_strs({"monday"})}});
  EXPECT_EQ(y.dims(), (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(str_values(y),
            (std::vector<std::string>{"TUESDAY", "WEDNESDAY", "TUESDAY", "WEDNESDAY"}));
  // Case-sensitive: "Monday" is not the stopword "monday".
  Tensor z = run1("StringNormalizer", 10, {strs({2}, {"Monday", "monday"})},
                  {{"is_case_sensitive", attr_i(1)}, {"stopwords", attr_strs({"monday"})}});
  EXPECT_EQ(str_values(z), (std::vector<std::string>{"Monday"}));
  // All filtered: one empty string.
  Tensor e = run1("StringNormalizer", 10, {strs({2}, {"monday", "monday"})},
                  {{"stopwords", attr_strs({"monday"})}});
  EXPECT_EQ(e.dims(), (std::vector<int64_t>{1}));
  EXPECT_EQ(str_values(e), (std::vector<std::string>{""}));
  EXPECT_NE(run_error("StringNormalizer", 10, {strs({2, 2}, {"a", "b", "c", "d"})}).find("[1, C]"),
            std::string::npos);
}

// Beyond ASCII, as Python's str.lower/upper: "Été Straße ΑΘΉΝΑ" -> "été straße αθήνα"
// (one code point to one, as ONNX Runtime's towlower: "ß" stays); invalid UTF-8 bytes pass through.
TEST(StringOpsTest, NormalizerChangesCaseOfUnicodeText) {
  Tensor lower = run1("StringNormalizer", 10, {strs({3}, {"Été Straße", "ΑΘΉΝΑ", "A\xff\xc3" "B"})},
                      {{"case_change_action", attr_s("LOWER")}});
  EXPECT_EQ(str_values(lower), (std::vector<std::string>{"été straße", "αθήνα", "a\xff\xc3" "b"}));
  Tensor upper = run1("StringNormalizer", 10, {strs({2}, {"été", "ǆ ñ"})}, {{"case_change_action", attr_s("UPPER")}});
  EXPECT_EQ(str_values(upper), (std::vector<std::string>{"ÉTÉ", "Ǆ Ñ"}));
  // Stopwords match without case beyond ASCII too.
  Tensor kept = run1("StringNormalizer", 10, {strs({2}, {"ÉTÉ", "hiver"})}, {{"stopwords", attr_strs({"été"})}});
  EXPECT_EQ(str_values(kept), (std::vector<std::string>{"hiver"}));
}

TEST(StringOpsTest, SplitFollowsPythonStrSplit) {
  auto r = run_op("StringSplit", 20, {strs({2}, {"o-n-n--x-", "o-n----nx"})},
                  {{"delimiter", attr_s("-")}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(str_values((*r)[0]),
            (std::vector<std::string>{"o", "n", "n", "", "x", "", "o", "n", "", "", "", "nx"}));
  EXPECT_EQ(int_values((*r)[1]), (std::vector<int64_t>{6, 6}));
  // No delimiter: runs of whitespace, with maxsplit 2 the rest stays whole.
  r = run_op("StringSplit", 20, {strs({2}, {"  hello   world !", "the quick brown fox"})},
             {{"maxsplit", attr_i(2)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(str_values((*r)[0]),
            (std::vector<std::string>{"hello", "world", "!", "the", "quick", "brown fox"}));
  // An empty input gives [0, 0].
  r = run_op("StringSplit", 20, {strs({0}, {})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].dims(), (std::vector<int64_t>{0, 0}));
}

TEST(StringOpsTest, ConcatBroadcasts) {
  Tensor y = run1("StringConcat", 20, {strs({3}, {"cat", "dog", "的"}), strs({1}, {"s"})});
  EXPECT_EQ(str_values(y), (std::vector<std::string>{"cats", "dogs", "的s"}));
  EXPECT_NE(run_error("StringConcat", 20, {strs({3}, {"a", "b", "c"}), strs({2}, {"x", "y"})})
                .find("broadcast"),
            std::string::npos);
}

TEST(StringOpsTest, RegexFullMatch) {
  Tensor x =
      strs({2, 2}, {"account@gmail.com", "account@hotmail.com", "not email", "account2@yahoo.com"});
  Tensor y = run1("RegexFullMatch", 20, {x},
                  {{"pattern", attr_s(R"((\W|^)[\w.\-]{0,25}@(yahoo|gmail)\.com(\W|$))")}});
  EXPECT_EQ(y.dtype(), DataType::kBool);
  EXPECT_EQ(int_values(y), (std::vector<int64_t>{1, 0, 0, 1}));
  // Full match, not search: "www.bbc.co.uk" does not end in .com.
  Tensor z = run1("RegexFullMatch", 20, {strs({2}, {"www.google.com", "www.bbc.co.uk"})},
                  {{"pattern", attr_s(R"(www\.[\w.-]+\.\bcom\b)")}});
  EXPECT_EQ(int_values(z), (std::vector<int64_t>{1, 0}));
  EXPECT_NE(run_error("RegexFullMatch", 20, {x}, {{"pattern", attr_s("(unclosed")}}).find("RE2"),
            std::string::npos);
}

ir::AttributeMap tfidf_attrs(int64_t min_gram, int64_t max_skip, std::string mode = "TF") {
  return {{"max_gram_length", attr_i(2)},
          {"min_gram_length", attr_i(min_gram)},
          {"max_skip_count", attr_i(max_skip)},
          {"mode", attr_s(std::move(mode))},
          {"ngram_counts", attr_ints({0, 4})},
          {"ngram_indexes", attr_ints({0, 1, 2, 3, 4, 5, 6})},
          {"pool_int64s", attr_ints({2, 3, 5, 4, 5, 6, 7, 8, 6, 7})}};
}

TEST(StringOpsTest, TfIdfCountsNgramsWithSkips) {
  // The ONNX node tests tfidfvectorizer_tf_uniandbigrams_skip5 and _batch_onlybigrams_skip0.
  Tensor x = make<int32_t>({12}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  expect_tensor(run1("TfIdfVectorizer", 9, {x}, tfidf_attrs(1, 5)), {7}, {0, 3, 1, 0, 1, 3, 1}, 0,
                0);
  Tensor b = make<int32_t>({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8});
  expect_tensor(run1("TfIdfVectorizer", 9, {b}, tfidf_attrs(2, 0)), {2, 7},
                {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}, 0, 0);
  // IDF with weights: every present n-gram gets its weight.
  ir::AttributeMap a = tfidf_attrs(1, 5, "TFIDF");
  a["weights"] = ir::Attribute::from_floats({1, 2, 3, 4, 5, 6, 7});
  expect_tensor(run1("TfIdfVectorizer", 9, {x}, a), {7}, {0, 6, 3, 0, 5, 18, 7}, 0, 0);
  ir::AttributeMap bad = tfidf_attrs(1, 5);
  bad["ngram_counts"] = attr_ints({0, 3});
  EXPECT_NE(run_error("TfIdfVectorizer", 9, {x}, bad).find("ngram_counts"), std::string::npos);
}

}  // namespace
}  // namespace kiln::ops
