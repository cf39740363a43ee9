#include "apps/ocr/image_io.h"

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

namespace kiln::ocr {
namespace {

enum class Format { kPng, kJpeg, kOther };

bool starts_with(const uint8_t* data, size_t size, const char* magic, size_t n) {
  return size >= n && std::memcmp(data, magic, n) == 0;
}

// The formats OpenCV's imgcodecs reads, by their signatures.
std::optional<Format> sniff(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "\x89PNG\r\n\x1a\n", 8)) return Format::kPng;
  if (starts_with(data, size, "\xff\xd8\xff", 3)) return Format::kJpeg;
  if (starts_with(data, size, "BM", 2) || starts_with(data, size, "II*\0", 4) ||
      starts_with(data, size, "MM\0*", 4) || (starts_with(data, size, "RIFF", 4) && size >= 12 &&
                                               std::memcmp(data + 8, "WEBP", 4) == 0) ||
      starts_with(data, size, "P1", 2) || starts_with(data, size, "P2", 2) || starts_with(data, size, "P3", 2) ||
      starts_with(data, size, "P4", 2) || starts_with(data, size, "P5", 2) || starts_with(data, size, "P6", 2))
    return Format::kOther;
  return std::nullopt;
}

uint32_t be32(const uint8_t* p) { return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]; }
uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }

// A PNG ends with its IEND chunk; a file cut anywhere before lacks it.
bool png_complete(const uint8_t* data, size_t size) {
  static const uint8_t kIend[] = {0, 0, 0, 0, 'I', 'E', 'N', 'D', 0xae, 0x42, 0x60, 0x82};
  // Tolerate trailing bytes after IEND (some writers pad): search the tail.
  size_t from = size > 4096 ? size - 4096 : 0;
  for (size_t i = size >= sizeof(kIend) ? size - sizeof(kIend) + 1 : 0; i-- > from;)
    if (std::memcmp(data + i, kIend, sizeof(kIend)) == 0) return true;
  return false;
}

// A JPEG ends with the EOI marker (FF D9); allow trailing bytes after it.
bool jpeg_complete(const uint8_t* data, size_t size) {
  size_t from = size > 4096 ? size - 4096 : 2;
  for (size_t i = size - 1; i > from; --i)
    if (data[i - 1] == 0xff && data[i] == 0xd9) return true;
  return false;
}

// Width and height from the header, when the format is one we read headers of.
std::optional<std::pair<int64_t, int64_t>> header_size(Format format, const uint8_t* data, size_t size) {
  if (format == Format::kPng) {
    if (size < 24 || std::memcmp(data + 12, "IHDR", 4) != 0) return std::nullopt;
    return std::make_pair(int64_t{be32(data + 16)}, int64_t{be32(data + 20)});
  }
  if (format == Format::kJpeg) {
    // Walk the marker segments to the first start-of-frame (SOF0..SOF15 but DHT, JPG, DAC).
    size_t pos = 2;
    while (pos + 4 <= size) {
      if (data[pos] != 0xff) return std::nullopt;
      uint8_t marker = data[pos + 1];
      if (marker == 0xff) { ++pos; continue; }
      uint16_t length = be16(data + pos + 2);
      bool sof = marker >= 0xc0 && marker <= 0xcf && marker != 0xc4 && marker != 0xc8 && marker != 0xcc;
      if (sof) {
        if (pos + 9 > size) return std::nullopt;
        return std::make_pair(int64_t{be16(data + pos + 7)}, int64_t{be16(data + pos + 5)});
      }
      pos += 2 + length;
    }
  }
  return std::nullopt;
}

}  // namespace

