// Tests of ImageDecoder on small images of every supported format; the images were
// encoded by Pillow and the expected pixels are Pillow's decoding of them (RGB, and
// convert("L") for grayscale), as the ONNX reference implementation does.
#include "tensor_ops_test_util.h"

namespace kiln::ops {
namespace {

using namespace kiln::ops::testing;

// A 3 x 2 RGB image of random pixels in each format (JPEG at quality 90, WebP lossless).
// png: 86 bytes
const std::vector<uint8_t> kPng = {
    137, 80,  78, 71, 13,  10,  26,  10,  0,   0,   0,   13,  73,  72,  68, 82,  0,   0,
    0,   3,   0,  0,  0,   2,   8,   2,   0,   0,   0,   18,  22,  241, 77, 0,   0,   0,
    29,  73,  68, 65, 84,  120, 156, 99,  200, 154, 241, 179, 121, 199, 9,  6,   209, 191,
    44,  154, 70, 69, 105, 247, 229, 133, 146, 238, 1,   0,   92,  72,  8,  152, 18,  74,
    73,  87,  0,  0,  0,   0,   73,  69,  78,  68,  174, 66,  96,  130};
const std::vector<double> kPngRgb = {106, 152, 249, 131, 184, 200, 0,   21,  253,
                                     147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kPngGray = {149, 170, 41, 175, 189, 133};
// bmp: 78 bytes
const std::vector<uint8_t> kBmp = {
    66,  77,  78,  0,  0, 0, 0,   0,   0,   0,   54,  0,   0,   0,  40,  0,   0,   0,   3,   0,
    0,   0,   2,   0,  0, 0, 1,   0,   24,  0,   0,   0,   0,   0,  24,  0,   0,   0,   196, 14,
    0,   0,   196, 14, 0, 0, 0,   0,   0,   0,   0,   0,   0,   0,  107, 202, 147, 138, 169, 249,
    166, 119, 149, 0,  0, 0, 249, 152, 106, 200, 184, 131, 253, 21, 0,   0,   0,   0};
const std::vector<double> kBmpRgb = {106, 152, 249, 131, 184, 200, 0,   21,  253,
                                     147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kBmpGray = {149, 170, 41, 175, 189, 133};
// ppm: 29 bytes
const std::vector<uint8_t> kPpm = {80,  54,  10,  51,  32,  50,  10,  50,  53, 53,
                                   10,  106, 152, 249, 131, 184, 200, 0,   21, 253,
                                   147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kPpmRgb = {106, 152, 249, 131, 184, 200, 0,   21,  253,
                                     147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kPpmGray = {149, 170, 41, 175, 189, 133};
// tiff: 158 bytes
const std::vector<uint8_t> kTiff = {
    73,  73,  42,  0,   8,   0,   0,  0,  10,  0,   0,   1,   4,   0,   1,   0,   0,   0,  3,   0,
    0,   0,   1,   1,   4,   0,   1,  0,  0,   0,   2,   0,   0,   0,   2,   1,   3,   0,  3,   0,
    0,   0,   134, 0,   0,   0,   3,  1,  3,   0,   1,   0,   0,   0,   1,   0,   0,   0,  6,   1,
    3,   0,   1,   0,   0,   0,   2,  0,  0,   0,   17,  1,   4,   0,   1,   0,   0,   0,  140, 0,
    0,   0,   21,  1,   3,   0,   1,  0,  0,   0,   3,   0,   0,   0,   22,  1,   4,   0,  1,   0,
    0,   0,   2,   0,   0,   0,   23, 1,  4,   0,   1,   0,   0,   0,   18,  0,   0,   0,  28,  1,
    3,   0,   1,   0,   0,   0,   1,  0,  0,   0,   0,   0,   0,   0,   8,   0,   8,   0,  8,   0,
    106, 152, 249, 131, 184, 200, 0,  21, 253, 147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kTiffRgb = {106, 152, 249, 131, 184, 200, 0,   21,  253,
                                      147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kTiffGray = {149, 170, 41, 175, 189, 133};
// webp: 82 bytes
const std::vector<uint8_t> kWebp = {
    82,  73,  70,  70,  74,  0,   0,   0,   87,  69, 66,  80, 86,  80, 56,  76,  62,
    0,   0,   0,   47,  2,   64,  0,   0,   47,  64, 16,  64, 66,  17, 64,  206, 251,
    61,  193, 60,  68,  2,   36,  252, 225, 177, 7,  173, 86, 27,  65, 182, 13,  211,
    128, 134, 116, 148, 67,  29,  228, 201, 252, 7,  124, 30, 102, 62, 173, 168, 5,
    133, 108, 35,  192, 161, 123, 5,   142, 229, 34, 250, 31, 199, 10};
const std::vector<double> kWebpRgb = {106, 152, 249, 131, 184, 200, 0,   21,  253,
                                      147, 202, 107, 249, 169, 138, 149, 119, 166};
const std::vector<double> kWebpGray = {149, 170, 41, 175, 189, 133};
// jpeg: 674 bytes
const std::vector<uint8_t> kJpeg = {
    255, 216, 255, 224, 0,   16,  74,  70,  73,  70,  0,   1,   1,   0,   0,   1,   0,   1,   0,
    0,   255, 219, 0,   67,  0,   3,   2,   2,   3,   2,   2,   3,   3,   3,   3,   4,   3,   3,
    4,   5,   8,   5,   5,   4,   4,   5,   10,  7,   7,   6,   8,   12,  10,  12,  12,  11,  10,
    11,  11,  13,  14,  18,  16,  13,  14,  17,  14,  11,  11,  16,  22,  16,  17,  19,  20,  21,
    21,  21,  12,  15,  23,  24,  22,  20,  24,  18,  20,  21,  20,  255, 219, 0,   67,  1,   3,
    4,   4,   5,   4,   5,   9,   5,   5,   9,   20,  13,  11,  13,  20,  20,  20,  20,  20,  20,
    20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,
    20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,  20,
    20,  20,  20,  20,  20,  20,  255, 192, 0,   17,  8,   0,   2,   0,   3,   3,   1,   34,  0,
    2,   17,  1,   3,   17,  1,   255, 196, 0,   31,  0,   0,   1,   5,   1,   1,   1,   1,   1,
    1,   0,   0,   0,   0,   0,   0,   0,   0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,
    11,  255, 196, 0,   181, 16,  0,   2,   1,   3,   3,   2,   4,   3,   5,   5,   4,   4,   0,
    0,   1,   125, 1,   2,   3,   0,   4,   17,  5,   18,  33,  49,  65,  6,   19,  81,  97,  7,
    34,  113, 20,  50,  129, 145, 161, 8,   35,  66,  177, 193, 21,  82,  209, 240, 36,  51,  98,
    114, 130, 9,   10,  22,  23,  24,  25,  26,  37,  38,  39,  40,  41,  42,  52,  53,  54,  55,
    56,  57,  58,  67,  68,  69,  70,  71,  72,  73,  74,  83,  84,  85,  86,  87,  88,  89,  90,
    99,  100, 101, 102, 103, 104, 105, 106, 115, 116, 117, 118, 119, 120, 121, 122, 131, 132, 133,
    134, 135, 136, 137, 138, 146, 147, 148, 149, 150, 151, 152, 153, 154, 162, 163, 164, 165, 166,
    167, 168, 169, 170, 178, 179, 180, 181, 182, 183, 184, 185, 186, 194, 195, 196, 197, 198, 199,
    200, 201, 202, 210, 211, 212, 213, 214, 215, 216, 217, 218, 225, 226, 227, 228, 229, 230, 231,
    232, 233, 234, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 255, 196, 0,   31,  1,   0,
    3,   1,   1,   1,   1,   1,   1,   1,   1,   1,   0,   0,   0,   0,   0,   0,   1,   2,   3,
    4,   5,   6,   7,   8,   9,   10,  11,  255, 196, 0,   181, 17,  0,   2,   1,   2,   4,   4,
    3,   4,   7,   5,   4,   4,   0,   1,   2,   119, 0,   1,   2,   3,   17,  4,   5,   33,  49,
    6,   18,  65,  81,  7,   97,  113, 19,  34,  50,  129, 8,   20,  66,  145, 161, 177, 193, 9,
    35,  51,  82,  240, 21,  98,  114, 209, 10,  22,  36,  52,  225, 37,  241, 23,  24,  25,  26,
    38,  39,  40,  41,  42,  53,  54,  55,  56,  57,  58,  67,  68,  69,  70,  71,  72,  73,  74,
    83,  84,  85,  86,  87,  88,  89,  90,  99,  100, 101, 102, 103, 104, 105, 106, 115, 116, 117,
    118, 119, 120, 121, 122, 130, 131, 132, 133, 134, 135, 136, 137, 138, 146, 147, 148, 149, 150,
    151, 152, 153, 154, 162, 163, 164, 165, 166, 167, 168, 169, 170, 178, 179, 180, 181, 182, 183,
    184, 185, 186, 194, 195, 196, 197, 198, 199, 200, 201, 202, 210, 211, 212, 213, 214, 215, 216,
    217, 218, 226, 227, 228, 229, 230, 231, 232, 233, 234, 242, 243, 244, 245, 246, 247, 248, 249,
    250, 255, 218, 0,   12,  3,   1,   0,   2,   17,  3,   17,  0,   63,  0,   213, 248, 147, 224,
    191, 15,  95,  248, 206, 250, 123, 173, 11,  76,  185, 157, 210, 29,  210, 205, 103, 27,  49,
    196, 40,  6,   73,  25,  232, 0,   162, 138, 43,  250, 135, 39,  255, 0,   145, 110, 27,  252,
    16,  255, 0,   210, 81,  227, 159, 255, 217};
const std::vector<double> kJpegRgb = {138, 157, 151, 153, 172, 166, 28,  24,  163,
                                      159, 178, 172, 186, 205, 199, 109, 105, 244};
const std::vector<double> kJpegGray = {151, 166, 41, 172, 199, 122};

Tensor bytes(const std::vector<uint8_t>& v) { return Tensor::from_vector<uint8_t>(v); }

void expect_decodes(const std::vector<uint8_t>& data, const std::vector<double>& rgb,
                    const std::vector<double>& gray) {
  expect_tensor(run1("ImageDecoder", 20, {bytes(data)}), {2, 3, 3}, rgb, 0, 0);
  std::vector<double> bgr = rgb;
  for (size_t i = 0; i + 2 < bgr.size(); i += 3) std::swap(bgr[i], bgr[i + 2]);
  expect_tensor(run1("ImageDecoder", 20, {bytes(data)}, {{"pixel_format", attr_s("BGR")}}),
                {2, 3, 3}, bgr, 0, 0);
  expect_tensor(run1("ImageDecoder", 20, {bytes(data)}, {{"pixel_format", attr_s("Grayscale")}}),
                {2, 3, 1}, gray, 0, 0);
}

TEST(ImageDecoderTest, Png) { expect_decodes(kPng, kPngRgb, kPngGray); }
TEST(ImageDecoderTest, Bmp) { expect_decodes(kBmp, kBmpRgb, kBmpGray); }
TEST(ImageDecoderTest, Ppm) { expect_decodes(kPpm, kPpmRgb, kPpmGray); }
TEST(ImageDecoderTest, Tiff) { expect_decodes(kTiff, kTiffRgb, kTiffGray); }
TEST(ImageDecoderTest, WebpLossless) { expect_decodes(kWebp, kWebpRgb, kWebpGray); }
TEST(ImageDecoderTest, Jpeg) { expect_decodes(kJpeg, kJpegRgb, kJpegGray); }

TEST(ImageDecoderTest, BadDataIsAnErrorNotACrash) {
  EXPECT_NE(run_error("ImageDecoder", 20, {bytes({1, 2, 3, 4})}).find("unknown image format"),
            std::string::npos);
  // Every format cut short at many lengths, and with bytes flipped: whatever the decoder
  // makes of it, never a crash (the truncated pixel data of these small images is an error).
  for (const auto* data : {&kPng, &kBmp, &kPpm, &kTiff, &kWebp, &kJpeg}) {
    for (size_t n = 1; n < data->size(); n += 3) {
      std::vector<uint8_t> cut(data->begin(), data->begin() + static_cast<std::ptrdiff_t>(n));
      (void)run_error("ImageDecoder", 20, {bytes(cut)});
    }
    for (size_t i = 0; i < data->size(); i += 5) {
      std::vector<uint8_t> flipped = *data;
      flipped[i] ^= 0xA5;
      (void)run_error("ImageDecoder", 20, {bytes(flipped)});
    }
    std::vector<uint8_t> half(data->begin(),
                              data->begin() + static_cast<std::ptrdiff_t>(data->size() / 2));
    EXPECT_FALSE(run_error("ImageDecoder", 20, {bytes(half)}).empty());
  }
  EXPECT_NE(run_error("ImageDecoder", 20, {bytes(kPng)}, {{"pixel_format", attr_s("RGBA")}})
                .find("pixel_format"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln::ops
