#include "apps/video/video_decoder.h"

#include "apps/video/libav.h"

#include <cstdarg>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace kiln::video {
namespace {

// FFmpeg, loaded by the first VideoDecoder::open (libav.h); every other use of it is on a
// decoder that open returned, so after that.
const LibAv* g_libav = nullptr;
const LibAv& lav() { return *g_libav; }

// FFmpeg's own lines are not printed; the last error-level one of this thread (decoding
// runs on the caller's thread) is kept to explain a failure.
thread_local std::string t_last_av_message;

void av_log_to_thread(void* avcl, int level, const char* fmt, va_list args) {
  if (level > AV_LOG_ERROR) return;
  char line[512];
  int print_prefix = 0;
  lav().av_log_format_line2(avcl, level, fmt, args, line, sizeof(line), &print_prefix);
  std::string text(line);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (!text.empty()) t_last_av_message = text;
}

Status load_ffmpeg() {
  KILN_ASSIGN_OR_RETURN(const LibAv* loaded, libav());
  static std::once_flag once;
  std::call_once(once, [loaded] {
    g_libav = loaded;
    lav().av_log_set_level(AV_LOG_ERROR);
    lav().av_log_set_callback(av_log_to_thread);
  });
  return ok_status();
}

std::string av_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  lav().av_strerror(error, text, sizeof(text));
  return text;
}

// Y rows as they are; U and V (each width/2 x height/2) interleaved into the UV plane.
void yuv420p_to_nv12(const AVFrame* f, int width, int height, uint8_t* dst) {
  for (int y = 0; y < height; ++y) std::memcpy(dst + static_cast<size_t>(y) * width, f->data[0] + y * f->linesize[0], width);
  uint8_t* uv = dst + static_cast<size_t>(width) * height;
  int half_w = width / 2;
  for (int y = 0; y < height / 2; ++y) {
    const uint8_t* u = f->data[1] + y * f->linesize[1];
    const uint8_t* v = f->data[2] + y * f->linesize[2];
    uint8_t* row = uv + static_cast<size_t>(y) * width;
    for (int x = 0; x < half_w; ++x) {
      row[2 * x] = u[x];
      row[2 * x + 1] = v[x];
    }
  }
}

void nv12_copy(const AVFrame* f, int width, int height, uint8_t* dst) {
  for (int y = 0; y < height; ++y) std::memcpy(dst + static_cast<size_t>(y) * width, f->data[0] + y * f->linesize[0], width);
  uint8_t* uv = dst + static_cast<size_t>(width) * height;
  for (int y = 0; y < height / 2; ++y) std::memcpy(uv + static_cast<size_t>(y) * width, f->data[1] + y * f->linesize[1], width);
}

}  // namespace

struct VideoDecoder::Impl {
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVPacket* packet = nullptr;
  AVFrame* frame = nullptr;
  int stream_index = -1;
  bool input_ended = false;  // no more packets; the decoder was sent the flush
  ~Impl() {
    lav().av_frame_free(&frame);
    lav().av_packet_free(&packet);
    lav().avcodec_free_context(&codec);
    if (format) lav().avformat_close_input(&format);
  }
};

VideoDecoder::VideoDecoder() : impl_(std::make_unique<Impl>()) {}
VideoDecoder::~VideoDecoder() = default;

Status VideoDecoder::fail(const char* what, int av_error) {
  std::string detail = av_error ? av_error_text(av_error) : std::string();
  if (!t_last_av_message.empty()) detail += (detail.empty() ? "" : ": ") + t_last_av_message;
  t_last_av_message.clear();
  return data_loss("%s: frame %lld: %s%s%s", path_.c_str(), static_cast<long long>(decoded_), what,
                   detail.empty() ? "" : " (", detail.empty() ? "" : (detail + ")").c_str());
}

