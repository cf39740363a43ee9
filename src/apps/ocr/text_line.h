// One recognised line of text: what the OCR pipeline returns.
#pragma once

#include <string>

#include "apps/ocr/text_detection.h"

namespace kiln::ocr {

struct TextLine {
  std::string text;  // UTF-8
  float confidence = 0;
  Quad box;          // clockwise from the top-left, original-image pixels
};

}  // namespace kiln::ocr
