// Software H.264 (and any codec FFmpeg's libavcodec decodes) from a file into NV12 frames,
// the layout of a camera or hardware decoder and of the AIPP input YUV420SP_U8: a Y plane
// of `height` rows of `width` bytes, then `height / 2` rows of interleaved U,V, tightly
// packed (width * height * 3 / 2 bytes).
//
// Decoding is single-threaded (one stream, one thread: its CPU time is the thread's), and
// FFmpeg prints nothing: every failure comes back as a Status of one line naming the file
// and the frame (missing, not a video, truncated, corrupt data, a frame size change).
// Corrupt data is an error rather than concealed: a stream whose frames are wrong is
// reported, not analysed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln::video {

struct Nv12Frame {
  int width = 0;
  int height = 0;
  int64_t index = 0;          // 0-based, counted from the start of the file (and over loops)
  std::vector<uint8_t> data;  // width * height * 3 / 2 bytes
};

class VideoDecoder {
 public:
  // Opens `path` and its first video stream; frames must have even width and height.
  static Expected<std::unique_ptr<VideoDecoder>> open(const std::string& path);
  ~VideoDecoder();
  VideoDecoder(const VideoDecoder&) = delete;
  VideoDecoder& operator=(const VideoDecoder&) = delete;

  // The next frame into `frame` (its buffer reused): true, or false at the end of the file.
  // A frame whose size differs from the first frame's is an error naming it.
  Expected<bool> next(Nv12Frame* frame);
  // Back to the first frame (for a benchmark running longer than the file); frame numbers
  // keep counting.
  Status rewind();

  int width() const { return width_; }
  int height() const { return height_; }
  // Frames per second the container states (0 when unknown).
  double fps() const { return fps_; }
  // Frames the container says the stream has (0 when it does not say).
  int64_t frame_count() const { return frame_count_; }
  // Frames returned so far.
  int64_t frames_decoded() const { return decoded_; }
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  VideoDecoder();
  Status fail(const char* what, int av_error);
  std::unique_ptr<Impl> impl_;
  std::string path_;
  int width_ = 0, height_ = 0;
  double fps_ = 0;
  int64_t frame_count_ = 0;
  int64_t decoded_ = 0;       // over the whole run
  int64_t decoded_pass_ = 0;  // since the last rewind
};

}  // namespace kiln::video
