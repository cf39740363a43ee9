// AIPP parameters: format facts, validation, presets and the serialized layout.
#include "ops/aipp_params.h"

#include <cmath>
#include <cstring>

namespace kiln::ops {

const char* aipp_format_name(AippFormat f) {
  switch (f) {
    case AippFormat::kYuv420sp: return "YUV420SP_U8";
    case AippFormat::kXrgb8888: return "XRGB8888_U8";
    case AippFormat::kRgb888: return "RGB888_U8";
    case AippFormat::kYuv400: return "YUV400_U8";
    case AippFormat::kArgb8888: return "ARGB8888_U8";
    case AippFormat::kYuyv: return "YUYV_U8";
    case AippFormat::kYuv422sp: return "YUV422SP_U8";
    case AippFormat::kAyuv444: return "AYUV444_U8";
    default: return "UNDEFINED";
  }
}

bool aipp_format_known(AippFormat f) { return std::strcmp(aipp_format_name(f), "UNDEFINED") != 0; }

int aipp_format_channels(AippFormat f) {
  switch (f) {
    case AippFormat::kYuv400: return 1;
    case AippFormat::kXrgb8888:
    case AippFormat::kArgb8888:
    case AippFormat::kAyuv444: return 4;
    default: return 3;
  }
}

bool aipp_format_is_yuv(AippFormat f) {
  return f == AippFormat::kYuv420sp || f == AippFormat::kYuv400 || f == AippFormat::kYuyv ||
         f == AippFormat::kYuv422sp || f == AippFormat::kAyuv444;
}

void apply_csc_preset(AippParams& p, CscPreset preset, bool bgr) {
  if (preset == CscPreset::kNone) return;
  const bool bt709 = preset == CscPreset::kBt709Narrow || preset == CscPreset::kBt709Full;
  const bool narrow = preset == CscPreset::kBt601Narrow || preset == CscPreset::kBt709Narrow;
  // R = Y' + 2(1-Kr) V', B = Y' + 2(1-Kb) U', G = Y' - (2 Kb (1-Kb) U' + 2 Kr (1-Kr) V') / Kg,
  // with Y' = (Y - 16) * 255/219 and U', V' = (U|V - 128) * 255/224 in narrow range.
  const double kr = bt709 ? 0.2126 : 0.299, kb = bt709 ? 0.0722 : 0.114, kg = 1 - kr - kb;
  const double ys = narrow ? 255.0 / 219.0 : 1.0, cs = narrow ? 255.0 / 224.0 : 1.0;
  const double rows[3][3] = {{ys, 0, 2 * (1 - kr) * cs},
                             {ys, -2 * kb * (1 - kb) / kg * cs, -2 * kr * (1 - kr) / kg * cs},
                             {ys, 2 * (1 - kb) * cs, 0}};
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      // ATC's matrices are integers in 1/256; round to that grid so a preset and the same
      // numbers written by hand compute the same.
      p.matrix[bgr ? 2 - r : r][c] = static_cast<float>(std::lround(rows[r][c] * 256));
  p.input_bias[0] = narrow ? 16 : 0;
  p.input_bias[1] = p.input_bias[2] = 128;
  p.output_bias[0] = p.output_bias[1] = p.output_bias[2] = 0;
  p.csc = true;
}

Expected<std::vector<int64_t>> aipp_image_dims(AippFormat format, int32_t w, int32_t h) {
  if (w <= 0 || h <= 0)
    return invalid_argument("src_image_size_w/h %dx%d must be positive", w, h);
  const bool even_w = format == AippFormat::kYuv420sp || format == AippFormat::kYuv422sp || format == AippFormat::kYuyv;
  if (even_w && w % 2)
    return invalid_argument("src_image_size_w %d: %s needs an even width", w, aipp_format_name(format));
  if (format == AippFormat::kYuv420sp && h % 2)
    return invalid_argument("src_image_size_h %d: %s needs an even height", h, aipp_format_name(format));
  switch (format) {
    case AippFormat::kYuv420sp: return std::vector<int64_t>{int64_t{h} * 3 / 2, w};
    case AippFormat::kYuv422sp: return std::vector<int64_t>{int64_t{h} * 2, w};
    case AippFormat::kYuv400: return std::vector<int64_t>{h, w};
    case AippFormat::kYuyv: return std::vector<int64_t>{h, int64_t{w} * 2};
    case AippFormat::kRgb888: return std::vector<int64_t>{h, w, 3};
    case AippFormat::kXrgb8888:
    case AippFormat::kArgb8888:
    case AippFormat::kAyuv444: return std::vector<int64_t>{h, w, 4};
    default: return invalid_argument("input_format %d is not an image format Kiln's AIPP takes", static_cast<int>(format));
  }
}

int64_t aipp_image_bytes(AippFormat format, int32_t w, int32_t h) {
  Expected<std::vector<int64_t>> dims = aipp_image_dims(format, w, h);
  if (!dims.ok()) return 0;
  int64_t n = 1;
  for (int64_t d : *dims) n *= d;
  return n;
}

namespace {

// Largest image side AIPP accepts: ATC's limit is 4096; 8K video frames are 7680 wide.
constexpr int32_t kMaxSide = 16384;

Status validate_batch(const AippParams& p, const AippBatchParams& b, const AippOutputDesc& out, const std::string& at) {
  int32_t w = p.src_w, h = p.src_h;
  if (b.crop) {
    if (b.crop_w <= 0) return invalid_argument("%scrop_size_w %d must be positive", at.c_str(), b.crop_w);
    if (b.crop_h <= 0) return invalid_argument("%scrop_size_h %d must be positive", at.c_str(), b.crop_h);
    if (b.crop_x < 0) return invalid_argument("%sload_start_pos_w %d must not be negative", at.c_str(), b.crop_x);
    if (b.crop_y < 0) return invalid_argument("%sload_start_pos_h %d must not be negative", at.c_str(), b.crop_y);
    if (int64_t{b.crop_x} + b.crop_w > p.src_w)
      return invalid_argument("%sload_start_pos_w %d + crop_size_w %d exceeds src_image_size_w %d", at.c_str(),
                              b.crop_x, b.crop_w, p.src_w);
    if (int64_t{b.crop_y} + b.crop_h > p.src_h)
      return invalid_argument("%sload_start_pos_h %d + crop_size_h %d exceeds src_image_size_h %d", at.c_str(),
                              b.crop_y, b.crop_h, p.src_h);
    w = b.crop_w;
    h = b.crop_h;
  }
  if (b.resize) {
    if (b.resize_w <= 0 || b.resize_h <= 0 || b.resize_w > kMaxSide || b.resize_h > kMaxSide)
      return invalid_argument("%sresize_output_w/h %dx%d must be within 1..%d", at.c_str(), b.resize_w, b.resize_h,
                              kMaxSide);
    w = b.resize_w;
    h = b.resize_h;
  }
  if (b.padding) {
    if (b.pad_left < 0 || b.pad_right < 0 || b.pad_top < 0 || b.pad_bottom < 0)
      return invalid_argument("%spadding sizes must not be negative", at.c_str());
    if (b.pad_left > kMaxSide || b.pad_right > kMaxSide || b.pad_top > kMaxSide || b.pad_bottom > kMaxSide)
      return invalid_argument("%spadding sizes must be within 0..%d", at.c_str(), kMaxSide);
    w += b.pad_left + b.pad_right;
    h += b.pad_top + b.pad_bottom;
  }
  for (int c = 0; c < 4; ++c)
    if (!std::isfinite(b.mean[c]) || !std::isfinite(b.min[c]) || !std::isfinite(b.var_reci[c]))
      return invalid_argument("%smean_chn/min_chn/var_reci_chn_%d must be finite", at.c_str(), c);
  if (!std::isfinite(b.padding_value)) return invalid_argument("%spadding_value must be finite", at.c_str());
  if (w != out.width || h != out.height)
    return invalid_argument(
        "%sthe AIPP output is %dx%d (WxH: src_image_size, then crop, resize_output and padding) but the model "
        "input is %lldx%lld",
        at.c_str(), w, h, (long long)out.width, (long long)out.height);
  return ok_status();
}

}  // namespace

Status validate_aipp(const AippParams& p, const AippOutputDesc& out) {
  if (!aipp_format_known(p.format))
    return invalid_argument("input_format %d is not an image format Kiln's AIPP takes", static_cast<int>(p.format));
  if (p.src_w > kMaxSide || p.src_h > kMaxSide)
    return invalid_argument("src_image_size_w/h %dx%d: at most %d per side", p.src_w, p.src_h, kMaxSide);
  KILN_RETURN_IF_ERROR(aipp_image_dims(p.format, p.src_w, p.src_h).status());
  const int fc = aipp_format_channels(p.format);
  if (p.csc && fc == 1)
    return invalid_argument("csc_switch: %s has one channel, nothing to convert", aipp_format_name(p.format));
  // Channels the output can have: the colour channels (3 after CSC), or a grey image's one,
  // or all four of a 4-byte format without CSC.
  const bool fits = out.channels == 3 ? fc >= 3 : out.channels == 1 ? fc == 1 : out.channels == 4 ? fc == 4 && !p.csc : false;
  if (!fits)
    return invalid_argument("input_format %s%s gives %d channel(s); the model input takes %lld",
                            aipp_format_name(p.format), p.csc ? " with csc_switch" : "", p.csc ? 3 : fc,
                            (long long)out.channels);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c)
      if (!std::isfinite(p.matrix[r][c]))
        return invalid_argument("matrix_r%dc%d must be finite", r, c);
  if (p.batch.empty()) return invalid_argument("no per-image parameters");
  if (p.batch.size() != 1 && static_cast<int64_t>(p.batch.size()) != out.batch)
    return invalid_argument("parameters for %zu images, the model input's batch is %lld", p.batch.size(),
                            (long long)out.batch);
  for (size_t i = 0; i < p.batch.size(); ++i)
    KILN_RETURN_IF_ERROR(
        validate_batch(p, p.batch[i], out, p.batch.size() == 1 ? "" : "image " + std::to_string(i) + ": "));
  return ok_status();
}

