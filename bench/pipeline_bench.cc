// Throughput of a model (MobileNetV2 in bench/pipeline_bench.sh) fed batch after batch,
// through the public C API only:
//   sync loop:  kilnrtMemcpy H2D, kilnmdlExecute, kilnrtMemcpy D2H, one after the other on
//               the calling thread; and the same three steps on one stream, synchronized
//               after each batch (the execution then runs on the stream's thread, like the
//               pipelined one, so this pair isolates the effect of the overlap);
//   pipelined:  a copy stream does the H2D copy of batch i+1 while a compute stream executes
//               batch i (double-buffered device inputs, ordered by events), D2H after each
//               execution on the compute stream.
// Prints a table with the three and the ratios, plus the time of each part alone, from
// which the best possible ratio follows: (h2d + execute + d2h) / max(h2d, execute + d2h).
//
// usage: pipeline_bench MODEL.kiln [BATCHES] [WARMUP]    (defaults 100 and 5)
//        bench/pipeline_bench.sh [BUILD_DIR] builds MobileNetV2 and runs this on it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kHostBatches = 4;  // distinct input batches, cycled
constexpr int kSlots = 2;        // device buffers of the pipelined loop (double buffering)

[[noreturn]] void die(const char* what, kilnError e) {
  std::fprintf(stderr, "pipeline_bench: %s failed (%d): %s\n", what, e, kilnGetRecentErrMsg());
  std::exit(1);
}