Expected<std::unique_ptr<VideoDecoder>> VideoDecoder::open(const std::string& path) {
  KILN_RETURN_IF_ERROR(load_ffmpeg());
  t_last_av_message.clear();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return not_found("%s: no such file", path.c_str());
  if (std::filesystem::is_directory(path, ec)) return invalid_argument("%s: is a directory, not a video", path.c_str());
  std::unique_ptr<VideoDecoder> d(new VideoDecoder());
  d->path_ = path;
  Impl& m = *d->impl_;
  auto opening_error = [&](const char* what, int error) {
    std::string detail = error ? av_error_text(error) : std::string();
    if (!t_last_av_message.empty()) detail += (detail.empty() ? "" : ": ") + t_last_av_message;
    t_last_av_message.clear();
    return data_loss("%s: %s%s%s%s", path.c_str(), what, detail.empty() ? "" : " (", detail.c_str(),
                     detail.empty() ? "" : ")");
  };
  int e = lav().avformat_open_input(&m.format, path.c_str(), nullptr, nullptr);
  if (e < 0) return opening_error("not a readable video file", e);
  e = lav().avformat_find_stream_info(m.format, nullptr);
  if (e < 0) return opening_error("cannot read the stream information (truncated or corrupt?)", e);
  const AVCodec* codec = nullptr;
  m.stream_index = lav().av_find_best_stream(m.format, AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (m.stream_index < 0) return opening_error("holds no video stream", 0);
  if (!codec) return opening_error("no decoder for its video codec", 0);
  AVStream* stream = m.format->streams[m.stream_index];
  m.codec = lav().avcodec_alloc_context3(codec);
  if (!m.codec) return resource_exhausted("%s: cannot allocate a decoder", path.c_str());
  e = lav().avcodec_parameters_to_context(m.codec, stream->codecpar);
  if (e < 0) return opening_error("bad codec parameters", e);
  m.codec->thread_count = 1;                 // one stream, one thread (its CPU time is measured)
  m.codec->err_recognition |= AV_EF_EXPLODE;  // corrupt data is an error, not concealed
  m.codec->flags2 |= AV_CODEC_FLAG2_SHOW_ALL;
  m.codec->flags &= ~AV_CODEC_FLAG_OUTPUT_CORRUPT;
  e = lav().avcodec_open2(m.codec, codec, nullptr);
  if (e < 0) return opening_error(str_format("cannot open the %s decoder", codec->name).c_str(), e);
  m.packet = lav().av_packet_alloc();
  m.frame = lav().av_frame_alloc();
  if (!m.packet || !m.frame) return resource_exhausted("%s: cannot allocate decoder buffers", path.c_str());
  d->width_ = m.codec->width;
  d->height_ = m.codec->height;
  if (d->width_ <= 0 || d->height_ <= 0) return opening_error("the video stream states no frame size", 0);
  if (d->width_ % 2 || d->height_ % 2)
    return invalid_argument("%s: frame size %dx%d is odd; NV12 needs even width and height", path.c_str(), d->width_,
                            d->height_);
  AVRational rate = lav().av_guess_frame_rate(m.format, stream, nullptr);
  d->fps_ = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
  d->frame_count_ = stream->nb_frames > 0 ? stream->nb_frames : 0;
  return d;
}

Expected<bool> VideoDecoder::next(Nv12Frame* out) {
  Impl& m = *impl_;
  for (;;) {
    int e = lav().avcodec_receive_frame(m.codec, m.frame);
    if (e == 0) break;
    if (e == AVERROR_EOF) {
      // The container said how many frames there are: fewer means the file was cut short.
      if (frame_count_ > 0 && decoded_pass_ < frame_count_)
        return fail(str_format("the file ends early: %lld of the %lld frames it states were decoded (truncated?)",
                               static_cast<long long>(decoded_pass_), static_cast<long long>(frame_count_))
                        .c_str(),
                    0);
      return false;
    }
    if (e != AVERROR(EAGAIN)) return fail("corrupt video data", e);
    if (m.input_ended) return fail("decoder stalled at the end of the file", 0);
    e = lav().av_read_frame(m.format, m.packet);
    if (e == AVERROR_EOF) {
      m.input_ended = true;
      e = lav().avcodec_send_packet(m.codec, nullptr);
      if (e < 0 && e != AVERROR_EOF) return fail("corrupt video data", e);
      continue;
    }
    if (e < 0) return fail("cannot read the file (truncated or corrupt)", e);
    if (m.packet->stream_index != m.stream_index) {
      lav().av_packet_unref(m.packet);
      continue;
    }
    if (m.packet->flags & AV_PKT_FLAG_CORRUPT) {
      lav().av_packet_unref(m.packet);
      return fail("the file is damaged or cut short here (the demuxer marked the packet corrupt)", 0);
    }
    e = lav().avcodec_send_packet(m.codec, m.packet);
    lav().av_packet_unref(m.packet);
    if (e < 0 && e != AVERROR(EAGAIN)) return fail("corrupt video data", e);
  }
  const AVFrame* f = m.frame;
  struct Unref {
    AVFrame* f;
    ~Unref() { lav().av_frame_unref(f); }
  } unref{m.frame};
  if ((f->flags & AV_FRAME_FLAG_CORRUPT) || f->decode_error_flags) return fail("corrupt video data", 0);
  if (f->width != width_ || f->height != height_)
    return fail(str_format("frame size changed from %dx%d to %dx%d mid-stream", width_, height_, f->width, f->height)
                    .c_str(),
                0);
  AVPixelFormat format = static_cast<AVPixelFormat>(f->format);
  size_t bytes = static_cast<size_t>(width_) * height_ * 3 / 2;
  out->data.resize(bytes);
  if (format == AV_PIX_FMT_YUV420P || format == AV_PIX_FMT_YUVJ420P) {
    yuv420p_to_nv12(f, width_, height_, out->data.data());
  } else if (format == AV_PIX_FMT_NV12) {
    nv12_copy(f, width_, height_, out->data.data());
  } else {
    const char* name = lav().av_get_pix_fmt_name(format);
    return fail(str_format("pixel format %s is not 8-bit 4:2:0 (yuv420p or nv12)", name ? name : "unknown").c_str(), 0);
  }
  out->width = width_;
  out->height = height_;
  out->index = decoded_;
  ++decoded_;
  ++decoded_pass_;
  return true;
}

Status VideoDecoder::rewind() {
  Impl& m = *impl_;
  int e = lav().av_seek_frame(m.format, m.stream_index, 0, AVSEEK_FLAG_BACKWARD);
  if (e < 0) e = lav().avformat_seek_file(m.format, m.stream_index, INT64_MIN, 0, 0, 0);
  if (e < 0) return fail("cannot seek back to the start", e);
  lav().avcodec_flush_buffers(m.codec);
  m.input_ended = false;
  decoded_pass_ = 0;
  return ok_status();
}

}  // namespace kiln::video