// ---- serialized layout: a header, the common part, then one record per image ----
namespace {

constexpr uint32_t kMagic = 0x5041494b;  // "KIAP"
constexpr uint32_t kVersion = 1;

struct Header {
  uint32_t magic, version, batch_count, reserved;
};
struct Common {
  int32_t format, src_w, src_h;
  uint8_t csc, rbuv_swap, ax_swap, reserved;
  float matrix[9], input_bias[3], output_bias[3];
};
struct Record {
  uint8_t crop, resize, padding, reserved;
  int32_t crop_x, crop_y, crop_w, crop_h, resize_w, resize_h;
  int32_t pad_left, pad_right, pad_top, pad_bottom;
  float padding_value, mean[4], min[4], var_reci[4];
};
static_assert(sizeof(Header) == 16 && sizeof(Common) == 76 && sizeof(Record) == 96, "AIPP layout changed");

constexpr int64_t kMaxBatchRecords = 1 << 16;

// The per-image fields, either way between AippBatchParams and Record (same names).
template <typename From, typename To>
void copy_batch_fields(const From& f, To& t) {
  using B = decltype(t.crop);
  t.crop = static_cast<B>(f.crop != 0), t.resize = static_cast<B>(f.resize != 0);
  t.padding = static_cast<B>(f.padding != 0);
  t.crop_x = f.crop_x, t.crop_y = f.crop_y, t.crop_w = f.crop_w, t.crop_h = f.crop_h;
  t.resize_w = f.resize_w, t.resize_h = f.resize_h;
  t.pad_left = f.pad_left, t.pad_right = f.pad_right, t.pad_top = f.pad_top, t.pad_bottom = f.pad_bottom;
  t.padding_value = f.padding_value;
  for (int i = 0; i < 4; ++i) t.mean[i] = f.mean[i], t.min[i] = f.min[i], t.var_reci[i] = f.var_reci[i];
}

}  // namespace

