/*
 * video_analytics: runs a model on every frame of an H.264 video, with the image
 * preprocessing compiled into the model (AIPP): the program hands the decoded NV12 frame to
 * the model as it is, and the model's Aipp node converts, resizes and normalises it.
 *
 *   kiln compile model.onnx --insert-op-conf aipp.cfg -o model.kiln   (input_format: YUV420SP_U8,
 *   src_image_size_w/h: the video's size; docs/aipp.md)
 *
 *   FFmpeg: avformat_open_input -> avcodec_send_packet / avcodec_receive_frame (yuv420p)
 *   -> NV12 in page-locked host memory
 *   Kiln:   kilnInit -> kilnrtSetDevice -> two streams (copy, compute) -> kilnmdlLoadFromFile
 *   -> per frame: kilnrtMemcpyAsync on the copy stream, kilnrtRecordEvent, kilnrtStreamWaitEvent
 *   on the compute stream, kilnmdlExecuteAsync -> kilnrtSynchronizeEvent a frame later
 *   (two slots: frame n+1 is uploaded while frame n computes) -> kilnFinalize.
 *
 * Usage: video_analytics MODEL.kiln VIDEO
 *   Prints the arg-max of output 0 every 25 frames, then `N frames, F fps, mean latency L ms`.
 *   Exit status 0, or 1 on any error (one line: the FFmpeg or Kiln message, with the frame).
 */
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kiln/kiln.h"

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    kilnError e_ = (call);                                                                           \
    if (e_ != KILN_SUCCESS) {                                                                        \
      fprintf(stderr, "video_analytics: %s failed (error %d): %s\n", #call, e_, kilnGetRecentErrMsg()); \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One frame in flight: its NV12 bytes on the host and the device, the output, the events. */
typedef struct {
  uint8_t* host_nv12;
  void* device_nv12;
  void* device_out;
  float* host_out;
  kilnmdlDataset* inputs;
  kilnmdlDataset* outputs;
  kilnrtEvent uploaded, done;
  long frame; /* -1: free */
  double start_ms;
} Slot;

/* yuv420p -> NV12: the Y rows, then U and V interleaved. */
static void to_nv12(const AVFrame* f, int w, int h, uint8_t* dst) {
  for (int y = 0; y < h; ++y) memcpy(dst + (size_t)y * w, f->data[0] + y * f->linesize[0], (size_t)w);
  uint8_t* uv = dst + (size_t)w * h;
  for (int y = 0; y < h / 2; ++y)
    for (int x = 0; x < w / 2; ++x) {
      uv[(size_t)y * w + 2 * x] = f->data[1][y * f->linesize[1] + x];
      uv[(size_t)y * w + 2 * x + 1] = f->data[2][y * f->linesize[2] + x];
    }
}

static long argmax(const float* v, size_t n) {
  long best = 0;
  for (size_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = (long)i;
  return best;
}

/* Waits for a slot's frame and prints its class every 25 frames. */
static int finish(Slot* s, size_t out_count, double* latency_sum) {
  if (s->frame < 0) return 0;
  if (kilnrtSynchronizeEvent(s->done) != KILN_SUCCESS) {
    fprintf(stderr, "video_analytics: frame %ld: %s\n", s->frame, kilnGetRecentErrMsg());
    return 1;
  }
  *latency_sum += now_ms() - s->start_ms;
  if (s->frame % 25 == 0) printf("frame %ld: class %ld\n", s->frame, argmax(s->host_out, out_count));
  s->frame = -1;
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL.kiln VIDEO\n", argv[0]);
    return 1;
  }
  int status = 1;
  AVFormatContext* format = NULL;
  AVCodecContext* codec = NULL;
  AVPacket* packet = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  kilnrtStream copy = NULL, compute = NULL;
  kilnmdlDesc* desc = NULL;
  uint32_t model = 0;
  int loaded = 0;
  Slot slots[2];
  memset(slots, 0, sizeof(slots));
  slots[0].frame = slots[1].frame = -1;
  long frames = 0;
  double latency_sum = 0, start = 0;

  av_log_set_level(AV_LOG_QUIET); /* errors are reported below, one line each */
  CHECK(kilnInit(NULL));
  CHECK(kilnrtSetDevice(0));
  CHECK(kilnrtCreateStream(&copy));
  CHECK(kilnrtCreateStream(&compute));
  CHECK(kilnmdlLoadFromFile(argv[1], &model));
  loaded = 1;
  desc = kilnmdlCreateDesc();
  CHECK(kilnmdlGetDesc(desc, model));
  size_t in_bytes = kilnmdlGetInputSizeByIndex(desc, 0);
  size_t out_bytes = kilnmdlGetOutputSizeByIndex(desc, 0);
  if (kilnmdlGetInputDataType(desc, 0) != KILN_UINT8) {
    fprintf(stderr, "video_analytics: %s does not take an NV12 image; compile it with --insert-op-conf\n", argv[1]);
    goto done;
  }

  int e = avformat_open_input(&format, argv[2], NULL, NULL);
  if (e >= 0) e = avformat_find_stream_info(format, NULL);
  const AVCodec* decoder = NULL;
  int stream_index = e >= 0 ? av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0) : e;
  if (stream_index < 0 || !decoder) {
    fprintf(stderr, "video_analytics: %s: not a readable video (%s)\n", argv[2], av_err2str(stream_index < 0 ? stream_index : e));
    goto done;
  }
  codec = avcodec_alloc_context3(decoder);
  avcodec_parameters_to_context(codec, format->streams[stream_index]->codecpar);
  if (avcodec_open2(codec, decoder, NULL) < 0) {
    fprintf(stderr, "video_analytics: cannot open the %s decoder\n", decoder->name);
    goto done;
  }
  int w = codec->width, h = codec->height;
  if ((size_t)w * h * 3 / 2 != in_bytes) {
    fprintf(stderr, "video_analytics: the video is %dx%d; the model's AIPP input takes %zu bytes of NV12\n", w, h,
            in_bytes);
    goto done;
  }
  for (int i = 0; i < 2; ++i) {
    Slot* s = &slots[i];
    CHECK(kilnrtMallocHost((void**)&s->host_nv12, in_bytes));
    CHECK(kilnrtMallocHost((void**)&s->host_out, out_bytes));
    CHECK(kilnrtMalloc(&s->device_nv12, in_bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    CHECK(kilnrtMalloc(&s->device_out, out_bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    s->inputs = kilnmdlCreateDataset();
    s->outputs = kilnmdlCreateDataset();
    CHECK(kilnmdlAddDatasetBuffer(s->inputs, kilnCreateDataBuffer(s->device_nv12, in_bytes)));
    CHECK(kilnmdlAddDatasetBuffer(s->outputs, kilnCreateDataBuffer(s->device_out, out_bytes)));
    CHECK(kilnrtCreateEvent(&s->uploaded));
    CHECK(kilnrtCreateEvent(&s->done));
  }

  start = now_ms();
  for (int flushing = 0;;) {
    e = avcodec_receive_frame(codec, frame);
    if (e == AVERROR_EOF) break;
    if (e == AVERROR(EAGAIN)) {
      if (flushing) break;
      e = av_read_frame(format, packet);
      if (e == AVERROR_EOF) {
        flushing = 1;
        avcodec_send_packet(codec, NULL);
      } else if (e < 0) {
        fprintf(stderr, "video_analytics: frame %ld: cannot read the file (%s)\n", frames, av_err2str(e));
        goto done;
      } else {
        if (packet->stream_index == stream_index && (e = avcodec_send_packet(codec, packet)) < 0) {
          fprintf(stderr, "video_analytics: frame %ld: corrupt data (%s)\n", frames, av_err2str(e));
          goto done;
        }
        av_packet_unref(packet);
      }
      continue;
    }
    if (e < 0) {
      fprintf(stderr, "video_analytics: frame %ld: corrupt data (%s)\n", frames, av_err2str(e));
      goto done;
    }
    if (frame->width != w || frame->height != h || frame->format != AV_PIX_FMT_YUV420P) {
      fprintf(stderr, "video_analytics: frame %ld: %dx%d %s, expected %dx%d yuv420p\n", frames, frame->width,
              frame->height, av_get_pix_fmt_name(frame->format), w, h);
      goto done;
    }
    Slot* s = &slots[frames % 2];
    if (finish(s, out_bytes / sizeof(float), &latency_sum)) goto done; /* the slot's previous frame */
    s->start_ms = now_ms();
    to_nv12(frame, w, h, s->host_nv12);
    av_frame_unref(frame);
    /* Upload on the copy stream while the other slot's frame computes; the compute stream
     * waits for the upload, runs the model and copies the output back. */
    CHECK(kilnrtMemcpyAsync(s->device_nv12, in_bytes, s->host_nv12, in_bytes, KILN_MEMCPY_HOST_TO_DEVICE, copy));
    CHECK(kilnrtRecordEvent(s->uploaded, copy));
    CHECK(kilnrtStreamWaitEvent(compute, s->uploaded));
    CHECK(kilnmdlExecuteAsync(model, s->inputs, s->outputs, compute));
    CHECK(kilnrtMemcpyAsync(s->host_out, out_bytes, s->device_out, out_bytes, KILN_MEMCPY_DEVICE_TO_HOST, compute));
    CHECK(kilnrtRecordEvent(s->done, compute));
    s->frame = frames++;
  }
  if (finish(&slots[frames % 2], out_bytes / sizeof(float), &latency_sum) ||
      finish(&slots[(frames + 1) % 2], out_bytes / sizeof(float), &latency_sum))
    goto done;
  double ms = now_ms() - start;
  printf("%ld frames, %.1f fps, mean latency %.2f ms\n", frames, ms > 0 ? 1e3 * (double)frames / ms : 0,
         frames ? latency_sum / (double)frames : 0);
  status = 0;

done:
  if (compute) kilnrtSynchronizeStream(compute);
  for (int i = 0; i < 2; ++i) {
    Slot* s = &slots[i];
    if (s->inputs) {
      kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(s->inputs, 0));
      kilnmdlDestroyDataset(s->inputs);
    }
    if (s->outputs) {
      kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(s->outputs, 0));
      kilnmdlDestroyDataset(s->outputs);
    }
    if (s->device_nv12) kilnrtFree(s->device_nv12);
    if (s->device_out) kilnrtFree(s->device_out);
    if (s->host_nv12) kilnrtFreeHost(s->host_nv12);
    if (s->host_out) kilnrtFreeHost(s->host_out);
    if (s->uploaded) kilnrtDestroyEvent(s->uploaded);
    if (s->done) kilnrtDestroyEvent(s->done);
  }
  if (desc) kilnmdlDestroyDesc(desc);
  if (loaded) kilnmdlUnload(model);
  if (copy) kilnrtDestroyStream(copy);
  if (compute) kilnrtDestroyStream(compute);
  kilnFinalize();
  avcodec_free_context(&codec);
  if (format) avformat_close_input(&format);
  av_frame_free(&frame);
  av_packet_free(&packet);
  return status;
}