Expected<DecodedImage> decode_image(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) return invalid_argument("%s: empty file", name.c_str());
  std::optional<Format> format = sniff(data, size);
  if (!format) return invalid_argument("%s: not an image (not PNG, JPEG, BMP, TIFF, WebP or PNM)", name.c_str());
  if (*format == Format::kPng && !png_complete(data, size))
    return data_loss("%s: truncated PNG (%zu bytes, no IEND chunk)", name.c_str(), size);
  if (*format == Format::kJpeg && !jpeg_complete(data, size))
    return data_loss("%s: truncated JPEG (%zu bytes, no end-of-image marker)", name.c_str(), size);

  DecodedImage image;
  int flags = cv::IMREAD_COLOR;
  if (auto dims = header_size(*format, data, size)) {
    auto [w, h] = *dims;
    if (w <= 0 || h <= 0) return invalid_argument("%s: image header gives %lldx%lld pixels", name.c_str(),
                                                  static_cast<long long>(w), static_cast<long long>(h));
    if (w * h > kMaxImagePixels)
      return invalid_argument("%s: image is %lldx%lld pixels, more than the %lld-megapixel limit; downscale it first",
                              name.c_str(), static_cast<long long>(w), static_cast<long long>(h),
                              static_cast<long long>(kMaxImagePixels >> 20));
    while (w * h / (int64_t{image.scale_down} * image.scale_down) > kDownscalePixels && image.scale_down < 8)
      image.scale_down *= 2;
    if (image.scale_down == 2) flags = cv::IMREAD_REDUCED_COLOR_2;
    if (image.scale_down == 4) flags = cv::IMREAD_REDUCED_COLOR_4;
    if (image.scale_down == 8) flags = cv::IMREAD_REDUCED_COLOR_8;
    image.original_width = static_cast<int>(w);
    image.original_height = static_cast<int>(h);
    if (image.scale_down > 1)
      image.note = str_format("%s: image is %lldx%lld pixels; decoded at 1/%d scale (boxes are in original pixels)",
                              name.c_str(), static_cast<long long>(w), static_cast<long long>(h), image.scale_down);
  }
  cv::Mat buffer(1, static_cast<int>(std::min<size_t>(size, INT32_MAX)), CV_8UC1, const_cast<uint8_t*>(data));
  try {
    image.bgr = cv::imdecode(buffer, flags);
  } catch (const cv::Exception& e) {
    return invalid_argument("%s: cannot decode the image: %s", name.c_str(), e.what());
  }
  if (image.bgr.empty()) return invalid_argument("%s: cannot decode the image (corrupt or unsupported)", name.c_str());
  if (image.original_width == 0) {
    image.original_width = image.bgr.cols;
    image.original_height = image.bgr.rows;
  }
  return image;
}

Expected<DecodedImage> read_image_file(const std::string& path) {
  std::error_code ec;
  std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return not_found("%s: no such file", path.c_str());
  if (std::filesystem::is_directory(st)) return invalid_argument("%s: is a directory, not an image file", path.c_str());
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("%s: cannot open the file", path.c_str());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return data_loss("%s: read error", path.c_str());
  return decode_image(bytes.data(), bytes.size(), path);
}

Expected<DecodedImage> image_from_pixels(const uint8_t* pixels, int width, int height, size_t stride,
                                         PixelFormat format) {
  if (pixels == nullptr) return invalid_argument("image pixels are null");
  if (width <= 0 || height <= 0) return invalid_argument("image size %dx%d is not positive", width, height);
  if (int64_t{width} * height > kMaxImagePixels)
    return invalid_argument("image is %dx%d pixels, more than the %lld-megapixel limit", width, height,
                            static_cast<long long>(kMaxImagePixels >> 20));
  int channels = format == PixelFormat::kGray ? 1 : 3;
  if (stride < static_cast<size_t>(width) * channels)
    return invalid_argument("row stride %zu is less than width %d x %d channels", stride, width, channels);
  cv::Mat view(height, width, channels == 1 ? CV_8UC1 : CV_8UC3, const_cast<uint8_t*>(pixels), stride);
  DecodedImage image;
  if (format == PixelFormat::kBgr) image.bgr = view.clone();
  if (format == PixelFormat::kRgb) cv::cvtColor(view, image.bgr, cv::COLOR_RGB2BGR);
  if (format == PixelFormat::kGray) cv::cvtColor(view, image.bgr, cv::COLOR_GRAY2BGR);
  image.original_width = width;
  image.original_height = height;
  return image;
}

}  // namespace kiln::ocr
