// Joining the boxes of one text line. PaddleOCR's detector splits a line at word gaps that
// are wide for the text's height (large monospaced type: "Room the move" at 60 px comes out
// as three boxes), and PaddleOCR returns those pieces as they are. Kiln joins neighbours in
// reading order that sit on the same row (their vertical extents overlap by at least half the
// smaller height, heights within a factor of two) with a gap of at most 1.2 times the smaller
// height: word gaps measure 0.6-0.7 times the box height, while the columns of a receipt or
// a table stand 3 or more heights apart and stay separate lines.
#pragma once

#include <vector>

#include "apps/ocr/text_line.h"

namespace kiln::ocr {

inline constexpr float kMaxWordGapInHeights = 1.2f;

// `lines` in reading order (sorted_boxes'); returns them with same-row neighbours joined: the
// texts with a space between two ASCII characters and none otherwise (CJK), the confidence
// the mean over the characters, the box from the first's left edge to the last's right edge.
std::vector<TextLine> merge_same_row_lines(std::vector<TextLine> lines);

}  // namespace kiln::ocr
