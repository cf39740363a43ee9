// ImageDecoder (opset 20): decodes an encoded image held in a uint8 tensor to [H, W, 3]
// RGB or BGR, or [H, W, 1] grayscale. JPEG, PNG, WebP, TIFF and JPEG 2000 go through the
// system libraries (the ones Pillow uses, so pixels match it); BMP and binary or ASCII
// PNM are parsed here. Grayscale is Pillow's convert("L") of the RGB pixels.
// jpeglib.h needs size_t and FILE declared before it.
#include <cstddef>
#include <cstdio>
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <openjpeg.h>
#include <png.h>
#include <tiffio.h>
#include <webp/decode.h>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ops/image_decoding.h"
#include "ops/op_util.h"

namespace kiln::ops {
namespace {

// Decoded images above this many pixels are refused (a hostile header can claim any size).
constexpr int64_t kMaxPixels = int64_t{1} << 28;

using Image = RgbImage;

Status check_size(int64_t w, int64_t h, const char* format) {
  if (w <= 0 || h <= 0 || w > kMaxPixels || h > kMaxPixels || w * h > kMaxPixels)
    return invalid_argument("%s image of %lld x %lld pixels is empty or too large", format,
                            (long long)w, (long long)h);
  return ok_status();
}

bool starts_with(const uint8_t* d, size_t n, const char* magic, size_t len) {
  return n >= len && std::memcmp(d, magic, len) == 0;
}

// ---- JPEG ----------------------------------------------------------------------------

struct JpegState {
  jpeg_error_mgr err;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
};

void jpeg_fail(j_common_ptr cinfo) {
  JpegState* s = reinterpret_cast<JpegState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, s->message);
  std::longjmp(s->jump, 1);
}

// Warnings stay quiet, except running out of data: libjpeg would pad the image with grey
// and go on, where Pillow (whose decoding the outputs must match) reports a truncated file.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo);
}

// libjpeg reports errors by longjmp; everything that must survive one lives in heap
// objects whose pointers are set before setjmp.
Expected<Image> decode_jpeg(const uint8_t* data, size_t size) {
  auto state = std::make_unique<JpegState>();
  auto cinfo = std::make_unique<jpeg_decompress_struct>();
  auto image = std::make_unique<Image>();
  cinfo->err = jpeg_std_error(&state->err);
  state->err.error_exit = jpeg_fail;
  state->err.emit_message = jpeg_message;
  if (setjmp(state->jump)) {
    jpeg_destroy_decompress(cinfo.get());
    return invalid_argument("JPEG decoding failed: %s", state->message);
  }
  jpeg_create_decompress(cinfo.get());
  jpeg_mem_src(cinfo.get(), data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo.get(), TRUE);
  cinfo->out_color_space = JCS_RGB;  // CMYK/YCCK cannot convert to RGB in libjpeg: it errors
  Status st = check_size(cinfo->image_width, cinfo->image_height, "JPEG");
  if (!st.ok()) {
    jpeg_destroy_decompress(cinfo.get());
    return st;
  }
  jpeg_start_decompress(cinfo.get());
  image->width = cinfo->output_width;
  image->height = cinfo->output_height;
  image->rgb.resize(static_cast<size_t>(image->width * image->height * 3));
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row =
        image->rgb.data() + static_cast<size_t>(cinfo->output_scanline) * image->width * 3;
    jpeg_read_scanlines(cinfo.get(), &row, 1);
  }
  jpeg_finish_decompress(cinfo.get());
  jpeg_destroy_decompress(cinfo.get());
  return std::move(*image);
}

// ---- PNG -----------------------------------------------------------------------------

Expected<Image> decode_png(const uint8_t* data, size_t size) {
  png_image png;
  std::memset(&png, 0, sizeof(png));
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, data, size))
    return invalid_argument("PNG decoding failed: %s", png.message);
  KILN_RETURN_IF_ERROR(check_size(png.width, png.height, "PNG"));
  png.format = PNG_FORMAT_RGB;
  Image image;
  image.width = png.width;
  image.height = png.height;
  image.rgb.resize(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, image.rgb.data(), 0, nullptr)) {
    png_image_free(&png);
    return invalid_argument("PNG decoding failed: %s", png.message);
  }
  return image;
}

// ---- WebP ----------------------------------------------------------------------------

