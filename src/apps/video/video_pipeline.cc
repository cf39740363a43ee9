#include "apps/video/video_pipeline.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "apps/video/video_decoder.h"
#include "kiln/kiln.h"
#include "ops/aipp.h"
#include "profiler/profiler.h"
#include "profiler/records.h"

namespace kiln::video {
namespace {

using Clock = std::chrono::steady_clock;

double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double thread_cpu_s() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }
double process_cpu_s() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

std::string api_message(const char* call) {
  const char* m = kilnGetRecentErrMsg();
  return m && *m ? std::string(m) : std::string(call) + " failed";
}

#define VIDEO_API_CHECK(call)                                                          \
  do {                                                                                 \
    if ((call) != KILN_SUCCESS) return internal_error("%s", api_message(#call).c_str()); \
  } while (0)

// What the model's input 0 takes.
struct ModelInput {
  bool aipp = false;
  int width = 0, height = 0;  // AIPP: the NV12 frame's; else the network's H, W
  size_t bytes = 0;
  std::vector<size_t> output_bytes;
  std::string description;
};

Expected<ModelInput> describe_model(uint32_t model_id, const std::string& path) {
  ModelInput in;
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  if (!desc) return resource_exhausted("cannot create a model description");
  struct DescGuard {
    kilnmdlDesc* d;
    ~DescGuard() { kilnmdlDestroyDesc(d); }
  } guard{desc};
  VIDEO_API_CHECK(kilnmdlGetDesc(desc, model_id));
  size_t inputs = kilnmdlGetNumInputs(desc);
  if (inputs != 1)
    return invalid_argument("%s: the model has %zu inputs; a video pipeline feeds it one image input", path.c_str(),
                            inputs);
  kilnmdlIODims dims{};
  VIDEO_API_CHECK(kilnmdlGetInputDims(desc, 0, &dims));
  std::vector<int64_t> d(dims.dims, dims.dims + dims.dimCount);
  std::string shape = "[";
  for (size_t i = 0; i < d.size(); ++i) shape += (i ? "," : "") + std::to_string(d[i]);
  shape += "]";
  for (int64_t v : d)
    if (v <= 0)
      return invalid_argument("%s: input '%s' %s has dims not fixed at compile time; compile it with a fixed "
                              "--input-shape",
                              path.c_str(), dims.name, shape.c_str());
  kilnDataType type = kilnmdlGetInputDataType(desc, 0);
  in.bytes = kilnmdlGetInputSizeByIndex(desc, 0);
  if (type == KILN_UINT8 && d.size() >= 2) {
    // NV12 from an AIPP config (YUV420SP_U8): [1, H * 3 / 2, W] (extra unit dims allowed).
    int64_t w = d.back(), rows = 1;
    for (size_t i = 0; i + 1 < d.size(); ++i) rows *= d[i];
    if (rows % 3 != 0 || (rows * 2 / 3) % 2 != 0 || w % 2 != 0)
      return invalid_argument("%s: input '%s' is uint8 %s, not an NV12 image [1, H*3/2, W] (an AIPP input with "
                              "input_format YUV420SP_U8)",
                              path.c_str(), dims.name, shape.c_str());
    in.aipp = true;
    in.width = static_cast<int>(w);
    in.height = static_cast<int>(rows * 2 / 3);
    in.description = str_format("%s uint8 %s (NV12 %dx%d, AIPP in the model)", dims.name, shape.c_str(), in.width,
                                in.height);
  } else if (type == KILN_FLOAT && d.size() == 4 && d[0] == 1 && d[1] == 3) {
    in.width = static_cast<int>(d[3]);
    in.height = static_cast<int>(d[2]);
    in.description = str_format("%s float32 %s (OpenCV preprocessing on the host)", dims.name, shape.c_str());
  } else {
    return invalid_argument("%s: input '%s' %s of type %d is neither float32 [1,3,H,W] nor an NV12 AIPP input "
                            "(uint8 [1,H*3/2,W])",
                            path.c_str(), dims.name, shape.c_str(), static_cast<int>(type));
  }
  for (size_t i = 0; i < kilnmdlGetNumOutputs(desc); ++i) {
    size_t bytes = kilnmdlGetOutputSizeByIndex(desc, i);
    if (bytes == 0)
      return invalid_argument("%s: output %zu has dims not fixed at compile time", path.c_str(), i);
    in.output_bytes.push_back(bytes);
  }
  return in;
}

struct QueuedFrame {
  Nv12Frame frame;
  Clock::time_point decoded_at;
};

struct StreamState {
  int index = 0;
  int device = 0;
  std::string video;
  std::unique_ptr<VideoDecoder> decoder;
  std::thread thread;

  std::mutex mutex;  // guards everything below
  std::deque<std::unique_ptr<QueuedFrame>> queue;
  std::vector<std::unique_ptr<QueuedFrame>> spare;  // buffers for reuse
  bool closed = false;
  bool failed = false;
  std::string error;
  int64_t decoded = 0, dropped = 0, inferred = 0;
  std::vector<double> latencies_ms;
  Clock::time_point first_result{}, last_result{};
  double decode_cpu_s = 0;

  void fail(const std::string& message) {
    std::lock_guard lock(mutex);
    if (!failed) error = message;
    failed = true;
  }
};

// One device: its inference worker and the streams it serves.
struct DeviceWorker {
  int device = 0;
  std::vector<StreamState*> streams;
  std::mutex mutex;
  std::condition_variable wake;  // a frame was queued or a stream closed
  double preprocess_cpu_s = 0;
  std::string error;  // set when the worker could not start
};

// Shared start line: workers report ready (models loaded and warmed up), the decoders then
// start together.
struct StartLine {
  std::mutex mutex;
  std::condition_variable cv;
  int ready = 0;
  bool go = false;
  Clock::time_point t0;
};

struct Slot {
  void* device_input = nullptr;
  std::vector<void*> device_outputs;
  std::vector<uint8_t> host_output;  // output 0, copied back: the result
  std::vector<float> host_input;     // the OpenCV baseline's tensor
  kilnmdlDataset* inputs = nullptr;
  kilnmdlDataset* outputs = nullptr;
  std::vector<kilnDataBuffer*> buffers;
  kilnrtEvent uploaded = nullptr, done = nullptr;
  std::unique_ptr<QueuedFrame> frame;
  StreamState* stream = nullptr;
  std::atomic<int64_t> result_ns{0};  // set by the stream callback when the result is on the host

  ~Slot() {
    if (inputs) kilnmdlDestroyDataset(inputs);
    if (outputs) kilnmdlDestroyDataset(outputs);
    for (kilnDataBuffer* b : buffers) kilnDestroyDataBuffer(b);
    if (device_input) kilnrtFree(device_input);
    for (void* p : device_outputs) kilnrtFree(p);
    if (uploaded) kilnrtDestroyEvent(uploaded);
    if (done) kilnrtDestroyEvent(done);
  }
};

void on_result(void* user) {
  static_cast<Slot*>(user)->result_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
}

Status make_slot(Slot& s, const ModelInput& in) {
  VIDEO_API_CHECK(kilnrtMalloc(&s.device_input, in.bytes, KILN_MEM_MALLOC_HUGE_FIRST));
  s.inputs = kilnmdlCreateDataset();
  s.outputs = kilnmdlCreateDataset();
  if (!s.inputs || !s.outputs) return resource_exhausted("cannot create datasets");
  kilnDataBuffer* b = kilnCreateDataBuffer(s.device_input, in.bytes);
  if (!b) return resource_exhausted("cannot create a data buffer");
  s.buffers.push_back(b);
  VIDEO_API_CHECK(kilnmdlAddDatasetBuffer(s.inputs, b));
  for (size_t bytes : in.output_bytes) {
    void* p = nullptr;
    VIDEO_API_CHECK(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    s.device_outputs.push_back(p);
    kilnDataBuffer* ob = kilnCreateDataBuffer(p, bytes);
    if (!ob) return resource_exhausted("cannot create a data buffer");
    s.buffers.push_back(ob);
    VIDEO_API_CHECK(kilnmdlAddDatasetBuffer(s.outputs, ob));
  }
  s.host_output.resize(in.output_bytes[0]);
  if (!in.aipp) s.host_input.resize(in.bytes / sizeof(float));
  VIDEO_API_CHECK(kilnrtCreateEvent(&s.uploaded));
  VIDEO_API_CHECK(kilnrtCreateEvent(&s.done));
  return ok_status();
}

struct Run {
  explicit Run(const VideoPipelineOptions& o) : options(o) {}
  const VideoPipelineOptions& options;
  ModelInput model;
  std::vector<std::unique_ptr<StreamState>> streams;
  std::vector<std::unique_ptr<DeviceWorker>> workers;
  StartLine start;
  std::atomic<bool> abort{false};

  // ---- decode side -----------------------------------------------------------------------

  void decode_loop(StreamState& st, DeviceWorker& worker) {
    {
      std::unique_lock lock(start.mutex);
      start.cv.wait(lock, [&] { return start.go; });
    }
    const Clock::time_point t0 = start.t0;
    const int64_t frames_wanted = options.duration_s > 0 ? std::llround(options.duration_s * options.fps) : -1;
    const auto period = std::chrono::duration<double>(1.0 / options.fps);
    auto close = [&](const std::string& error) {
      if (!error.empty()) st.fail(error);
      {
        std::lock_guard lock(st.mutex);
        st.closed = true;
      }
      std::lock_guard lock(worker.mutex);
      worker.wake.notify_all();
    };
    if (!st.decoder) return close("");  // failed to open; the error is set
    for (int64_t k = 0; frames_wanted < 0 || k < frames_wanted; ++k) {
      if (abort.load()) break;
      {
        std::lock_guard lock(st.mutex);
        if (st.failed) break;
      }
      // A real-time source: frame k arrives at t0 + k / fps.
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(period * k));
      std::unique_ptr<QueuedFrame> buffer;
      {
        std::lock_guard lock(st.mutex);
        if (!st.spare.empty()) {
          buffer = std::move(st.spare.back());
          st.spare.pop_back();
        }
      }
      if (!buffer) buffer = std::make_unique<QueuedFrame>();
      double cpu0 = thread_cpu_s();
      Expected<bool> got = st.decoder->next(&buffer->frame);
      if (got.ok() && !*got && frames_wanted > 0 && st.decoder->frames_decoded() > 0) {
        Status s = st.decoder->rewind();  // --duration longer than the file: play it again
        got = s.ok() ? st.decoder->next(&buffer->frame) : Expected<bool>(std::move(s));
      }
      double cpu = thread_cpu_s() - cpu0;
      if (!got.ok()) return close(got.status().to_string());
      if (!*got) break;  // the end of the file
      if (model.aipp && (buffer->frame.width != model.width || buffer->frame.height != model.height))
        return close(str_format("%s: frame %lld: %dx%d, but the model's AIPP input takes NV12 %dx%d",
                                st.video.c_str(), static_cast<long long>(buffer->frame.index),
                                buffer->frame.width, buffer->frame.height, model.width, model.height));
      buffer->decoded_at = Clock::now();
      bool queued = false;
      {
        std::lock_guard lock(st.mutex);
        st.decode_cpu_s += cpu;
        ++st.decoded;
        if (static_cast<int>(st.queue.size()) < options.queue_frames) {
          st.queue.push_back(std::move(buffer));
          queued = true;
        } else {
          ++st.dropped;
          st.spare.push_back(std::move(buffer));
        }
      }
      if (queued) {
        std::lock_guard lock(worker.mutex);
        worker.wake.notify_all();
      }
    }
    close("");
  }

  // ---- inference side ----------------------------------------------------------------------

  // The next frame of this worker's streams, round-robin; null when every stream is closed
  // and drained.
  std::unique_ptr<QueuedFrame> take_frame(DeviceWorker& w, size_t* cursor, StreamState** from) {
    for (;;) {
      bool all_closed = true;
      for (size_t i = 0; i < w.streams.size(); ++i) {
        StreamState* st = w.streams[(*cursor + i) % w.streams.size()];
        std::lock_guard lock(st->mutex);
        if (!st->queue.empty()) {
          std::unique_ptr<QueuedFrame> f = std::move(st->queue.front());
          st->queue.pop_front();
          *cursor = (*cursor + i + 1) % w.streams.size();
          *from = st;
          return f;
        }
        if (!st->closed) all_closed = false;
      }
      if (all_closed) return nullptr;
      std::unique_lock lock(w.mutex);
      w.wake.wait_for(lock, std::chrono::milliseconds(2));
    }
  }

  // Waits for a slot's frame and books its result.
  void finish(Slot& s, kilnrtStream compute) {
    if (!s.frame) return;
    StreamState& st = *s.stream;
    kilnError e = kilnrtSynchronizeEvent(s.done);
    int64_t result_ns = s.result_ns.load(std::memory_order_acquire);
    if (e != KILN_SUCCESS || result_ns == 0) {
      std::string message = api_message("kilnrtSynchronizeEvent");
      if (kilnrtSynchronizeStream(compute) != KILN_SUCCESS) message = api_message("kilnrtSynchronizeStream");
      st.fail(str_format("%s: frame %lld: inference failed: %s", st.video.c_str(),
                         static_cast<long long>(s.frame->frame.index), message.c_str()));
    } else {
      Clock::time_point at{Clock::duration(result_ns)};
      std::lock_guard lock(st.mutex);
      if (st.inferred == 0) st.first_result = at;
      st.last_result = at;
      ++st.inferred;
      st.latencies_ms.push_back(std::chrono::duration<double, std::milli>(at - s.frame->decoded_at).count());
    }
    {
      std::lock_guard lock(st.mutex);
      st.spare.push_back(std::move(s.frame));
    }
    s.stream = nullptr;
  }

  Status submit(Slot& s, uint32_t model_id, kilnrtStream copy, kilnrtStream compute, DeviceWorker& w,
                Nv12Preprocessor& pre) {
    const Nv12Frame& f = s.frame->frame;
    const void* src = f.data.data();
    size_t bytes = model.bytes;
    if (!model.aipp) {
      double cpu0 = thread_cpu_s();
      pre.run(f.data.data(), f.width, f.height, model.width, model.height, options.normalization,
              s.host_input.data());
      w.preprocess_cpu_s += thread_cpu_s() - cpu0;
      src = s.host_input.data();
    } else if (f.data.size() != bytes) {
      return invalid_argument("frame of %zu bytes for an input of %zu", f.data.size(), bytes);
    }
    s.result_ns.store(0);
    VIDEO_API_CHECK(kilnrtMemcpyAsync(s.device_input, bytes, src, bytes, KILN_MEMCPY_HOST_TO_DEVICE, copy));
    VIDEO_API_CHECK(kilnrtRecordEvent(s.uploaded, copy));
    VIDEO_API_CHECK(kilnrtStreamWaitEvent(compute, s.uploaded));
    VIDEO_API_CHECK(kilnmdlExecuteAsync(model_id, s.inputs, s.outputs, compute));
    VIDEO_API_CHECK(kilnrtMemcpyAsync(s.host_output.data(), s.host_output.size(), s.device_outputs[0],
                                      s.host_output.size(), KILN_MEMCPY_DEVICE_TO_HOST, compute));
    VIDEO_API_CHECK(kilnrtLaunchCallback(on_result, &s, KILN_CALLBACK_BLOCK, compute));
    VIDEO_API_CHECK(kilnrtRecordEvent(s.done, compute));
    return ok_status();
  }

  Status worker_setup(DeviceWorker& w, kilnrtContext* context, kilnrtStream* copy, kilnrtStream* compute,
                      uint32_t* model_id, bool* loaded, Slot (&slots)[2]) {
    VIDEO_API_CHECK(kilnrtCreateContext(context, w.device));
    VIDEO_API_CHECK(kilnrtCreateStream(copy));
    VIDEO_API_CHECK(kilnrtCreateStream(compute));
    VIDEO_API_CHECK(kilnmdlLoadFromFile(options.model_path.c_str(), model_id));
    *loaded = true;
    for (Slot& s : slots) KILN_RETURN_IF_ERROR(make_slot(s, model));
    // Warm-up (kernels prepared for the shapes): one run of each slot on zeros, not timed.
    for (Slot& s : slots) {
      VIDEO_API_CHECK(kilnrtMemsetAsync(s.device_input, model.bytes, 0, model.bytes, *compute));
      VIDEO_API_CHECK(kilnmdlExecuteAsync(*model_id, s.inputs, s.outputs, *compute));
    }
    VIDEO_API_CHECK(kilnrtSynchronizeStream(*compute));
    return ok_status();
  }

  void worker_loop(DeviceWorker& w) {
    kilnrtContext context = nullptr;
    kilnrtStream copy = nullptr, compute = nullptr;
    uint32_t model_id = 0;
    bool loaded = false;
    Nv12Preprocessor pre;
    {
      Slot slots[2];
      Status s = worker_setup(w, &context, &copy, &compute, &model_id, &loaded, slots);
      if (!s.ok()) w.error = str_format("device %d: %s", w.device, s.to_string().c_str());
      {
        std::lock_guard lock(start.mutex);
        ++start.ready;
      }
      start.cv.notify_all();
      {
        std::unique_lock lock(start.mutex);
        start.cv.wait(lock, [&] { return start.go || abort.load(); });
      }
      if (s.ok() && !abort.load()) {
        size_t cursor = 0, n = 0;
        for (;;) {
          StreamState* from = nullptr;
          std::unique_ptr<QueuedFrame> frame = take_frame(w, &cursor, &from);
          if (!frame) break;
          Slot& slot = slots[n % 2];
          finish(slot, compute);
          slot.frame = std::move(frame);
          slot.stream = from;
          Status e = submit(slot, model_id, copy, compute, w, pre);
          if (!e.ok()) {
            from->fail(str_format("%s: frame %lld: %s", from->video.c_str(),
                                  static_cast<long long>(slot.frame->frame.index), e.to_string().c_str()));
            kilnrtSynchronizeStream(copy);
            kilnrtSynchronizeStream(compute);
            std::lock_guard lock(from->mutex);
            from->spare.push_back(std::move(slot.frame));
            slot.stream = nullptr;
            continue;
          }
          ++n;
        }
        finish(slots[n % 2], compute);
        finish(slots[(n + 1) % 2], compute);
      }
      if (copy) kilnrtSynchronizeStream(copy);
      if (compute) kilnrtSynchronizeStream(compute);
    }  // slots released while the context is current
    if (loaded) kilnmdlUnload(model_id);
    if (copy) kilnrtDestroyStream(copy);
    if (compute) kilnrtDestroyStream(compute);
    if (context) kilnrtDestroyContext(context);
  }
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Op time by kind from the profiler's records: all ops, and the preprocessing's part of it:
// the Aipp ops, and of an AippConv (an Aipp folded into the first convolution) only its Aipp
// rows, which its kernel records as tasks inside the op (ops::kAippConvRowsTask); the rest of
// an AippConv's time is the convolution, inference.
struct OpTimes {
  double all_ns = 0, aipp_ns = 0;
  void add(const profiler::Profile& p) {
    for (const profiler::Record& r : p.records) {
      if (r.kind == profiler::RecordKind::kTask && r.name == ops::kAippConvRowsTask)
        aipp_ns += static_cast<double>(r.dur_ns);
      if (r.kind != profiler::RecordKind::kOp || !r.op) continue;
      all_ns += static_cast<double>(r.dur_ns);
      if (r.op->op_type == ops::kAippOp) aipp_ns += static_cast<double>(r.dur_ns);
    }
  }
};

}  // namespace

Expected<VideoPipelineReport> run_video_pipeline(const VideoPipelineOptions& options) {
  if (options.videos.empty()) return invalid_argument("no video given");
  if (options.streams < 1) return invalid_argument("streams must be at least 1");
  if (!(options.fps > 0)) return invalid_argument("fps must be positive");
  if (options.queue_frames < 1) return invalid_argument("the queue must hold at least 1 frame");
  uint32_t device_count = 0;
  if (kilnrtGetDeviceCount(&device_count) != KILN_SUCCESS || device_count == 0)
    return failed_precondition("no device: %s", api_message("kilnrtGetDeviceCount").c_str());

  Run run(options);
  // The model's input, from a load on device 0 (also reports a bad model file before any
  // thread starts).
  {
    kilnrtContext context = nullptr;
    VIDEO_API_CHECK(kilnrtCreateContext(&context, 0));
    uint32_t id = 0;
    kilnError e = kilnmdlLoadFromFile(options.model_path.c_str(), &id);
    if (e != KILN_SUCCESS) {
      std::string message = api_message("kilnmdlLoadFromFile");
      kilnrtDestroyContext(context);
      return invalid_argument("%s", message.c_str());
    }
    Expected<ModelInput> in = describe_model(id, options.model_path);
    kilnmdlUnload(id);
    kilnrtDestroyContext(context);
    if (!in.ok()) return in.status();
    run.model = *in;
  }

  int devices = static_cast<int>(std::min<uint32_t>(device_count, static_cast<uint32_t>(options.streams)));
  for (int d = 0; d < devices; ++d) {
    run.workers.push_back(std::make_unique<DeviceWorker>());
    run.workers.back()->device = d;
  }
  int opened = 0;
  std::string first_error;
  for (int i = 0; i < options.streams; ++i) {
    auto st = std::make_unique<StreamState>();
    st->index = i;
    st->device = i % devices;
    st->video = options.videos[static_cast<size_t>(i) % options.videos.size()];
    Expected<std::unique_ptr<VideoDecoder>> d = VideoDecoder::open(st->video);
    if (d.ok()) {
      st->decoder = std::move(*d);
      ++opened;
    } else {
      st->fail(d.status().to_string());
      if (first_error.empty()) first_error = d.status().to_string();
    }
    run.workers[static_cast<size_t>(st->device)]->streams.push_back(st.get());
    run.streams.push_back(std::move(st));
  }
  if (opened == 0) return invalid_argument("%s", first_error.c_str());

  std::vector<std::thread> worker_threads;
  for (auto& w : run.workers) {
    DeviceWorker* worker = w.get();
    worker_threads.emplace_back([&run, worker] { run.worker_loop(*worker); });
  }
  for (auto& st : run.streams) {
    StreamState* stream = st.get();
    DeviceWorker* worker = run.workers[static_cast<size_t>(stream->device)].get();
    stream->thread = std::thread([&run, stream, worker] { run.decode_loop(*stream, *worker); });
  }
  auto join_all = [&] {
    for (auto& st : run.streams)
      if (st->thread.joinable()) st->thread.join();
    for (std::thread& t : worker_threads) t.join();
  };
  // Every worker loaded and warmed up its model?
  {
    std::unique_lock lock(run.start.mutex);
    run.start.cv.wait(lock, [&] { return run.start.ready == devices; });
  }
  for (auto& w : run.workers)
    if (!w->error.empty()) {
      std::string message = w->error;
      run.abort = true;
      {
        std::lock_guard lock(run.start.mutex);
        run.start.go = true;
        run.start.t0 = Clock::now();
      }
      run.start.cv.notify_all();
      join_all();
      return internal_error("%s", message.c_str());
    }

  // Kiln's profiler: its op records give the Aipp ops' share of the model's time. A session
  // of our own (records consumed as the run goes) unless KILN_PROFILE already records.
  bool own_session = false, env_session = profiler::has_session();
  std::filesystem::path profile_dir;
  OpTimes op_times;
  if (options.profile_ops && !env_session) {
    profile_dir = std::filesystem::temp_directory_path() / str_format("kiln-video-%d", static_cast<int>(getpid()));
    own_session = profiler::init_session(profile_dir.string()).ok() && profiler::start_session().ok();
  }

  double cpu0 = process_cpu_s();
  {
    std::lock_guard lock(run.start.mutex);
    run.start.go = true;
    run.start.t0 = Clock::now();
  }
  run.start.cv.notify_all();
  // Wait for the decoders, draining the profiler's records meanwhile.
  for (auto& st : run.streams) {
    while (true) {
      {
        std::lock_guard lock(st->mutex);
        if (st->closed) break;
      }
      if (own_session) op_times.add(profiler::collect(/*consume=*/true));
      std::this_thread::sleep_for(std::chrono::milliseconds(own_session ? 200 : 20));
    }
  }
  join_all();
  Clock::time_point t_end = Clock::now();
  double cpu_total = process_cpu_s() - cpu0;
  if (own_session) {
    profiler::stop_session().ignore_error();
    op_times.add(profiler::collect(/*consume=*/true));
    profiler::finalize_session().ignore_error();
    std::error_code ec;
    std::filesystem::remove_all(profile_dir, ec);
  } else if (env_session && options.profile_ops) {
    op_times.add(profiler::collect(/*consume=*/false));
  }

  VideoPipelineReport report;
  report.aipp = run.model.aipp;
  report.input_description = run.model.description;
  report.model_width = run.model.width;
  report.model_height = run.model.height;
  report.devices = devices;
  report.fps_target = options.fps;
  report.wall_s = std::chrono::duration<double>(t_end - run.start.t0).count();
  report.cpu_process_s = cpu_total;
  bool sustained = true;
  for (auto& st : run.streams) {
    StreamReport r;
    r.index = st->index;
    r.device = st->device;
    r.video = st->video;
    if (st->decoder) {
      r.width = st->decoder->width();
      r.height = st->decoder->height();
    }
    r.frames_decoded = st->decoded;
    r.frames_inferred = st->inferred;
    r.frames_dropped = st->dropped;
    double span = std::chrono::duration<double>(st->last_result - st->first_result).count();
    r.fps = st->inferred >= 2 && span > 0 ? static_cast<double>(st->inferred - 1) / span : 0;
    r.latency_p50_ms = percentile(st->latencies_ms, 50);
    r.latency_p99_ms = percentile(st->latencies_ms, 99);
    r.decode_cpu_s = st->decode_cpu_s;
    r.error = st->error;
    report.cpu_decode_s += r.decode_cpu_s;
    if (!r.error.empty() || r.frames_dropped > 0 || r.frames_inferred != r.frames_decoded ||
        (r.frames_inferred >= 2 && r.fps < 0.97 * options.fps))
      sustained = false;
    report.streams.push_back(std::move(r));
  }
  report.sustained = sustained;
  double rest = std::max(0.0, cpu_total - report.cpu_decode_s);
  if (run.model.aipp) {
    report.aipp_op_share = op_times.all_ns > 0 ? op_times.aipp_ns / op_times.all_ns : 0;
    report.preprocess_from_profiler = op_times.all_ns > 0;
    report.cpu_preprocess_s = rest * report.aipp_op_share;
  } else {
    for (auto& w : run.workers) report.cpu_preprocess_s += w->preprocess_cpu_s;
  }
  report.cpu_inference_s = std::max(0.0, rest - report.cpu_preprocess_s);
  return report;
}

}  // namespace kiln::video
