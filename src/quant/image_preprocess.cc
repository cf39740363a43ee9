// Calibration images: decoded by the ImageDecoder op's decoders, resized with OpenCV
// (image_preprocess.h).
#include "quant/image_preprocess.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include "ops/image_decoding.h"

namespace kiln::quant {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t p = s.find(sep, start);
    out.push_back(s.substr(start, p == std::string::npos ? std::string::npos : p - start));
    if (p == std::string::npos) break;
    start = p + 1;
  }
  return out;
}

bool parse_double(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && std::isfinite(*out);
}

Expected<std::vector<float>> parse_floats(const std::string& key, const std::string& value) {
  std::vector<float> out;
  for (const std::string& item : split(value, ',')) {
    double v;
    if (!parse_double(item, &v)) return invalid_argument("--preprocess %s=%s: '%s' is not a number", key.c_str(), value.c_str(), item.c_str());
    out.push_back(static_cast<float>(v));
  }
  if (out.size() != 1 && out.size() != 3)
    return invalid_argument("--preprocess %s=%s: expected 1 or 3 values", key.c_str(), value.c_str());
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Expected<ImagePreprocess> parse_image_preprocess(const std::string& spec) {
  ImagePreprocess p;
  if (spec.empty()) return p;
  for (const std::string& item : split(spec, ':')) {
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      return invalid_argument("--preprocess: '%s' is not KEY=VALUE (keys: resize, scale, mean, std, layout, color)",
                              item.c_str());
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "resize") {
      auto parts = split(value, ',');
      double h, w;
      if (parts.size() != 2 || !parse_double(parts[0], &h) || !parse_double(parts[1], &w) || h < 1 || w < 1 ||
          h != std::floor(h) || w != std::floor(w) || h > 65536 || w > 65536)
        return invalid_argument("--preprocess resize=%s: expected H,W (positive integers)", value.c_str());
      p.height = static_cast<int64_t>(h);
      p.width = static_cast<int64_t>(w);
    } else if (key == "scale") {
      double num = 0, den = 1;
      auto parts = split(value, '/');
      if (parts.size() > 2 || !parse_double(parts[0], &num) || (parts.size() == 2 && !parse_double(parts[1], &den)) ||
          den == 0)
        return invalid_argument("--preprocess scale=%s: expected a number or a fraction such as 1/255", value.c_str());
      p.scale = num / den;
    } else if (key == "mean" || key == "std") {
      KILN_ASSIGN_OR_RETURN(auto v, parse_floats(key, value));
      if (key == "std" && std::any_of(v.begin(), v.end(), [](float x) { return x == 0; }))
        return invalid_argument("--preprocess std=%s: a standard deviation of 0", value.c_str());
      (key == "mean" ? p.mean : p.std) = v;
    } else if (key == "layout") {
      std::string u = upper(value);
      if (u != "NCHW" && u != "NHWC") return invalid_argument("--preprocess layout=%s: expected NCHW or NHWC", value.c_str());
      p.nchw = u == "NCHW";
    } else if (key == "color") {
      std::string u = upper(value);
      if (u == "RGB") p.color = ImagePreprocess::Color::kRgb;
      else if (u == "BGR") p.color = ImagePreprocess::Color::kBgr;
      else if (u == "GRAY" || u == "GREY") p.color = ImagePreprocess::Color::kGray;
      else return invalid_argument("--preprocess color=%s: expected RGB, BGR or GRAY", value.c_str());
    } else {
      return invalid_argument("--preprocess: unknown key '%s' (keys: resize, scale, mean, std, layout, color)", key.c_str());
    }
  }
  return p;
}

Status resolve_image_preprocess(ImagePreprocess& p, const std::vector<int64_t>& dims, const std::string& input) {
  if (dims.size() != 4)
    return invalid_argument("input '%s' has rank %zu: images need a rank-4 input (NCHW or NHWC)", input.c_str(), dims.size());
  const int64_t channels = p.color == ImagePreprocess::Color::kGray ? 1 : 3;
  const int64_t c = p.nchw ? dims[1] : dims[3];
  const int64_t h = p.nchw ? dims[2] : dims[1];
  const int64_t w = p.nchw ? dims[3] : dims[2];
  if (c >= 0 && c != channels)
    return invalid_argument("input '%s' has %lld channels (layout %s) but color gives %lld", input.c_str(),
                            static_cast<long long>(c), p.nchw ? "NCHW" : "NHWC", static_cast<long long>(channels));
  if (p.height == 0) {
    if (h < 0 || w < 0)
      return invalid_argument("input '%s' has open height or width: give the size with --preprocess resize=H,W",
                              input.c_str());
    p.height = h;
    p.width = w;
  } else if ((h >= 0 && h != p.height) || (w >= 0 && w != p.width)) {
    return invalid_argument("--preprocess resize=%lld,%lld does not match input '%s' (H %lld, W %lld)",
                            static_cast<long long>(p.height), static_cast<long long>(p.width), input.c_str(),
                            static_cast<long long>(h), static_cast<long long>(w));
  }
  for (auto* v : {&p.mean, &p.std})
    if (v->size() != 1 && static_cast<int64_t>(v->size()) != channels)
      return invalid_argument("--preprocess: mean/std have %zu values for %lld channels", v->size(),
                              static_cast<long long>(channels));
  return ok_status();
}

Expected<Tensor> load_image(const std::string& path, const ImagePreprocess& p) {
  // Decoded as Pillow decodes (ops/image_decoding.h: no EXIF rotation), to RGB.
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("%s: cannot open the file", path.c_str());
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return data_loss("%s: read error", path.c_str());
  auto rgb = ops::decode_image_bytes(bytes.data(), bytes.size());
  if (!rgb.ok()) return invalid_argument("%s: cannot decode the image: %s", path.c_str(), rgb.status().message().c_str());
  cv::Mat img(static_cast<int>(rgb->height), static_cast<int>(rgb->width), CV_8UC3, rgb->rgb.data());
  try {
    if (p.color == ImagePreprocess::Color::kBgr) cv::cvtColor(img, img, cv::COLOR_RGB2BGR);
    if (p.color == ImagePreprocess::Color::kGray) cv::cvtColor(img, img, cv::COLOR_RGB2GRAY);
    cv::resize(img, img, cv::Size(static_cast<int>(p.width), static_cast<int>(p.height)), 0, 0, cv::INTER_LINEAR);
  } catch (const std::exception& e) {
    return invalid_argument("%s: cannot resize the image: %s", path.c_str(), e.what());
  }
  const int64_t c = img.channels(), h = p.height, w = p.width;
  Tensor t = Tensor::make(DataType::kFloat32, p.nchw ? std::vector<int64_t>{1, c, h, w} : std::vector<int64_t>{1, h, w, c});
  float* dst = t.data<float>();
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = img.ptr<uint8_t>(static_cast<int>(y));
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k) {
        float m = p.mean[p.mean.size() == 1 ? 0 : static_cast<size_t>(k)];
        float s = p.std[p.std.size() == 1 ? 0 : static_cast<size_t>(k)];
        float v = (static_cast<float>(row[x * c + k] * p.scale) - m) / s;
        dst[p.nchw ? (k * h + y) * w + x : (y * w + x) * c + k] = v;
      }
  }
  return t;
}

bool is_image_file(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* e : {".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
    if (ext == e) return true;
  return false;
}

}  // namespace kiln::quant