Expected<Image> decode_webp(const uint8_t* data, size_t size) {
  int w = 0, h = 0;
  if (!WebPGetInfo(data, size, &w, &h)) return invalid_argument("WebP decoding failed: bad header");
  KILN_RETURN_IF_ERROR(check_size(w, h, "WebP"));
  uint8_t* pixels = WebPDecodeRGB(data, size, &w, &h);
  if (!pixels) return invalid_argument("WebP decoding failed");
  Image image;
  image.width = w;
  image.height = h;
  image.rgb.assign(pixels, pixels + static_cast<size_t>(w) * h * 3);
  WebPFree(pixels);
  return image;
}

// ---- TIFF ----------------------------------------------------------------------------

struct MemoryFile {
  const uint8_t* data;
  toff_t size, pos;
  std::string error;
};

tmsize_t tiff_read(thandle_t h, void* buf, tmsize_t n) {
  auto* f = static_cast<MemoryFile*>(h);
  if (n < 0 || f->pos >= f->size) return 0;
  toff_t k = std::min<toff_t>(static_cast<toff_t>(n), f->size - f->pos);
  std::memcpy(buf, f->data + f->pos, k);
  f->pos += k;
  return static_cast<tmsize_t>(k);
}
tmsize_t tiff_write(thandle_t, void*, tmsize_t) { return 0; }
toff_t tiff_seek(thandle_t h, toff_t off, int whence) {
  auto* f = static_cast<MemoryFile*>(h);
  toff_t base = whence == SEEK_CUR ? f->pos : whence == SEEK_END ? f->size : 0;
  f->pos = base + off;
  return f->pos;
}
int tiff_close(thandle_t) { return 0; }
toff_t tiff_size(thandle_t h) { return static_cast<MemoryFile*>(h)->size; }
int tiff_map(thandle_t, void**, toff_t*) { return 0; }
void tiff_unmap(thandle_t, void*, toff_t) {}
int tiff_error(TIFF*, void* user, const char* module, const char* fmt, va_list args) {
  auto* f = static_cast<MemoryFile*>(user);
  if (f->error.empty()) f->error = str_vformat(fmt, args);
  return 1;  // handled: nothing goes to stderr
}
int tiff_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

