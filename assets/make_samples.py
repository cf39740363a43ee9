#!/usr/bin/python3
"""Renders the OCR sample images of the README and their expected text.

Usage: assets/make_samples.py            (rewrites the files below, next to this script)

  ocr_english.png       a four-line shop receipt, DejaVu Sans 28 px
  ocr_chinese.png       three Chinese lines with numbers, Noto Sans CJK SC 34 px
  ocr_upside_down.png   one English line turned by 180 degrees, DejaVu Sans 32 px
  ocr_samples.json      {"images": [{"file": "ocr_english.png", "lines": [...]}, ...]}, the
                        schema of bench/ocr/ground_truth.json, "file" relative to assets/

Tests run PP-OCRv4 on these and compare the exact text (white space removed, since the Chinese
recogniser may drop the spaces between English words), so the images are made easy on purpose:
black on white, big type, 40 px margins, a blank gap of a full font size between lines, and no
characters the recogniser is known to confuse in sans-serif type: no lower-case l, capital I or
digit 1 (one vertical bar each), no capital O next to a zero, no hyphens in Chinese lines
(read as the character for one), no commas (ASCII or full width both come back).

Deterministic: Pillow draws the same pixels for the same fonts, and PNG has no time stamp.
Saved as 8-bit greyscale PNGs (a few KB each); any decoder reads them as RGB too.
Needs python3-pil and the Debian font packages fonts-dejavu-core and fonts-noto-cjk.
"""

import glob
import json
import os
import sys

from PIL import Image, ImageDraw, ImageFont

HERE = os.path.dirname(os.path.abspath(__file__))

SAMPLES = [
    # file, font key, size px, lines, turned upside down
    ("ocr_english.png", "dejavu_sans", 28,
     ["Green Market Receipt", "Coffee and bread 6.50", "Fresh juice 3.25", "Thank you for shopping"], False),
    ("ocr_chinese.png", "noto_sans_sc", 34,
     ["今天天气很好", "会议在3楼举行", "共有25人参加"], False),
    ("ocr_upside_down.png", "dejavu_sans", 32,
     ["Turn me the right way up"], True),
]

# key: (file name, face name inside a .ttc or None, Debian package)
FONTS = {
    "dejavu_sans": ("DejaVuSans.ttf", None, "fonts-dejavu-core"),
    "noto_sans_sc": ("NotoSansCJK-Regular.ttc", "Noto Sans CJK SC", "fonts-noto-cjk"),
}
MARGIN = 40


def load_font(key, size):
    file_name, face, package = FONTS[key]
    hits = sorted(glob.glob(os.path.join("/usr/share/fonts", "**", file_name), recursive=True))
    if not hits:
        sys.exit(f"make_samples.py: font file {file_name} not found; install the Debian package {package}")
    if face is None:
        return ImageFont.truetype(hits[0], size)
    # A .ttc holds several faces; pick the simplified Chinese one by name, not by position.
    for index in range(32):
        try:
            font = ImageFont.truetype(hits[0], size, index=index)
        except OSError:
            break
        if font.getname()[0] == face:
            return font
    sys.exit(f"make_samples.py: {hits[0]} has no face named '{face}'")


def render(lines, font):
    """Black text on white, left aligned, rows of ascent + descent plus one font size of gap."""
    ascent, descent = font.getmetrics()
    gap = font.size
    widths = [font.getbbox(t)[2] - font.getbbox(t)[0] for t in lines]
    width = max(widths) + 2 * MARGIN
    height = 2 * MARGIN + len(lines) * (ascent + descent) + (len(lines) - 1) * gap
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for i, text in enumerate(lines):
        baseline = MARGIN + i * (ascent + descent + gap) + ascent
        draw.text((MARGIN - font.getbbox(text)[0], baseline), text, font=font, fill=0, anchor="ls")
    return image


def main():
    entries = []
    for file_name, font_key, size, lines, upside_down in SAMPLES:
        image = render(lines, load_font(font_key, size))
        if upside_down:
            image = image.transpose(Image.ROTATE_180)
        image.save(os.path.join(HERE, file_name), "PNG", optimize=True)
        # An upside-down image of one line reads the same in any order; more lines would be
        # listed top to bottom as stored, i.e. reversed.
        entries.append({"file": file_name, "lines": lines[::-1] if upside_down else lines})
        print(f"{file_name}: {image.width}x{image.height}, "
              f"{os.path.getsize(os.path.join(HERE, file_name))} bytes")
    with open(os.path.join(HERE, "ocr_samples.json"), "w", encoding="utf-8") as f:
        json.dump({"images": entries}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
