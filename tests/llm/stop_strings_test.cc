// Text stop sequences (llm/stop_strings.h) against hand-computed expectations of OpenAI's
// semantics: the text before the earliest stop string and nothing after it, a stop string
// split over pieces, held-back text that turns out not to start one, and an empty stop string
// refused.
#include "llm/stop_strings.h"

#include <gtest/gtest.h>

namespace kiln::llm {
namespace {

// Pushes `pieces` and returns what is let out, joined, with "|" between the pushes' outputs
// (so the tests see what each push let out), and whether it stopped.
std::pair<std::string, bool> run(std::vector<std::string> stops, const std::vector<std::string>& pieces,
                                 bool finish = true) {
  auto m = StopStringMatcher::create(std::move(stops));
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  std::string out;
  bool stopped = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    StopStringMatcher::Step step = m->push(pieces[i]);
    out += (i ? "|" : "") + step.text;
    stopped = step.stopped;
  }
  if (finish && !stopped) out += "|" + m->finish();
  return {out, stopped};
}

TEST(StopStrings, WithoutStopStringsEveryPiecePasses) {
  EXPECT_EQ(run({}, {"a", "b c", ""}), std::make_pair(std::string("a|b c||"), false));
}

TEST(StopStrings, TheTextEndsBeforeTheStopStringWithinAPiece) {
  EXPECT_EQ(run({"END"}, {"abcENDxyz"}), std::make_pair(std::string("abc"), true));
  EXPECT_EQ(run({"\n"}, {"one", " line\nand more"}), std::make_pair(std::string("one| line"), true));
}

TEST(StopStrings, AStopStringSpanningPiecesIsHeldBackThenDropped) {
  // "E", "N", "D" arrive one by one: none is let out, then the match drops them all.
  EXPECT_EQ(run({"END"}, {"ab", "E", "N", "Dzz"}), std::make_pair(std::string("ab|||"), true));
}

TEST(StopStrings, HeldTextThatDoesNotCompleteAStopStringComesOutLater) {
  // "EN" might begin "END"; "ENx" cannot: all of it comes out with the "x".
  EXPECT_EQ(run({"END"}, {"ab", "EN", "x"}), std::make_pair(std::string("ab||ENx|"), false));
  // Held at the end of the sequence: finish lets it out.
  EXPECT_EQ(run({"END"}, {"abE", "N"}), std::make_pair(std::string("ab||EN"), false));
  // Only the longest suffix that begins a stop string is held: "aaa" + "b" with stop "aab".
  EXPECT_EQ(run({"aab"}, {"aaa", "c"}), std::make_pair(std::string("a|aac|"), false));
  EXPECT_EQ(run({"aab"}, {"aaa", "b"}), std::make_pair(std::string("a|"), true));
}

TEST(StopStrings, TheEarliestOfSeveralStopStringsWins) {
  // "ef" starts before "cdefg" ends, but "cd" starts earlier: the text before "cd".
  EXPECT_EQ(run({"ef", "cd"}, {"abcdef"}), std::make_pair(std::string("ab"), true));
  // A longer stop string that is still open does not hold back a shorter one's match.
  EXPECT_EQ(run({"xyz!", "y"}, {"axy"}), std::make_pair(std::string("ax"), true));
}

TEST(StopStrings, MultiByteCharactersAreHeldWhole) {
  // Stop "東京": "東" is held (it begins the stop string), "東西" lets both out.
  EXPECT_EQ(run({"\xE6\x9D\xB1\xE4\xBA\xAC"}, {"a\xE6\x9D\xB1", "\xE8\xA5\xBF"}),
            std::make_pair(std::string("a|\xE6\x9D\xB1\xE8\xA5\xBF|"), false));
  EXPECT_EQ(run({"\xE6\x9D\xB1\xE4\xBA\xAC"}, {"a\xE6\x9D\xB1", "\xE4\xBA\xAC!"}), std::make_pair(std::string("a|"), true));
}

TEST(StopStrings, AfterAStopNothingMoreComesOut) {
  auto m = StopStringMatcher::create({"."});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->push("Hi. There").text, "Hi");
  EXPECT_TRUE(m->stopped());
  EXPECT_EQ(m->matched(), ".");
  StopStringMatcher::Step later = m->push("more");
  EXPECT_EQ(later.text, "");
  EXPECT_TRUE(later.stopped);
  EXPECT_EQ(m->finish(), "");
}

TEST(StopStrings, AnEmptyStopStringIsAnErrorNamingIt) {
  auto m = StopStringMatcher::create({"a", ""});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("stop string 1 is empty"), std::string::npos) << m.status().to_string();
}

}  // namespace
}  // namespace kiln::llm