Expected<Image> decode_tiff(const uint8_t* data, size_t size) {
  MemoryFile file{data, static_cast<toff_t>(size), 0, {}};
  std::unique_ptr<TIFFOpenOptions, void (*)(TIFFOpenOptions*)> options(TIFFOpenOptionsAlloc(),
                                                                       TIFFOpenOptionsFree);
  TIFFOpenOptionsSetErrorHandlerExtR(options.get(), tiff_error, &file);
  TIFFOpenOptionsSetWarningHandlerExtR(options.get(), tiff_warning, &file);
  TIFFOpenOptionsSetMaxSingleMemAlloc(options.get(), static_cast<tmsize_t>(kMaxPixels) * 4);
  std::unique_ptr<TIFF, void (*)(TIFF*)> tif(
      TIFFClientOpenExt("memory", "rm", &file, tiff_read, tiff_write, tiff_seek, tiff_close,
                        tiff_size, tiff_map, tiff_unmap, options.get()),
      TIFFClose);
  if (!tif) return invalid_argument("TIFF decoding failed: %s", file.error.c_str());
  uint32_t w = 0, h = 0;
  TIFFGetField(tif.get(), TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(tif.get(), TIFFTAG_IMAGELENGTH, &h);
  KILN_RETURN_IF_ERROR(check_size(w, h, "TIFF"));
  std::vector<uint32_t> raster(static_cast<size_t>(w) * h);
  if (!TIFFReadRGBAImageOriented(tif.get(), w, h, raster.data(), ORIENTATION_TOPLEFT, 0))
    return invalid_argument("TIFF decoding failed: %s", file.error.c_str());
  Image image;
  image.width = w;
  image.height = h;
  image.rgb.resize(raster.size() * 3);
  for (size_t i = 0; i < raster.size(); ++i) {
    image.rgb[i * 3] = static_cast<uint8_t>(TIFFGetR(raster[i]));
    image.rgb[i * 3 + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
    image.rgb[i * 3 + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
  }
  return image;
}

// ---- JPEG 2000 -----------------------------------------------------------------------

struct MemoryStream {
  const uint8_t* data;
  OPJ_UINT64 size, pos;
};

OPJ_SIZE_T opj_read(void* buf, OPJ_SIZE_T n, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  if (s->pos >= s->size) return static_cast<OPJ_SIZE_T>(-1);
  OPJ_SIZE_T k = static_cast<OPJ_SIZE_T>(std::min<OPJ_UINT64>(n, s->size - s->pos));
  std::memcpy(buf, s->data + s->pos, k);
  s->pos += k;
  return k;
}
OPJ_OFF_T opj_skip(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  if (n < 0 && static_cast<OPJ_UINT64>(-n) > s->pos) return -1;
  s->pos =
      std::min<OPJ_UINT64>(s->size, static_cast<OPJ_UINT64>(static_cast<OPJ_OFF_T>(s->pos) + n));
  return n;
}
OPJ_BOOL opj_seek(OPJ_OFF_T n, void* user) {
  auto* s = static_cast<MemoryStream*>(user);
  if (n < 0 || static_cast<OPJ_UINT64>(n) > s->size) return OPJ_FALSE;
  s->pos = static_cast<OPJ_UINT64>(n);
  return OPJ_TRUE;
}
void opj_quiet(const char*, void*) {}

Expected<Image> decode_jpeg2000(const uint8_t* data, size_t size, bool codestream) {
  MemoryStream ms{data, size, 0};
  std::unique_ptr<opj_stream_t, void (*)(opj_stream_t*)> stream(opj_stream_default_create(OPJ_TRUE),
                                                                opj_stream_destroy);
  opj_stream_set_user_data(stream.get(), &ms, nullptr);
  opj_stream_set_user_data_length(stream.get(), size);
  opj_stream_set_read_function(stream.get(), opj_read);
  opj_stream_set_skip_function(stream.get(), opj_skip);
  opj_stream_set_seek_function(stream.get(), opj_seek);
  std::unique_ptr<opj_codec_t, void (*)(opj_codec_t*)> codec(
      opj_create_decompress(codestream ? OPJ_CODEC_J2K : OPJ_CODEC_JP2), opj_destroy_codec);
  opj_set_info_handler(codec.get(), opj_quiet, nullptr);
  opj_set_warning_handler(codec.get(), opj_quiet, nullptr);
  opj_set_error_handler(codec.get(), opj_quiet, nullptr);
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  if (!opj_setup_decoder(codec.get(), &params))
    return invalid_argument("JPEG 2000 decoder setup failed");
  opj_image_t* raw = nullptr;
  if (!opj_read_header(stream.get(), codec.get(), &raw)) {
    if (raw) opj_image_destroy(raw);
    return invalid_argument("JPEG 2000 decoding failed: bad header");
  }
  std::unique_ptr<opj_image_t, void (*)(opj_image_t*)> img(raw, opj_image_destroy);
  KILN_RETURN_IF_ERROR(check_size(static_cast<int64_t>(img->x1) - img->x0,
                                  static_cast<int64_t>(img->y1) - img->y0, "JPEG 2000"));
  if (!opj_decode(codec.get(), stream.get(), img.get()) ||
      !opj_end_decompress(codec.get(), stream.get()))
    return invalid_argument("JPEG 2000 decoding failed");
  const OPJ_UINT32 n = img->numcomps;
  if (n != 1 && n != 3 && n != 4) return unsupported("JPEG 2000 image with %u components", n);
  const opj_image_comp_t* c = img->comps;
  Image image;
  image.width = c[0].w;
  image.height = c[0].h;
  KILN_RETURN_IF_ERROR(check_size(image.width, image.height, "JPEG 2000"));
  for (OPJ_UINT32 k = 0; k < n; ++k)
    if (c[k].w != c[0].w || c[k].h != c[0].h || !c[k].data || c[k].prec == 0 || c[k].prec > 16)
      return unsupported("JPEG 2000 image with subsampled or unusual components");
  image.rgb.resize(static_cast<size_t>(image.width * image.height * 3));
  for (int64_t i = 0; i < image.width * image.height; ++i)
    for (int ch = 0; ch < 3; ++ch) {
      const opj_image_comp_t& comp = c[n == 1 ? 0 : ch];
      int64_t v = comp.data[i];
      if (comp.sgnd) v += int64_t{1} << (comp.prec - 1);
      // Precisions other than 8 bits scale to 8 as Pillow does (shift).
      if (comp.prec > 8) v >>= comp.prec - 8;
      if (comp.prec < 8) v <<= 8 - comp.prec;
      image.rgb[static_cast<size_t>(i * 3 + ch)] =
          static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
    }
  return image;
}

// ---- BMP -----------------------------------------------------------------------------

uint32_t le32(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
uint16_t le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Uncompressed BMP (BI_RGB) of 8 (paletted), 24 or 32 bits per pixel, either row order.
Expected<Image> decode_bmp(const uint8_t* data, size_t size) {
  if (size < 54) return invalid_argument("BMP file of %zu bytes is truncated", size);
  const uint32_t offset = le32(data + 10), header = le32(data + 14);
  if (header < 40 || 14 + static_cast<uint64_t>(header) > size)
    return unsupported("BMP with a %u-byte info header", header);
  const int32_t w = static_cast<int32_t>(le32(data + 18)),
                h_signed = static_cast<int32_t>(le32(data + 22));
  const uint16_t bpp = le16(data + 28);
  const uint32_t compression = le32(data + 30);
  if (compression != 0 && !(compression == 3 && bpp == 32))
    return unsupported("compressed BMP (compression %u)", compression);
  if (bpp != 8 && bpp != 24 && bpp != 32) return unsupported("BMP of %u bits per pixel", bpp);
  const bool bottom_up = h_signed > 0;
  const int64_t h = bottom_up ? h_signed : -static_cast<int64_t>(h_signed);
  KILN_RETURN_IF_ERROR(check_size(w, h, "BMP"));
  const uint64_t stride = (static_cast<uint64_t>(w) * bpp + 31) / 32 * 4;
  if (offset > size || stride * static_cast<uint64_t>(h) > size - offset)
    return invalid_argument("BMP pixel data is truncated");
  std::vector<uint8_t> palette;
  if (bpp == 8) {
    uint32_t colors = le32(data + 46);
    if (colors == 0 || colors > 256) colors = 256;
    const uint64_t pal = 14 + static_cast<uint64_t>(header);
    if (pal + colors * 4ull > offset) return invalid_argument("BMP palette is truncated");
    palette.assign(data + pal, data + pal + colors * 4);
  }
  Image image;
  image.width = w;
  image.height = h;
  image.rgb.resize(static_cast<size_t>(w * h * 3));
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* row = data + offset + stride * static_cast<uint64_t>(bottom_up ? h - 1 - y : y);
    uint8_t* out = image.rgb.data() + y * w * 3;
    for (int64_t x = 0; x < w; ++x) {
      const uint8_t* px;
      if (bpp == 8) {
        size_t idx = row[x] * 4u;
        if (idx + 3 >= palette.size())
          return invalid_argument("BMP pixel uses colour %u past the palette", row[x]);
        px = &palette[idx];
      } else {
        px = row + x * (bpp / 8);
      }
      out[x * 3] = px[2];  // stored as B, G, R
      out[x * 3 + 1] = px[1];
      out[x * 3 + 2] = px[0];
    }
  }
  return image;
}

// ---- PNM -----------------------------------------------------------------------------

// P2/P3 (ASCII) and P5/P6 (binary) with maxval 255.
Expected<Image> decode_pnm(const uint8_t* data, size_t size) {
  const char kind = static_cast<char>(data[1]);
  size_t pos = 2;
  auto next_number = [&](int64_t* out) -> bool {
    while (pos < size) {
      if (data[pos] == '#') {
        while (pos < size && data[pos] != '\n') ++pos;
      } else if (std::isspace(data[pos])) {
        ++pos;
      } else {
        break;
      }
    }
    if (pos >= size || !std::isdigit(data[pos])) return false;
    int64_t v = 0;
    while (pos < size && std::isdigit(data[pos]) && v < (int64_t{1} << 40))
      v = v * 10 + (data[pos++] - '0');
    *out = v;
    return true;
  };
  int64_t w, h, maxval;
  if (!next_number(&w) || !next_number(&h) || !next_number(&maxval))
    return invalid_argument("PNM header is malformed");
  KILN_RETURN_IF_ERROR(check_size(w, h, "PNM"));
  if (maxval != 255)
    return unsupported("PNM with maxval %lld (only 255 is supported)", (long long)maxval);
  const int channels = kind == '3' || kind == '6' ? 3 : 1;
  const bool binary = kind == '5' || kind == '6';
  Image image;
  image.width = w;
  image.height = h;
  image.rgb.resize(static_cast<size_t>(w * h * 3));
  const int64_t count = w * h * channels;
  if (binary) {
    ++pos;  // the single whitespace after maxval
    if (pos > size || size - pos < static_cast<size_t>(count))
      return invalid_argument("PNM pixel data is truncated");
  }
  for (int64_t i = 0; i < count; ++i) {
    int64_t v;
    if (binary) {
      v = data[pos + static_cast<size_t>(i)];
    } else if (!next_number(&v) || v > 255) {
      return invalid_argument("PNM pixel data is malformed or truncated");
    }
    if (channels == 3) {
      image.rgb[static_cast<size_t>(i)] = static_cast<uint8_t>(v);
    } else {
      for (int c = 0; c < 3; ++c)
        image.rgb[static_cast<size_t>(i * 3 + c)] = static_cast<uint8_t>(v);
    }
  }
  return image;
}

// ---- the op --------------------------------------------------------------------------

Expected<Image> decode(const uint8_t* d, size_t n) {
  if (starts_with(d, n, "\xFF\xD8\xFF", 3)) return decode_jpeg(d, n);
  if (starts_with(d, n, "\x89PNG\r\n\x1A\n", 8)) return decode_png(d, n);
  if (n >= 12 && starts_with(d, n, "RIFF", 4) && std::memcmp(d + 8, "WEBP", 4) == 0)
    return decode_webp(d, n);
  if (starts_with(d, n, "II*\0", 4) || starts_with(d, n, "MM\0*", 4)) return decode_tiff(d, n);
  if (starts_with(d, n, "\0\0\0\x0CjP  \r\n\x87\n", 12)) return decode_jpeg2000(d, n, false);
  if (starts_with(d, n, "\xFF\x4F\xFF\x51", 4)) return decode_jpeg2000(d, n, true);
  if (starts_with(d, n, "BM", 2)) return decode_bmp(d, n);
  if (n >= 3 && d[0] == 'P' && (d[1] == '2' || d[1] == '3' || d[1] == '5' || d[1] == '6') &&
      std::isspace(d[2]))
    return decode_pnm(d, n);
  return unsupported(
      "unknown image format (supported: JPEG, PNG, WebP, TIFF, JPEG 2000, BMP, PNM)");
}

Expected<std::string> pixel_format(const ir::Node& node) {
  std::string f = node.attr_string("pixel_format", "RGB");
  if (f != "RGB" && f != "BGR" && f != "Grayscale")
    return invalid_argument("node %s: pixel_format '%s' is not RGB, BGR or Grayscale",
                            node.label().c_str(), f.c_str());
  return f;
}

Status image_decoder_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.dtype() != DataType::kUInt8 || x.rank() != 1)
    return invalid_argument("node %s: input must be a 1-D uint8 tensor, got %s",
                            node.label().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(std::string format, pixel_format(node));
  KILN_ASSIGN_OR_RETURN(Image image,
                        decode(x.data<uint8_t>(), static_cast<size_t>(x.num_elements())), "node %s",
                        node.label().c_str());
  const int64_t pixels = image.width * image.height;
  const int64_t channels = format == "Grayscale" ? 1 : 3;
  KILN_ASSIGN_OR_RETURN(
      Tensor * y, ctx.allocate_output(0, DataType::kUInt8, {image.height, image.width, channels}));
  uint8_t* out = y->data<uint8_t>();
  const uint8_t* rgb = image.rgb.data();
  for (int64_t i = 0; i < pixels; ++i) {
    const uint8_t r = rgb[i * 3], g = rgb[i * 3 + 1], b = rgb[i * 3 + 2];
    if (format == "Grayscale") {
      // ITU-R 601-2 luma in Pillow's fixed point: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16.
      out[i] = static_cast<uint8_t>((19595u * r + 38470u * g + 7471u * b + 0x8000u) >> 16);
    } else if (format == "BGR") {
      out[i * 3] = b, out[i * 3 + 1] = g, out[i * 3 + 2] = r;
    } else {
      out[i * 3] = r, out[i * 3 + 1] = g, out[i * 3 + 2] = b;
    }
  }
  return ok_status();
}

Status infer_image_decoder(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(std::string format, pixel_format(ctx.node()));
  if (ctx.has_input(0) && ctx.input_type(0).dtype != DataType::kUndefined &&
      ctx.input_type(0).dtype != DataType::kUInt8)
    return invalid_argument("node %s: input must be uint8, got %s", ctx.node().label().c_str(),
                            dtype_name(ctx.input_type(0).dtype));
  ctx.set_output(0, DataType::kUInt8, Shape{Dim(), Dim(), Dim(format == "Grayscale" ? 1 : 3)});
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("ImageDecoder")
                     .since(20)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("pixel_format", ir::AttrKind::kString)
                     .infer(infer_image_decoder)
                     .kernel(image_decoder_kernel));

}  // namespace

Expected<RgbImage> decode_image_bytes(const uint8_t* data, size_t size) { return decode(data, size); }

}  // namespace kiln::ops
