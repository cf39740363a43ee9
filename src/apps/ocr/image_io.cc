#include "apps/ocr/image_io.h"

#include <opencv2/imgproc.hpp>
#include <png.h>
#include <turbojpeg.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "ops/image_decoding.h"

namespace kiln::ocr {
namespace {

enum class Format { kPng, kJpeg, kOther };

bool starts_with(const uint8_t* data, size_t size, const char* magic, size_t n) {
  return size >= n && std::memcmp(data, magic, n) == 0;
}

// The formats read, by their signatures: PNG and JPEG here, the others by the ImageDecoder
// op's decoders (ops/image_decoding.h).
std::optional<Format> sniff(const uint8_t* data, size_t size) {
  if (starts_with(data, size, "\x89PNG\r\n\x1a\n", 8)) return Format::kPng;
  if (starts_with(data, size, "\xff\xd8\xff", 3)) return Format::kJpeg;
  if (starts_with(data, size, "BM", 2) || starts_with(data, size, "II*\0", 4) ||
      starts_with(data, size, "MM\0*", 4) || (starts_with(data, size, "RIFF", 4) && size >= 12 &&
                                               std::memcmp(data + 8, "WEBP", 4) == 0) ||
      starts_with(data, size, "\0\0\0\x0CjP  \r\n\x87\n", 12) || starts_with(data, size, "\xFF\x4F\xFF\x51", 4) ||
      starts_with(data, size, "P2", 2) || starts_with(data, size, "P3", 2) || starts_with(data, size, "P5", 2) ||
      starts_with(data, size, "P6", 2))
    return Format::kOther;
  return std::nullopt;
}

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

// Checks the size against the limits and picks the downscale factor (a power of two) that
// brings the image under kDownscalePixels; fills the image's original size and note.
Status plan_scale(int64_t w, int64_t h, const std::string& name, DecodedImage* image) {
  if (w <= 0 || h <= 0)
    return invalid_argument("%s: image header gives %lldx%lld pixels", name.c_str(), static_cast<long long>(w),
                            static_cast<long long>(h));
  if (w * h > kMaxImagePixels)
    return invalid_argument("%s: image is %lldx%lld pixels, more than the %lld-megapixel limit; downscale it first",
                            name.c_str(), static_cast<long long>(w), static_cast<long long>(h),
                            static_cast<long long>(kMaxImagePixels >> 20));
  image->scale_down = 1;
  while (w * h / (int64_t{image->scale_down} * image->scale_down) > kDownscalePixels && image->scale_down < 8)
    image->scale_down *= 2;
  image->original_width = static_cast<int>(w);
  image->original_height = static_cast<int>(h);
  if (image->scale_down > 1)
    image->note = str_format("%s: image is %lldx%lld pixels; decoded at 1/%d scale (boxes are in original pixels)",
                             name.c_str(), static_cast<long long>(w), static_cast<long long>(h), image->scale_down);
  return ok_status();
}

void append_note(DecodedImage* image, const std::string& note) {
  image->note += (image->note.empty() ? "" : "; ") + note;
}

// libpng's simplified API: errors and warnings come back as messages (OpenCV's PNG reader
// lets libpng print them on stderr). Alpha is dropped, not composited, as cv2.imread does.
Expected<DecodedImage> decode_png(const uint8_t* data, size_t size, const std::string& name) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size)) {
    std::string message = png.message;
    png_image_free(&png);
    return invalid_argument("%s: cannot decode the PNG: %s", name.c_str(), message.c_str());
  }
  DecodedImage image;
  Status planned = plan_scale(png.width, png.height, name, &image);
  if (!planned.ok()) {
    png_image_free(&png);
    return planned;
  }
  png.format = PNG_FORMAT_BGRA;
  cv::Mat bgra(static_cast<int>(png.height), static_cast<int>(png.width), CV_8UC4);
  if (!png_image_finish_read(&png, nullptr, bgra.data, static_cast<png_int_32>(bgra.step), nullptr)) {
    std::string message = png.message;
    png_image_free(&png);
    return invalid_argument("%s: cannot decode the PNG: %s", name.c_str(), message.c_str());
  }
  if (png.warning_or_error & PNG_IMAGE_WARNING) append_note(&image, name + ": PNG warning: " + png.message);
  png_image_free(&png);
  cv::cvtColor(bgra, image.bgr, cv::COLOR_BGRA2BGR);
  if (image.scale_down > 1)
    cv::resize(image.bgr, image.bgr, cv::Size(image.bgr.cols / image.scale_down, image.bgr.rows / image.scale_down),
               0, 0, cv::INTER_AREA);
  return image;
}

