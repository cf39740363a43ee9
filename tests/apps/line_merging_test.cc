// merge_same_row_lines on boxes measured from PP-OCRv4 det output (the word boxes of a 60-px
// monospaced line; receipt rows with item and price three or more heights apart), with the
// joined texts, boxes and confidences worked out by hand.
#include <gtest/gtest.h>

#include "apps/ocr/line_merging.h"

namespace kiln::ocr {
namespace {

TextLine line(const char* text, float confidence, float x0, float y0, float x1, float y1) {
  TextLine l;
  l.text = text;
  l.confidence = confidence;
  l.box = {cv::Point2f(x0, y0), cv::Point2f(x1, y0), cv::Point2f(x1, y1), cv::Point2f(x0, y1)};
  return l;
}

TEST(LineMerging, JoinsWordBoxesOfOneLine) {
  // "Room the move": boxes 50, 50 and 41 px high, gaps 32 and 28 px.
  std::vector<TextLine> in = {line("Room", 1.0f, 60, 40, 220, 90), line("the", 0.9f, 252, 40, 360, 90),
                              line("move", 0.8f, 388, 47, 560, 88)};
  std::vector<TextLine> out = merge_same_row_lines(in);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "Room the move");
  EXPECT_NEAR(out[0].confidence, (4 * 1.0f + 3 * 0.9f + 4 * 0.8f) / 11, 1e-6);
  EXPECT_EQ(out[0].box[0], cv::Point2f(60, 40));
  EXPECT_EQ(out[0].box[1], cv::Point2f(560, 47));
  EXPECT_EQ(out[0].box[2], cv::Point2f(560, 88));
  EXPECT_EQ(out[0].box[3], cv::Point2f(60, 90));
}

TEST(LineMerging, KeepsColumnsApart) {
  // A receipt row: "Muffin" and "$22.50", 31 px high, 202 px apart (6.5 heights).
  std::vector<TextLine> in = {line("Muffin", 0.99f, 40, 100, 160, 131), line("$22.50", 0.98f, 362, 100, 470, 131)};
  std::vector<TextLine> out = merge_same_row_lines(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "Muffin");
  EXPECT_EQ(out[1].text, "$22.50");
}

TEST(LineMerging, KeepsRowsApartAndJoinsCjkWithoutSpace) {
  // Two rows 60 px apart; on the second, two CJK boxes 10 px apart.
  std::vector<TextLine> in = {line("Title", 0.9f, 10, 10, 200, 50), line("今天", 0.9f, 10, 70, 100, 110),
                              line("天气", 0.9f, 110, 70, 200, 110)};
  std::vector<TextLine> out = merge_same_row_lines(in);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].text, "Title");
  EXPECT_EQ(out[1].text, "今天天气");
}

TEST(LineMerging, DifferentHeightsStaySeparate) {
  // A heading three times the height of the small print beside it.
  std::vector<TextLine> in = {line("BIG", 0.9f, 10, 10, 200, 100), line("small", 0.9f, 210, 60, 300, 90)};
  EXPECT_EQ(merge_same_row_lines(in).size(), 2u);
}

}  // namespace
}  // namespace kiln::ocr
