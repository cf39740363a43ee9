// FFmpeg's decoding libraries, loaded on first use (dlopen) instead of linked.
//
// Linking libavformat/libavcodec brings about 130 more shared libraries into every process
// that links Kiln's apps (the kiln command, the Python module): encoders, TLS, X11, cairo...
// Measured on Debian 12: a program that only links them starts in 50 ms instead of 10 ms and
// peaks at 28 MiB of RSS instead of under 2 MiB, which every `kiln run`, `kiln compile` and
// `import kiln` paid without decoding a single frame. Only video decoding (video_decoder.cc)
// needs them, so it loads them when it opens its first file; a machine without them gets an
// error naming the package, not a failure to start.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/pixdesc.h>
}

#include "core/status.h"

namespace kiln::video {

// The FFmpeg functions video_decoder.cc calls; the X-macro names each with its library.
#define KILN_LIBAV_FUNCTIONS(X)             \
  X(avutil, av_frame_alloc)                 \
  X(avutil, av_frame_free)                  \
  X(avutil, av_frame_unref)                 \
  X(avutil, av_get_pix_fmt_name)            \
  X(avutil, av_log_format_line2)            \
  X(avutil, av_log_set_callback)            \
  X(avutil, av_log_set_level)               \
  X(avutil, av_strerror)                    \
  X(avcodec, av_packet_alloc)               \
  X(avcodec, av_packet_free)                \
  X(avcodec, av_packet_unref)               \
  X(avcodec, avcodec_alloc_context3)        \
  X(avcodec, avcodec_flush_buffers)         \
  X(avcodec, avcodec_free_context)          \
  X(avcodec, avcodec_open2)                 \
  X(avcodec, avcodec_parameters_to_context) \
  X(avcodec, avcodec_receive_frame)         \
  X(avcodec, avcodec_send_packet)           \
  X(avformat, av_find_best_stream)          \
  X(avformat, av_guess_frame_rate)          \
  X(avformat, av_read_frame)                \
  X(avformat, av_seek_frame)                \
  X(avformat, avformat_close_input)         \
  X(avformat, avformat_find_stream_info)    \
  X(avformat, avformat_open_input)          \
  X(avformat, avformat_seek_file)

struct LibAv {
#define KILN_LIBAV_MEMBER(lib, fn) decltype(&::fn) fn = nullptr;
  KILN_LIBAV_FUNCTIONS(KILN_LIBAV_MEMBER)
#undef KILN_LIBAV_MEMBER
};

// The loaded functions (loaded once per process, then kept), or an error naming the library
// that is missing and the Debian package that has it.
Expected<const LibAv*> libav();

}  // namespace kiln::video