size_t aipp_serialized_bytes(int64_t batch) {
  return sizeof(Header) + sizeof(Common) + sizeof(Record) * static_cast<size_t>(batch);
}

std::vector<uint8_t> serialize_aipp(const AippParams& p) {
  std::vector<uint8_t> out(aipp_serialized_bytes(static_cast<int64_t>(p.batch.size())));
  Header h{kMagic, kVersion, static_cast<uint32_t>(p.batch.size()), 0};
  Common c{};
  c.format = static_cast<int32_t>(p.format);
  c.src_w = p.src_w;
  c.src_h = p.src_h;
  c.csc = p.csc;
  c.rbuv_swap = p.rbuv_swap;
  c.ax_swap = p.ax_swap;
  for (int i = 0; i < 9; ++i) c.matrix[i] = p.matrix[i / 3][i % 3];
  for (int i = 0; i < 3; ++i) {
    c.input_bias[i] = p.input_bias[i];
    c.output_bias[i] = p.output_bias[i];
  }
  uint8_t* at = out.data();
  std::memcpy(at, &h, sizeof h);
  std::memcpy(at + sizeof h, &c, sizeof c);
  at += sizeof h + sizeof c;
  for (const AippBatchParams& b : p.batch) {
    Record r{};
    copy_batch_fields(b, r);
    std::memcpy(at, &r, sizeof r);
    at += sizeof r;
  }
  return out;
}