// The EXIF orientation (1..8) of a JPEG, 1 when it has none: cv2.imread applies it, so the
// pipeline does too (phone photos are stored sideways with this tag).
int exif_orientation(const uint8_t* data, size_t size) {
  size_t pos = 2;
  while (pos + 4 <= size && data[pos] == 0xff) {
    uint8_t marker = data[pos + 1];
    size_t length = be16(data + pos + 2);
    if (marker == 0xda || length < 2) break;  // start of scan: no more metadata
    const uint8_t* seg = data + pos + 4;
    size_t seg_len = length - 2;
    if (marker == 0xe1 && pos + 2 + length <= size && seg_len > 14 && std::memcmp(seg, "Exif\0\0", 6) == 0) {
      const uint8_t* tiff = seg + 6;
      size_t tiff_len = seg_len - 6;
      bool le = tiff[0] == 'I';
      auto u16 = [&](size_t off) -> uint32_t {
        return le ? tiff[off] | (tiff[off + 1] << 8) : (tiff[off] << 8) | tiff[off + 1];
      };
      auto u32 = [&](size_t off) -> uint32_t {
        return le ? u16(off) | (u16(off + 2) << 16) : (u16(off) << 16) | u16(off + 2);
      };
      size_t ifd = u32(4);
      if (ifd + 2 > tiff_len) return 1;
      size_t entries = u16(ifd);
      for (size_t i = 0; i < entries; ++i) {
        size_t e = ifd + 2 + 12 * i;
        if (e + 12 > tiff_len) break;
        if (u16(e) == 0x0112) {
          uint32_t v = u16(e + 8);
          return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
        }
      }
      return 1;
    }
    pos += 2 + length;
  }
  return 1;
}

cv::Mat apply_orientation(cv::Mat img, int orientation) {
  cv::Mat out;
  switch (orientation) {
    case 2: cv::flip(img, out, 1); return out;
    case 3: cv::rotate(img, out, cv::ROTATE_180); return out;
    case 4: cv::flip(img, out, 0); return out;
    case 5: cv::transpose(img, out); return out;
    case 6: cv::rotate(img, out, cv::ROTATE_90_CLOCKWISE); return out;
    case 7: cv::transpose(img, out); cv::rotate(out, out, cv::ROTATE_180); return out;
    case 8: cv::rotate(img, out, cv::ROTATE_90_COUNTERCLOCKWISE); return out;
    default: return img;
  }
}

// TurboJPEG: the libjpeg-turbo that OpenCV uses, with the same (accurate) DCT and upsampling,
// native 1/2..1/8 scaled decoding, and errors and warnings as messages instead of stderr
// lines. A corrupt-data warning still decodes (as cv2.imread does) and becomes the image's note.
Expected<DecodedImage> decode_jpeg(const uint8_t* data, size_t size, const std::string& name) {
  std::unique_ptr<void, int (*)(tjhandle)> tj(tjInitDecompress(), tjDestroy);
  if (!tj) return resource_exhausted("%s: cannot start the JPEG decoder", name.c_str());
  int w = 0, h = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), data, static_cast<unsigned long>(size), &w, &h, &subsampling, &colorspace) != 0)
    return invalid_argument("%s: cannot decode the JPEG: %s", name.c_str(), tjGetErrorStr2(tj.get()));
  DecodedImage image;
  KILN_RETURN_IF_ERROR(plan_scale(w, h, name, &image));
  tjscalingfactor factor{1, image.scale_down};
  int sw = TJSCALED(w, factor), sh = TJSCALED(h, factor);
  cv::Mat bgr(sh, sw, CV_8UC3);
  if (tjDecompress2(tj.get(), data, static_cast<unsigned long>(size), bgr.data, sw, static_cast<int>(bgr.step), sh,
                    TJPF_BGR, 0) != 0) {
    if (tjGetErrorCode(tj.get()) != TJERR_WARNING)
      return invalid_argument("%s: cannot decode the JPEG: %s", name.c_str(), tjGetErrorStr2(tj.get()));
    append_note(&image, name + ": JPEG warning: " + tjGetErrorStr2(tj.get()));
  }
  int orientation = exif_orientation(data, size);
  image.bgr = apply_orientation(bgr, orientation);
  if (orientation >= 5) std::swap(image.original_width, image.original_height);
  return image;
}

}  // namespace

Expected<DecodedImage> decode_image(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) return invalid_argument("%s: empty file", name.c_str());
  std::optional<Format> format = sniff(data, size);
  if (!format) return invalid_argument("%s: not an image (not PNG, JPEG, BMP, TIFF, WebP, JPEG 2000 or PNM)", name.c_str());
  if (*format == Format::kPng) {
    if (!png_complete(data, size)) return data_loss("%s: truncated PNG (%zu bytes, no IEND chunk)", name.c_str(), size);
    return decode_png(data, size, name);
  }
  if (*format == Format::kJpeg) {
    if (!jpeg_complete(data, size))
      return data_loss("%s: truncated JPEG (%zu bytes, no end-of-image marker)", name.c_str(), size);
    return decode_jpeg(data, size, name);
  }
  // The other formats, by the ImageDecoder op's decoders.
  auto rgb = ops::decode_image_bytes(data, size);
  if (!rgb.ok()) return invalid_argument("%s: cannot decode the image: %s", name.c_str(), rgb.status().message().c_str());
  DecodedImage image;
  KILN_RETURN_IF_ERROR(plan_scale(rgb->width, rgb->height, name, &image));
  cv::Mat view(static_cast<int>(rgb->height), static_cast<int>(rgb->width), CV_8UC3, rgb->rgb.data());
  cv::cvtColor(view, image.bgr, cv::COLOR_RGB2BGR);
  if (image.scale_down > 1)
    cv::resize(image.bgr, image.bgr, cv::Size(image.bgr.cols / image.scale_down, image.bgr.rows / image.scale_down),
               0, 0, cv::INTER_AREA);
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
