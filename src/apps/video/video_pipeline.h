// The multi-stream video analytics pipeline behind `kiln video-bench` (docs/video.md).
//
// N streams, each a decode thread (video_decoder.h) that plays its file as a real-time
// source: frame k becomes available at k / fps seconds, is decoded into NV12 and offered to
// the stream's bounded queue; a frame that finds the queue full is dropped and counted.
// Streams are spread over the runtime's devices (stream i on device i % D). Each device has
// one inference worker with a copy stream and a compute stream (Kiln streams) and two
// slots: while the model runs on one slot's frame (compute stream), the next frame, from
// the next stream with one waiting, is uploaded into the other slot (copy stream; the
// compute stream waits on its event), so uploads overlap compute as DMA does.
//
// The model's input decides the preprocessing:
//  - uint8 [1, H*3/2, W] (a model compiled with an AIPP config, input_format YUV420SP_U8):
//    the NV12 frame is uploaded as it is and the model's Aipp node converts it;
//  - float32 [1, 3, H, W]: the frame is preprocessed on the host with OpenCV
//    (nv12_preprocess.h) and the float tensor uploaded (the baseline).
//
// Measured: per stream frames decoded / inferred / dropped, achieved fps, latency from
// decode-complete to the result on the host (p50, p99); process CPU time by stage: decode
// (decode threads' CPU clocks), preprocessing (OpenCV: the worker's CPU clock around it;
// AIPP: the Aipp ops' share of the model's op time in Kiln's profiler, of a folded AippConv
// only its Aipp rows, applied to the inference side's CPU time), inference (the rest of the process's CPU time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "apps/video/nv12_preprocess.h"
#include "core/status.h"

namespace kiln::video {

struct VideoPipelineOptions {
  std::string model_path;
  std::vector<std::string> videos;  // stream i plays videos[i % size]
  int streams = 1;
  double fps = 25;
  double duration_s = 0;  // 0: each file once; else this long (files replayed from the start)
  int queue_frames = 2;   // per stream, frames waiting for inference
  Normalization normalization;  // the OpenCV baseline's
  bool profile_ops = true;      // Kiln's profiler on, for the AIPP share of preprocessing
};

struct StreamReport {
  int index = 0;
  int device = 0;
  std::string video;
  int width = 0, height = 0;
  int64_t frames_decoded = 0;
  int64_t frames_inferred = 0;
  int64_t frames_dropped = 0;
  double fps = 0;  // inferred frames per second, first to last result
  double latency_p50_ms = 0, latency_p99_ms = 0;
  double decode_cpu_s = 0;
  std::string error;  // empty when the stream ran to its end
};

struct VideoPipelineReport {
  bool aipp = false;               // the model takes NV12 (AIPP) rather than a float tensor
  std::string input_description;   // "x uint8 [1,1620,1920] (NV12 1920x1080, AIPP)"
  int model_width = 0, model_height = 0;  // the network's input size (AIPP: the frame size)
  int devices = 0;
  double wall_s = 0;
  double fps_target = 0;
  std::vector<StreamReport> streams;
  // Process CPU seconds over the run, and the split.
  double cpu_process_s = 0, cpu_decode_s = 0, cpu_preprocess_s = 0, cpu_inference_s = 0;
  double aipp_op_share = 0;  // Aipp ops' (AippConv's Aipp rows') share of all op time in the profile (AIPP models)
  bool preprocess_from_profiler = false;
  // Every stream inferred every frame at the target rate: no drops, no errors, fps >= 97%
  // of the target.
  bool sustained = false;
};

// kilnInit must have been called (the devices are the runtime's). Fails only when nothing
// can run (model or a video unusable before the start); a stream failing mid-run has its
// error in its report while the others go on.
Expected<VideoPipelineReport> run_video_pipeline(const VideoPipelineOptions& options);

}  // namespace kiln::video