Expected<AippParams> deserialize_aipp(const uint8_t* data, size_t size) {
  Header h{};
  if (!data || size < sizeof(Header) + sizeof(Common))
    return invalid_argument("AIPP parameters: %zu bytes, too short for the header", size);
  std::memcpy(&h, data, sizeof h);
  if (h.magic != kMagic)
    return invalid_argument("AIPP parameters: bad magic (were they set with kilnmdlSetInputAIPP?)");
  if (h.version != kVersion) return invalid_argument("AIPP parameters: version %u, Kiln reads %u", h.version, kVersion);
  if (h.batch_count == 0 || h.batch_count > kMaxBatchRecords ||
      size < aipp_serialized_bytes(static_cast<int64_t>(h.batch_count)))
    return invalid_argument("AIPP parameters: %u per-image records do not fit in %zu bytes", h.batch_count, size);
  Common c{};
  std::memcpy(&c, data + sizeof h, sizeof c);
  AippParams p;
  p.format = static_cast<AippFormat>(c.format);
  p.src_w = c.src_w;
  p.src_h = c.src_h;
  p.csc = c.csc != 0;
  p.rbuv_swap = c.rbuv_swap != 0;
  p.ax_swap = c.ax_swap != 0;
  for (int i = 0; i < 9; ++i) p.matrix[i / 3][i % 3] = c.matrix[i];
  for (int i = 0; i < 3; ++i) {
    p.input_bias[i] = c.input_bias[i];
    p.output_bias[i] = c.output_bias[i];
  }
  p.batch.assign(h.batch_count, AippBatchParams{});
  const uint8_t* at = data + sizeof h + sizeof c;
  for (AippBatchParams& b : p.batch) {
    Record r{};
    std::memcpy(&r, at, sizeof r);
    at += sizeof r;
    copy_batch_fields(r, b);
  }
  return p;
}

std::string AippParams::to_text() const {
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  std::string s = std::string("input_format: ") + aipp_format_name(format) + " src_image_size: " + std::to_string(src_w) +
                  "x" + std::to_string(src_h);
  if (rbuv_swap) s += " rbuv_swap";
  if (ax_swap) s += " ax_swap";
  if (csc) {
    s += " csc: [";
    for (int i = 0; i < 9; ++i) s += (i ? (i % 3 ? "," : ";") : "") + num(matrix[i / 3][i % 3]);
    s += "]/256 input_bias: " + num(input_bias[0]) + "," + num(input_bias[1]) + "," + num(input_bias[2]);
    if (output_bias[0] || output_bias[1] || output_bias[2])
      s += " output_bias: " + num(output_bias[0]) + "," + num(output_bias[1]) + "," + num(output_bias[2]);
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const AippBatchParams& b = batch[i];
    if (batch.size() > 1) s += " | image " + std::to_string(i) + ":";
    if (b.crop)
      s += " crop: " + std::to_string(b.crop_w) + "x" + std::to_string(b.crop_h) + "+" + std::to_string(b.crop_x) + "+" +
           std::to_string(b.crop_y);
    if (b.resize) s += " resize: " + std::to_string(b.resize_w) + "x" + std::to_string(b.resize_h);
    if (b.padding)
      s += " padding: l" + std::to_string(b.pad_left) + " r" + std::to_string(b.pad_right) + " t" +
           std::to_string(b.pad_top) + " b" + std::to_string(b.pad_bottom) + " value " + num(b.padding_value);
    s += " mean: " + num(b.mean[0]) + "," + num(b.mean[1]) + "," + num(b.mean[2]) + "," + num(b.mean[3]);
    if (b.min[0] || b.min[1] || b.min[2] || b.min[3])
      s += " min: " + num(b.min[0]) + "," + num(b.min[1]) + "," + num(b.min[2]) + "," + num(b.min[3]);
    s += " var_reci: " + num(b.var_reci[0]) + "," + num(b.var_reci[1]) + "," + num(b.var_reci[2]) + "," +
         num(b.var_reci[3]);
  }
  return s;
}

}  // namespace kiln::ops

namespace kiln::ops {

std::string AippInsertion::locate(const std::string& message) const {
  // The field the message names first (messages name the field at fault first), the longest
  // at that place ("crop_size_w" rather than "crop").
  const std::pair<std::string, int>* best = nullptr;
  size_t best_at = std::string::npos;
  for (const auto& f : field_lines) {
    const size_t at = message.find(f.first);
    if (at == std::string::npos) continue;
    if (!best || at < best_at || (at == best_at && f.first.size() > best->first.size())) best = &f, best_at = at;
  }
  if (!best) return where + ": " + message;
  const size_t colon = where.rfind(':');
  return (colon == std::string::npos ? where : where.substr(0, colon)) + ":" + std::to_string(best->second) + ": " +
         message;
}

}  // namespace kiln::ops