#define CHECK(call)                              \
  do {                                           \
    kilnError e_ = (call);                       \
    if (e_ != KILN_SUCCESS) die(#call, e_);      \
  } while (0)

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Io {
  kilnmdlDataset* dataset = nullptr;
  std::vector<void*> device;  // one buffer per tensor
};

// A dataset of freshly allocated device buffers with the given sizes.
Io make_io(const std::vector<size_t>& sizes) {
  Io io;
  io.dataset = kilnmdlCreateDataset();
  if (!io.dataset) die("kilnmdlCreateDataset", KILN_ERROR_BAD_ALLOC);
  for (size_t bytes : sizes) {
    void* p = nullptr;
    CHECK(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    kilnDataBuffer* db = kilnCreateDataBuffer(p, bytes);
    if (!db) die("kilnCreateDataBuffer", KILN_ERROR_BAD_ALLOC);
    CHECK(kilnmdlAddDatasetBuffer(io.dataset, db));
    io.device.push_back(p);
  }
  return io;
}

void free_io(Io& io) {
  for (size_t i = 0; i < kilnmdlGetDatasetNumBuffers(io.dataset); ++i)
    CHECK(kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(io.dataset, i)));
  CHECK(kilnmdlDestroyDataset(io.dataset));
  for (void* p : io.device) CHECK(kilnrtFree(p));
}

struct Model {
  uint32_t id = 0;
  std::vector<size_t> in_sizes, out_sizes;
  std::vector<bool> out_float;
  std::vector<std::vector<void*>> host_in;  // [batch][input], pinned
  size_t in_bytes = 0;
  std::string input_desc;
};

void copy_inputs(const Model& m, const Io& io, int batch, kilnrtStream stream) {
  for (size_t k = 0; k < m.in_sizes.size(); ++k) {
    const void* src = m.host_in[static_cast<size_t>(batch % kHostBatches)][k];
    if (stream)
      CHECK(kilnrtMemcpyAsync(io.device[k], m.in_sizes[k], src, m.in_sizes[k], KILN_MEMCPY_HOST_TO_DEVICE, stream));
    else
      CHECK(kilnrtMemcpy(io.device[k], m.in_sizes[k], src, m.in_sizes[k], KILN_MEMCPY_HOST_TO_DEVICE));
  }
}

void copy_outputs(const Model& m, const Io& io, const std::vector<void*>& host, kilnrtStream stream) {
  for (size_t k = 0; k < m.out_sizes.size(); ++k) {
    if (stream)
      CHECK(kilnrtMemcpyAsync(host[k], m.out_sizes[k], io.device[k], m.out_sizes[k], KILN_MEMCPY_DEVICE_TO_HOST,
                              stream));
    else
      CHECK(kilnrtMemcpy(host[k], m.out_sizes[k], io.device[k], m.out_sizes[k], KILN_MEMCPY_DEVICE_TO_HOST));
  }
}

// memcpy, execute, memcpy, batch after batch. With `on_stream` false on the calling thread
// (kilnrtMemcpy, kilnmdlExecute); with true the same three steps go to one stream, which
// is then synchronized, so each batch still waits for the previous one. Returns seconds
// for `batches` after `warmup`; `host_out` holds the last batch's outputs.
double sync_loop(const Model& m, int batches, int warmup, bool on_stream, const std::vector<void*>& host_out) {
  kilnrtStream stream = nullptr;
  if (on_stream) CHECK(kilnrtCreateStream(&stream));
  Io in = make_io(m.in_sizes), out = make_io(m.out_sizes);
  Clock::time_point start;
  for (int i = 0; i < warmup + batches; ++i) {
    if (i == warmup) start = Clock::now();
    copy_inputs(m, in, i, stream);
    if (on_stream) {
      CHECK(kilnmdlExecuteAsync(m.id, in.dataset, out.dataset, stream));
      copy_outputs(m, out, host_out, stream);
      CHECK(kilnrtSynchronizeStream(stream));
    } else {
      CHECK(kilnmdlExecute(m.id, in.dataset, out.dataset));
      copy_outputs(m, out, host_out, nullptr);
    }
  }
  double s = seconds_since(start);
  free_io(in);
  free_io(out);
  if (on_stream) CHECK(kilnrtDestroyStream(stream));
  return s;
}

// Batch i: on the copy stream, wait until the execution that last read input slot i%2 is
// done, copy batch i in, record `copied`; on the compute stream, wait for `copied`,
// execute, copy the outputs out, record `done`. The host stays at most two batches ahead.
double pipelined_loop(const Model& m, int batches, int warmup, std::vector<std::vector<void*>>& host_out) {
  kilnrtStream copy = nullptr, compute = nullptr;
  CHECK(kilnrtCreateStream(&copy));
  CHECK(kilnrtCreateStream(&compute));
  Io in[kSlots], out[kSlots];
  kilnrtEvent copied[kSlots], done[kSlots];
  for (int s = 0; s < kSlots; ++s) {
    in[s] = make_io(m.in_sizes);
    out[s] = make_io(m.out_sizes);
    CHECK(kilnrtCreateEvent(&copied[s]));
    CHECK(kilnrtCreateEvent(&done[s]));
  }
  Clock::time_point start;
  for (int i = 0; i < warmup + batches; ++i) {
    if (i == warmup) {
      CHECK(kilnrtSynchronizeStream(compute));
      start = Clock::now();
    }
    int s = i % kSlots;
    CHECK(kilnrtSynchronizeEvent(done[s]));  // batch i-2: its outputs are on the host
    CHECK(kilnrtStreamWaitEvent(copy, done[s]));
    copy_inputs(m, in[s], i, copy);
    CHECK(kilnrtRecordEvent(copied[s], copy));
    CHECK(kilnrtStreamWaitEvent(compute, copied[s]));
    CHECK(kilnmdlExecuteAsync(m.id, in[s].dataset, out[s].dataset, compute));
    copy_outputs(m, out[s], host_out[static_cast<size_t>(s)], compute);
    CHECK(kilnrtRecordEvent(done[s], compute));
  }
  CHECK(kilnrtSynchronizeStream(compute));
  double secs = seconds_since(start);
  CHECK(kilnrtSynchronizeStream(copy));
  for (int s = 0; s < kSlots; ++s) {
    free_io(in[s]);
    free_io(out[s]);
    CHECK(kilnrtDestroyEvent(copied[s]));
    CHECK(kilnrtDestroyEvent(done[s]));
  }
  CHECK(kilnrtDestroyStream(copy));
  CHECK(kilnrtDestroyStream(compute));
  return secs;
}

// Milliseconds per call of each part alone, averaged over `n` calls.
void time_parts(const Model& m, int n, double* h2d_ms, double* exec_ms, double* d2h_ms) {
  Io in = make_io(m.in_sizes), out = make_io(m.out_sizes);
  std::vector<void*> host(m.out_sizes.size());
  for (size_t k = 0; k < host.size(); ++k) CHECK(kilnrtMallocHost(&host[k], m.out_sizes[k]));
  double h = 0, e = 0, d = 0;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    copy_inputs(m, in, i, nullptr);
    auto t1 = Clock::now();
    CHECK(kilnmdlExecute(m.id, in.dataset, out.dataset));
    auto t2 = Clock::now();
    copy_outputs(m, out, host, nullptr);
    auto t3 = Clock::now();
    h += std::chrono::duration<double, std::milli>(t1 - t0).count();
    e += std::chrono::duration<double, std::milli>(t2 - t1).count();
    d += std::chrono::duration<double, std::milli>(t3 - t2).count();
  }
  *h2d_ms = h / n;
  *exec_ms = e / n;
  *d2h_ms = d / n;
  for (void* p : host) CHECK(kilnrtFreeHost(p));
  free_io(in);
  free_io(out);
}

