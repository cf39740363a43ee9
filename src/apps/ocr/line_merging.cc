#include "apps/ocr/line_merging.h"

#include <algorithm>
#include <cmath>

namespace kiln::ocr {
namespace {

float top(const Quad& q) { return std::min(q[0].y, q[1].y); }
float bottom(const Quad& q) { return std::max(q[2].y, q[3].y); }
float height(const Quad& q) { return bottom(q) - top(q); }

// Recognised characters of UTF-8 text (code points but the spaces joins add), for the
// confidence weighting.
size_t code_points(const std::string& s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xc0) != 0x80 && c != ' '; }));
}

bool ascii_graphic(char c) { return c > ' ' && c < 0x7f; }

bool same_row_neighbours(const Quad& a, const Quad& b) {
  const float ha = height(a), hb = height(b);
  const float low = std::min(ha, hb), high = std::max(ha, hb);
  if (low <= 0 || high > 2 * low) return false;
  const float overlap = std::min(bottom(a), bottom(b)) - std::max(top(a), top(b));
  if (overlap < 0.5f * low) return false;
  const float gap = std::min(b[0].x, b[3].x) - std::max(a[1].x, a[2].x);
  return gap >= -0.5f * low && gap <= kMaxWordGapInHeights * low;
}

}  // namespace

std::vector<TextLine> merge_same_row_lines(std::vector<TextLine> lines) {
  std::vector<TextLine> merged;
  for (TextLine& line : lines) {
    if (!merged.empty() && same_row_neighbours(merged.back().box, line.box)) {
      TextLine& last = merged.back();
      const size_t n_last = code_points(last.text), n_line = code_points(line.text);
      const bool space = !last.text.empty() && !line.text.empty() && ascii_graphic(last.text.back()) &&
                         ascii_graphic(line.text.front());
      if (n_last + n_line > 0)
        last.confidence = (last.confidence * n_last + line.confidence * n_line) / static_cast<float>(n_last + n_line);
      last.text += (space ? " " : "") + line.text;
      last.box[1] = line.box[1];
      last.box[2] = line.box[2];
      continue;
    }
    merged.push_back(std::move(line));
  }
  return merged;
}

}  // namespace kiln::ocr