Model load(const char* path) {
  Model m;
  CHECK(kilnmdlLoadFromFile(path, &m.id));
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  if (!desc) die("kilnmdlCreateDesc", KILN_ERROR_BAD_ALLOC);
  CHECK(kilnmdlGetDesc(desc, m.id));
  for (size_t i = 0; i < kilnmdlGetNumInputs(desc); ++i) {
    size_t bytes = kilnmdlGetInputSizeByIndex(desc, i);
    if (bytes == 0) {
      std::fprintf(stderr, "pipeline_bench: input %zu (%s) has dims not fixed: compile with --input-shape\n", i,
                   kilnmdlGetInputNameByIndex(desc, i));
      std::exit(1);
    }
    m.in_sizes.push_back(bytes);
    m.in_bytes += bytes;
    kilnmdlIODims dims{};
    CHECK(kilnmdlGetInputDims(desc, i, &dims));
    std::string d = std::string(m.input_desc.empty() ? "" : ", ") + dims.name + "[";
    for (size_t k = 0; k < dims.dimCount; ++k) {
      if (k) d += ",";
      d += std::to_string(dims.dims[k]);
    }
    m.input_desc += d + "]";
  }
  for (size_t i = 0; i < kilnmdlGetNumOutputs(desc); ++i) {
    size_t bytes = kilnmdlGetOutputSizeByIndex(desc, i);
    if (bytes == 0) {
      std::fprintf(stderr, "pipeline_bench: output %zu (%s) has no fixed size\n", i,
                   kilnmdlGetOutputNameByIndex(desc, i));
      std::exit(1);
    }
    m.out_sizes.push_back(bytes);
    m.out_float.push_back(kilnmdlGetOutputDataType(desc, i) == KILN_FLOAT);
  }
  // Random inputs in pinned host memory (uniform [-1, 1) as floats, small integers else).
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  m.host_in.resize(kHostBatches);
  for (auto& batch : m.host_in) {
    for (size_t i = 0; i < m.in_sizes.size(); ++i) {
      void* p = nullptr;
      CHECK(kilnrtMallocHost(&p, m.in_sizes[i]));
      if (kilnmdlGetInputDataType(desc, i) == KILN_FLOAT) {
        float* f = static_cast<float*>(p);
        for (size_t k = 0; k < m.in_sizes[i] / sizeof(float); ++k) f[k] = real(rng);
      } else {
        std::memset(p, 0, m.in_sizes[i]);
      }
      batch.push_back(p);
    }
  }
  CHECK(kilnmdlDestroyDesc(desc));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: pipeline_bench MODEL.kiln [BATCHES] [WARMUP]\n");
    return 2;
  }
  int batches = argc > 2 ? std::atoi(argv[2]) : 100;
  int warmup = argc > 3 ? std::atoi(argv[3]) : 5;
  if (batches < 1 || warmup < 0) {
    std::fprintf(stderr, "pipeline_bench: BATCHES must be at least 1 and WARMUP not negative\n");
    return 2;
  }
  CHECK(kilnInit(nullptr));
  CHECK(kilnrtSetDevice(0));
  Model m = load(argv[1]);

  std::vector<void*> sync_out(m.out_sizes.size()), stream_out(m.out_sizes.size());
  std::vector<std::vector<void*>> pipe_out(kSlots, std::vector<void*>(m.out_sizes.size()));
  for (size_t k = 0; k < m.out_sizes.size(); ++k) {
    CHECK(kilnrtMallocHost(&sync_out[k], m.out_sizes[k]));
    CHECK(kilnrtMallocHost(&stream_out[k], m.out_sizes[k]));
    for (auto& slot : pipe_out) CHECK(kilnrtMallocHost(&slot[k], m.out_sizes[k]));
  }

  double h2d = 0, exec = 0, d2h = 0;
  time_parts(m, std::max(5, batches / 5), &h2d, &exec, &d2h);
  // Alternate the loops so that a drift in machine load hits them alike.
  double sync_s = 0, stream_s = 0, pipe_s = 0;
  for (int round = 0; round < 2; ++round) {
    sync_s += sync_loop(m, batches, warmup, false, sync_out);
    stream_s += sync_loop(m, batches, warmup, true, stream_out);
    pipe_s += pipelined_loop(m, batches, warmup, pipe_out);
  }
  int total = 2 * batches;

  // Every loop ended on the same input batch: their outputs must agree.
  const std::vector<void*>& last = pipe_out[static_cast<size_t>((warmup + batches - 1) % kSlots)];
  double max_diff = 0;
  for (const std::vector<void*>* other : {&sync_out, &stream_out}) {
    for (size_t k = 0; k < m.out_sizes.size(); ++k) {
      if (!m.out_float[k]) {
        if (std::memcmp((*other)[k], last[k], m.out_sizes[k]) != 0) max_diff = INFINITY;
        continue;
      }
      const float* a = static_cast<const float*>((*other)[k]);
      const float* b = static_cast<const float*>(last[k]);
      for (size_t i = 0; i < m.out_sizes[k] / sizeof(float); ++i)
        max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
    }
  }

  double sync_rate = total / sync_s, stream_rate = total / stream_s, pipe_rate = total / pipe_s;
  double ideal = (h2d + exec + d2h) / std::max(h2d, exec + d2h);
  auto row = [&](const char* mode, double secs) {
    std::printf("%-52s %8d %9.3f %11.2f %9.3f\n", mode, total, secs, total / secs, 1e3 * secs / total);
  };
  std::printf("model %s: input %s (%.2f MB per batch), 1 device\n", argv[1], m.input_desc.c_str(), m.in_bytes / 1e6);
  std::printf("parts alone: H2D %.3f ms, execute %.3f ms, D2H %.3f ms\n\n", h2d, exec, d2h);
  std::printf("%-52s %8s %9s %11s %9s\n", "mode", "batches", "seconds", "batches/s", "ms/batch");
  row("sync loop, calling thread (memcpy, execute, memcpy)", sync_s);
  row("sync loop, 1 stream (same, then synchronize)", stream_s);
  row("2 streams (H2D of i+1 || execute of i)", pipe_s);
  std::printf("%-52s %8s %9s %10.3fx\n", "ratio 2 streams / sync loop, calling thread", "", "", pipe_rate / sync_rate);
  std::printf("%-52s %8s %9s %10.3fx\n", "ratio 2 streams / sync loop, 1 stream", "", "", pipe_rate / stream_rate);
  std::printf("\nbest possible ratio from the parts: %.3fx; last outputs of the loops agree to %.3g\n", ideal,
              max_diff);

  for (auto& batch : m.host_in)
    for (void* p : batch) CHECK(kilnrtFreeHost(p));
  for (void* p : sync_out) CHECK(kilnrtFreeHost(p));
  for (void* p : stream_out) CHECK(kilnrtFreeHost(p));
  for (auto& slot : pipe_out)
    for (void* p : slot) CHECK(kilnrtFreeHost(p));
  CHECK(kilnmdlUnload(m.id));
  CHECK(kilnrtResetDevice(0));
  CHECK(kilnFinalize());
  return 0;
}
