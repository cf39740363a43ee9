// Data-parallel training of a small MLP with compute/communication overlap: each rank (a
// CPU device; ranks are threads of this process with communicators from kilnCommInitAll, or
// processes joined by kilnCommInitFromEnv) runs forward and backward of its shard of the
// batch through Kiln kernels (small ONNX models compiled in memory and executed with
// kilnmdlExecuteAsync on a compute stream), all-reduces each layer's gradient
// (one bucket per layer) on a communication stream as soon as backward has produced it,
// while backward continues on the compute stream, then applies SGD. It times the step with
// that overlap against the same step with all communication after backward, and checks
// that every rank's weights are identical and match a single-device run on the full batch.
//
//   data_parallel [--ranks N | --processes] [--steps S] [--batch B] [--in I] [--hidden H]
//                 [--out O]
// --ranks N: N ranks as threads of this process (default 2); --processes: this process is one
// rank of a world launched by mpirun or with KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR.
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/comm.h"
#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK_API(call)                                                      \
  do {                                                                       \
    kilnError e_ = (call);                                                   \
    if (e_ != KILN_SUCCESS) {                                                \
      std::fprintf(stderr, "data_parallel: %s failed (%d): %s\n", #call, e_, \
                   kilnGetRecentErrMsg());                                   \
      std::exit(1);                                                          \
    }                                                                        \
  } while (0)

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "data_parallel: %s\n", message.c_str());
  std::exit(1);
}

struct Config {
  int ranks = 2;
  int steps = 10;
  int batch = 64;  // global batch; each rank takes batch / ranks rows
  int in = 256, hidden = 1024, out = 64;
  float lr = 0.05f;
};

// ---- The models: forward, one backward model per layer, SGD --------------------------------
//
// x[B,in] -> a1 = tanh(x W1) -> a2 = tanh(a1 W2) -> o = a2 W3 [B,out];
// loss = sum((o - y)^2) / (2 * global batch), so g3 = dloss/do = (o - y) * inv_b and the sum of
// the ranks' gradients is the full-batch gradient. tanh'(z) = 1 - a^2. (tanh rather than relu:
// relu's derivative jumps at 0, so the rounding differences between summing the gradient over
// ranks and over the full batch could flip a unit and the two runs would drift apart by more
// than rounding.)
std::string forward_model(int b, const Config& c) {
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "fwd (float[" +
         std::to_string(b) + "," + std::to_string(c.in) + "] x, float[" + std::to_string(b) + "," +
         std::to_string(c.out) + "] y, float[" + std::to_string(c.in) + "," +
         std::to_string(c.hidden) + "] w1, float[" + std::to_string(c.hidden) + "," +
         std::to_string(c.hidden) + "] w2, float[" + std::to_string(c.hidden) + "," +
         std::to_string(c.out) + "] w3, float[1] inv_b) => (float[" + std::to_string(b) + "," +
         std::to_string(c.hidden) + "] a1, float[" + std::to_string(b) + "," +
         std::to_string(c.hidden) + "] a2, float[" + std::to_string(b) + "," +
         std::to_string(c.out) +
         "] g3) {\n"
         "  z1 = MatMul(x, w1)\n  a1 = Tanh(z1)\n  z2 = MatMul(a1, w2)\n  a2 = Tanh(z2)\n"
         "  o = MatMul(a2, w3)\n  d = Sub(o, y)\n  g3 = Mul(d, inv_b)\n}\n";
}

// dW = a_prev^T g; g_prev = (g W^T) * (1 - a_prev^2).
std::string backward_model(int b, int rows, int cols, bool with_prev) {
  std::string B = std::to_string(b), R = std::to_string(rows), C = std::to_string(cols);
  std::string s =
      "<ir_version: 8, opset_import: [\"\" : 17]>\n"
      "bwd (float[" +
      B + "," + R + "] a, float[" + B + "," + C + "] g" +
      (with_prev ? ", float[" + R + "," + C + "] w" : std::string()) + ") => (float[" + R + "," +
      C + "] dw" + (with_prev ? ", float[" + B + "," + R + "] gp" : std::string()) +
      ") {\n"
      "  dw = Gemm <transA = 1> (a, g)\n";
  if (with_prev)
    s += "  t = Gemm <transB = 1> (g, w)\n  sq = Mul(a, a)\n  ts = Mul(t, sq)\n  gp = Sub(t, ts)\n";
  return s + "}\n";
}

std::string sgd_model(const Config& c) {
  std::string I = std::to_string(c.in), H = std::to_string(c.hidden), O = std::to_string(c.out);
  return "<ir_version: 8, opset_import: [\"\" : 17]>\n"
         "sgd (float[" +
         I + "," + H + "] w1, float[" + H + "," + H + "] w2, float[" + H + "," + O +
         "] w3, float[" + I + "," + H + "] d1, float[" + H + "," + H + "] d2, float[" + H + "," +
         O + "] d3, float[1] lr) => (float[" + I + "," + H + "] n1, float[" + H + "," + H +
         "] n2, float[" + H + "," + O +
         "] n3) {\n"
         "  s1 = Mul(d1, lr)\n  n1 = Sub(w1, s1)\n  s2 = Mul(d2, lr)\n  n2 = Sub(w2, s2)\n"
         "  s3 = Mul(d3, lr)\n  n3 = Sub(w3, s3)\n}\n";
}

// ONNX text -> .kiln bytes (compiled in memory, through a temporary file).
std::vector<char> compile(const std::string& text, const std::string& name) {
  onnx::ModelProto proto;
  auto parsed = onnx::OnnxParser::Parse(proto, text.c_str());
  if (!parsed.IsOK()) die("parsing the " + name + " model: " + parsed.ErrorMessage());
  std::string bytes = proto.SerializeAsString();
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), name, {});
  if (!compiled.ok()) die("compiling the " + name + " model: " + compiled.status().to_string());
  std::string path = (std::filesystem::temp_directory_path() /
                      ("kiln-dp-" + std::to_string(getpid()) + "-" + name + ".kiln"))
                         .string();
  kiln::Status written = kiln::compiler::write_compiled_model(*compiled, path);
  if (!written.ok()) die("writing the " + name + " model: " + written.to_string());
  std::ifstream f(path, std::ios::binary);
  std::vector<char> out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return out;
}

struct ModelSet {
  std::vector<char> fwd, bwd3, bwd2, bwd1, sgd;
};

ModelSet compile_models(int b, const Config& c) {
  ModelSet m;
  m.fwd = compile(forward_model(b, c), "fwd_b" + std::to_string(b));
  m.bwd3 = compile(backward_model(b, c.hidden, c.out, true), "bwd3_b" + std::to_string(b));
  m.bwd2 = compile(backward_model(b, c.hidden, c.hidden, true), "bwd2_b" + std::to_string(b));
  m.bwd1 = compile(backward_model(b, c.in, c.hidden, false), "bwd1_b" + std::to_string(b));
  m.sgd = compile(sgd_model(c), "sgd");
  return m;
}

// ---- Data -----------------------------------------------------------------------------------

struct HostData {
  std::vector<std::vector<float>> x, y;  // per step: the global batch
  std::vector<float> w1, w2, w3;         // initial weights
};

HostData make_data(const Config& c) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> n(0.f, 1.f);
  HostData d;
  auto fill = [&](std::vector<float>& v, size_t size, float scale) {
    v.resize(size);
    for (float& e : v) e = n(rng) * scale;
  };
  fill(d.w1, static_cast<size_t>(c.in) * c.hidden, 1.f / std::sqrt(static_cast<float>(c.in)));
  fill(d.w2, static_cast<size_t>(c.hidden) * c.hidden,
       1.f / std::sqrt(static_cast<float>(c.hidden)));
  fill(d.w3, static_cast<size_t>(c.hidden) * c.out, 1.f / std::sqrt(static_cast<float>(c.hidden)));
  d.x.resize(static_cast<size_t>(c.steps));
  d.y.resize(static_cast<size_t>(c.steps));
  for (int s = 0; s < c.steps; ++s) {
    fill(d.x[s], static_cast<size_t>(c.batch) * c.in, 1.f);
    fill(d.y[s], static_cast<size_t>(c.batch) * c.out, 1.f);
  }
  return d;
}

// ---- One rank's trainer -----------------------------------------------------------------

// Device memory of the current device.
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  void alloc(size_t n) {
    bytes = n;
    CHECK_API(kilnrtMalloc(&p, n, KILN_MEM_MALLOC_HUGE_FIRST));
  }
  void upload(const float* src, size_t n) {
    CHECK_API(kilnrtMemcpy(p, bytes, src, n * 4, KILN_MEMCPY_HOST_TO_DEVICE));
  }
  std::vector<float> download() const {
    std::vector<float> v(bytes / 4);
    CHECK_API(kilnrtMemcpy(v.data(), bytes, p, bytes, KILN_MEMCPY_DEVICE_TO_HOST));
    return v;
  }
};

// A loaded model and datasets naming device buffers.
struct Exec {
  uint32_t id = 0;
  kilnmdlDataset* in = nullptr;
  kilnmdlDataset* out = nullptr;
};

class Trainer {
 public:
  // rank/nranks describe the shard; comm is null for the single-device reference.
  Trainer(const Config& c, const ModelSet& models, const HostData& data, int rank, int nranks,
          kilnComm comm)
      : c_(c), data_(data), rank_(rank), n_(nranks), b_(c.batch / nranks), comm_(comm) {
    CHECK_API(kilnrtCreateStream(&compute_));
    CHECK_API(kilnrtCreateStream(&comm_stream_));
    for (kilnrtEvent* e : {&ev3_, &ev2_, &ev1_, &ev_comm_}) CHECK_API(kilnrtCreateEvent(e));
    size_t in = static_cast<size_t>(c.in), h = static_cast<size_t>(c.hidden),
           o = static_cast<size_t>(c.out);
    size_t b = static_cast<size_t>(b_);
    x_.resize(static_cast<size_t>(c.steps));
    y_.resize(static_cast<size_t>(c.steps));
    for (int s = 0; s < c.steps; ++s) {
      x_[s].alloc(b * in * 4);
      x_[s].upload(data.x[s].data() + static_cast<size_t>(rank) * b * in, b * in);
      y_[s].alloc(b * o * 4);
      y_[s].upload(data.y[s].data() + static_cast<size_t>(rank) * b * o, b * o);
    }
    for (int k = 0; k < 2; ++k) {
      w1_[k].alloc(in * h * 4);
      w2_[k].alloc(h * h * 4);
      w3_[k].alloc(h * o * 4);
    }
    a1_.alloc(b * h * 4);
    a2_.alloc(b * h * 4);
    g3_.alloc(b * o * 4);
    g2_.alloc(b * h * 4);
    g1_.alloc(b * h * 4);
    d1_.alloc(in * h * 4);
    d2_.alloc(h * h * 4);
    d3_.alloc(h * o * 4);
    inv_b_.alloc(4);
    lr_.alloc(4);
    float inv = 1.f / static_cast<float>(c.batch);
    inv_b_.upload(&inv, 1);
    lr_.upload(&c.lr, 1);
    fwd_id_ = load(models.fwd);
    bwd3_id_ = load(models.bwd3);
    bwd2_id_ = load(models.bwd2);
    bwd1_id_ = load(models.bwd1);
    sgd_id_ = load(models.sgd);
    for (int k = 0; k < 2; ++k) {
      // Forward and backward read the weights of parity k; SGD writes parity 1 - k.
      for (int s = 0; s < c.steps; ++s)
        fwd_[k].push_back(make_exec(fwd_id_, {&x_[s], &y_[s], &w1_[k], &w2_[k], &w3_[k], &inv_b_},
                                    {&a1_, &a2_, &g3_}));
      bwd3_[k] = make_exec(bwd3_id_, {&a2_, &g3_, &w3_[k]}, {&d3_, &g2_});
      bwd2_[k] = make_exec(bwd2_id_, {&a1_, &g2_, &w2_[k]}, {&d2_, &g1_});
      sgd_[k] = make_exec(sgd_id_, {&w1_[k], &w2_[k], &w3_[k], &d1_, &d2_, &d3_, &lr_},
                          {&w1_[1 - k], &w2_[1 - k], &w3_[1 - k]});
    }
    for (int s = 0; s < c.steps; ++s) bwd1_.push_back(make_exec(bwd1_id_, {&x_[s], &g1_}, {&d1_}));
  }

  // Back to the initial weights.
  void reset() {
    parity_ = 0;
    w1_[0].upload(data_.w1.data(), data_.w1.size());
    w2_[0].upload(data_.w2.data(), data_.w2.size());
    w3_[0].upload(data_.w3.data(), data_.w3.size());
  }

  // One training step on batch `s`; returns when its SGD update is done.
  // `local_only`: no communication at all (for timing the compute alone; the ranks' weights
  // then differ).
  void step(int s, bool overlap, bool local_only = false) {
    int k = parity_;
    kilnComm saved = comm_;
    if (local_only) comm_ = nullptr;
    run(fwd_[k][s], compute_);
    run(bwd3_[k], compute_);
    if (overlap) allreduce_after(ev3_, d3_);
    run(bwd2_[k], compute_);
    if (overlap) allreduce_after(ev2_, d2_);
    run(bwd1_[s], compute_);
    if (overlap) {
      allreduce_after(ev1_, d1_);
    } else if (comm_) {
      // Every bucket once backward is over.
      CHECK_API(kilnrtRecordEvent(ev1_, compute_));
      CHECK_API(kilnrtStreamWaitEvent(comm_stream_, ev1_));
      for (DevBuf* d : {&d3_, &d2_, &d1_}) allreduce(*d);
    }
    if (comm_) {
      CHECK_API(kilnrtRecordEvent(ev_comm_, comm_stream_));
      CHECK_API(kilnrtStreamWaitEvent(compute_, ev_comm_));
    }
    run(sgd_[k], compute_);
    CHECK_API(kilnrtSynchronizeStream(compute_));
    parity_ = 1 - k;
    comm_ = saved;
  }

  void barrier() {
    if (!comm_) return;
    CHECK_API(kilnBarrier(comm_, comm_stream_));
    CHECK_API(kilnrtSynchronizeStream(comm_stream_));
  }

  std::vector<std::vector<float>> weights() const {
    return {w1_[parity_].download(), w2_[parity_].download(), w3_[parity_].download()};
  }

 private:
  uint32_t load(const std::vector<char>& bytes) {
    uint32_t id = 0;
    CHECK_API(kilnmdlLoadFromMem(bytes.data(), bytes.size(), &id));
    return id;
  }
  Exec make_exec(uint32_t id, std::vector<DevBuf*> ins, std::vector<DevBuf*> outs) {
    Exec e;
    e.id = id;
    e.in = kilnmdlCreateDataset();
    e.out = kilnmdlCreateDataset();
    for (DevBuf* b : ins)
      CHECK_API(kilnmdlAddDatasetBuffer(e.in, kilnCreateDataBuffer(b->p, b->bytes)));
    for (DevBuf* b : outs)
      CHECK_API(kilnmdlAddDatasetBuffer(e.out, kilnCreateDataBuffer(b->p, b->bytes)));
    return e;
  }
  void run(const Exec& e, kilnrtStream stream) {
    CHECK_API(kilnmdlExecuteAsync(e.id, e.in, e.out, stream));
  }
  void allreduce(DevBuf& d) {
    CHECK_API(
        kilnAllReduce(d.p, d.p, d.bytes / 4, KILN_COMM_FP32, KILN_REDUCE_SUM, comm_, comm_stream_));
  }
  // The bucket's all-reduce waits for the backward model that produced it, not for later ones.
  void allreduce_after(kilnrtEvent ev, DevBuf& d) {
    if (!comm_) return;
    CHECK_API(kilnrtRecordEvent(ev, compute_));
    CHECK_API(kilnrtStreamWaitEvent(comm_stream_, ev));
    allreduce(d);
  }

  const Config& c_;
  const HostData& data_;
  int rank_, n_, b_;
  kilnComm comm_;
  kilnrtStream compute_ = nullptr, comm_stream_ = nullptr;
  kilnrtEvent ev3_ = nullptr, ev2_ = nullptr, ev1_ = nullptr, ev_comm_ = nullptr;
  std::vector<DevBuf> x_, y_;
  DevBuf w1_[2], w2_[2], w3_[2];
  DevBuf a1_, a2_, g3_, g2_, g1_, d1_, d2_, d3_, inv_b_, lr_;
  uint32_t fwd_id_ = 0, bwd3_id_ = 0, bwd2_id_ = 0, bwd1_id_ = 0, sgd_id_ = 0;
  std::vector<Exec> fwd_[2], bwd1_;
  Exec bwd3_[2], bwd2_[2], sgd_[2];
  int parity_ = 0;
};

// Trains from the initial weights; appends the time (ms) of each step but the first to `ms`.
void train(Trainer& t, const Config& c, bool overlap, bool local_only, std::vector<double>* ms) {
  t.reset();
  t.barrier();  // every rank starts the run together
  for (int s = 0; s < c.steps; ++s) {
    Clock::time_point start = Clock::now();
    t.step(s, overlap, local_only);
    if (s > 0)
      ms->push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
}

// Step times of one kind of run: the minimum (the machine least disturbed) and the median.
struct StepStats {
  double min = 0, median = 0;
};

StepStats stats(std::vector<double> v) {
  if (v.empty()) return {};
  std::sort(v.begin(), v.end());
  return {v.front(), v[v.size() / 2]};
}

int parse_int(const char* flag, const char* text, int lo) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > 1 << 20)
    die(std::string(flag) + " " + text + ": expected an integer >= " + std::to_string(lo));
  return static_cast<int>(v);
}

// One rank's runs: after an untimed run, rounds of a run without communication (compute
// alone), a serial one and an overlapped one; the step times of each kind and the weights each
// communicating run ends with.
struct RankResult {
  StepStats overlap, serial, local;
  std::vector<std::vector<float>> w_overlap, w_serial;
};
constexpr int kRounds = 5;

RankResult run_rank(const Config& c, const ModelSet& shard, const HostData& data, int rank,
                    kilnComm comm) {
  Trainer t(c, shard, data, rank, c.ranks, comm);
  std::vector<double> ov, se, lo, warm;
  RankResult res;
  train(t, c, true, false, &warm);
  for (int k = 0; k < kRounds; ++k) {
    train(t, c, false, true, &lo);
    train(t, c, false, false, &se);
    res.w_serial = t.weights();
    train(t, c, true, false, &ov);
    res.w_overlap = t.weights();
  }
  res.overlap = stats(ov);
  res.serial = stats(se);
  res.local = stats(lo);
  return res;
}

// The single-device reference on the full batch (current device, no communication).
std::vector<std::vector<float>> reference_weights(const Config& c, const HostData& data) {
  ModelSet full = compile_models(c.batch, c);
  Trainer t(c, full, data, 0, 1, nullptr);
  std::vector<double> unused;
  train(t, c, false, false, &unused);
  return t.weights();
}

void print_times(const Config& c, StepStats lo, StepStats se, StepStats ov) {
  std::printf("step time (ms, slowest rank, %d steps each)     min   median\n",
              kRounds * (c.steps - 1));
  std::printf("  no communication (compute alone)         %8.3f %8.3f\n", lo.min, lo.median);
  std::printf("  all-reduce after backward                %8.3f %8.3f\n", se.min, se.median);
  std::printf("  all-reduce overlapped with backward      %8.3f %8.3f\n", ov.min, ov.median);
  auto hidden = [](double serial, double overlap, double local) {
    return serial > local ? 100 * (serial - overlap) / (serial - local) : 0.0;
  };
  std::printf(
      "overlap: step %.1f%% shorter by the min (%.0f%% of the communication time hidden), "
      "%.1f%% by the median (%.0f%%)\n",
      100 * (se.min - ov.min) / se.min, hidden(se.min, ov.min, lo.min),
      100 * (se.median - ov.median) / se.median, hidden(se.median, ov.median, lo.median));
}

// Rank 0's weights after both runs against the reference; prints and returns the verdict.
bool check_reference(const Config& c, const RankResult& r0,
                     const std::vector<std::vector<float>>& w_ref) {
  bool ok = true;
  double worst = 0;
  for (int l = 0; l < 3; ++l)
    for (size_t i = 0; i < w_ref[l].size(); ++i) {
      for (const auto* w : {&r0.w_overlap, &r0.w_serial}) {
        double d = std::fabs(static_cast<double>((*w)[l][i]) - w_ref[l][i]);
        double tol = 1e-5 + 1e-4 * std::fabs(w_ref[l][i]);
        worst = std::max(worst, d);
        if (d > tol && ok) {
          std::printf("FAIL: layer-%d weight %zu is %g, the single-device run has %g\n", l + 1, i,
                      (*w)[l][i], w_ref[l][i]);
          ok = false;
        }
      }
    }
  std::printf(
      "largest difference from the single-device full-batch run after %d steps: %.3g (%s)\n",
      c.steps, worst, ok ? "within fp32 tolerance" : "FAIL");
  return ok;
}

// One rank per process (mpirun, or KILN_RANK / KILN_WORLD_SIZE / KILN_ROOT_ADDR).
int main_processes(Config c) {
  CHECK_API(kilnInit(nullptr));
  CHECK_API(kilnrtSetDevice(0));
  kilnComm comm = nullptr;
  CHECK_API(kilnCommInitFromEnv(&comm));
  uint32_t rank = 0, size = 0;
  CHECK_API(kilnCommGetRankId(comm, &rank));
  CHECK_API(kilnCommGetRankSize(comm, &size));
  c.ranks = static_cast<int>(size);
  if (c.batch % c.ranks != 0)
    die("--batch " + std::to_string(c.batch) + " is not divisible by the " +
        std::to_string(c.ranks) + " ranks");
  if (rank == 0)
    std::printf("data_parallel: MLP %d-%d-%d-%d, global batch %d, %d ranks (processes), %d steps\n",
                c.in, c.hidden, c.hidden, c.out, c.batch, c.ranks, c.steps);
  HostData data = make_data(c);
  ModelSet shard = compile_models(c.batch / c.ranks, c);
  RankResult res = run_rank(c, shard, data, static_cast<int>(rank), comm);
  // The slowest rank's times, and whether the weights are the same everywhere: identical on
  // every rank exactly when their elementwise max and min over the ranks are equal.
  double t[6] = {res.local.min,     res.local.median, res.serial.min,
                 res.serial.median, res.overlap.min,  res.overlap.median};
  CHECK_API(kilnAllReduce(t, t, 6, KILN_COMM_FP64, KILN_REDUCE_MAX, comm, nullptr));
  bool identical = true;
  for (const auto* w : {&res.w_overlap, &res.w_serial})
    for (const std::vector<float>& layer : *w) {
      std::vector<float> hi = layer, lo = layer;
      CHECK_API(kilnAllReduce(hi.data(), hi.data(), hi.size(), KILN_COMM_FP32, KILN_REDUCE_MAX,
                              comm, nullptr));
      CHECK_API(kilnAllReduce(lo.data(), lo.data(), lo.size(), KILN_COMM_FP32, KILN_REDUCE_MIN,
                              comm, nullptr));
      CHECK_API(kilnrtSynchronizeStream(nullptr));
      identical = identical && hi == lo;
    }
  CHECK_API(kilnrtSynchronizeStream(nullptr));
  bool ok = identical;
  if (rank == 0) {
    print_times(c, {t[0], t[1]}, {t[2], t[3]}, {t[4], t[5]});
    std::printf(identical ? "weights identical on all %d ranks (overlapped and serial runs)\n"
                          : "FAIL: the weights differ between the %d ranks\n",
                c.ranks);
    ok = check_reference(c, res, reference_weights(c, data)) && ok;
  }
  CHECK_API(kilnCommDestroy(comm));
  kilnFinalize();
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  bool processes = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--processes") {
      processes = true;
      continue;
    }
    if (i + 1 >= argc)
      die("usage: data_parallel [--ranks N | --processes] [--steps S] [--batch B] [--in I] "
          "[--hidden H] "
          "[--out O]");
    if (a == "--ranks")
      c.ranks = parse_int("--ranks", argv[++i], 1);
    else if (a == "--steps")
      c.steps = parse_int("--steps", argv[++i], 2);
    else if (a == "--batch")
      c.batch = parse_int("--batch", argv[++i], 1);
    else if (a == "--hidden")
      c.hidden = parse_int("--hidden", argv[++i], 1);
    else if (a == "--in")
      c.in = parse_int("--in", argv[++i], 1);
    else if (a == "--out")
      c.out = parse_int("--out", argv[++i], 1);
    else
      die("unknown option " + a +
          " (usage: data_parallel [--ranks N | --processes] [--steps S] [--batch B] [--in I] "
          "[--hidden H] [--out O])");
  }
  if (processes) return main_processes(c);
  if (c.batch % c.ranks != 0)
    die("--batch " + std::to_string(c.batch) + " is not divisible by --ranks " +
        std::to_string(c.ranks));

  // One CPU device per rank.
  std::string config =
      (std::filesystem::temp_directory_path() / ("kiln-dp-" + std::to_string(getpid()) + ".json"))
          .string();
  {
    std::ofstream f(config);
    f << "{\"devices\": \"cpu:" << c.ranks << "\"}";
  }
  CHECK_API(kilnInit(config.c_str()));
  std::remove(config.c_str());

  std::printf(
      "data_parallel: MLP %d-%d-%d-%d, global batch %d, %d ranks (threads, one CPU device each), "
      "%d steps\n",
      c.in, c.hidden, c.hidden, c.out, c.batch, c.ranks, c.steps);
  HostData data = make_data(c);
  ModelSet shard = compile_models(c.batch / c.ranks, c);

  std::vector<int32_t> devices(static_cast<size_t>(c.ranks));
  for (int r = 0; r < c.ranks; ++r) devices[static_cast<size_t>(r)] = r;
  std::vector<kilnComm> comms(static_cast<size_t>(c.ranks));
  CHECK_API(kilnrtSetDevice(0));
  CHECK_API(kilnCommInitAll(static_cast<uint32_t>(c.ranks), devices.data(), comms.data()));

  std::vector<RankResult> results(static_cast<size_t>(c.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r) {
    threads.emplace_back([&, r]() {
      CHECK_API(kilnrtSetDevice(r));
      results[static_cast<size_t>(r)] = run_rank(c, shard, data, r, comms[static_cast<size_t>(r)]);
    });
  }
  for (std::thread& t : threads) t.join();

  StepStats ov, se, lo;  // the slowest rank's
  for (const RankResult& x : results) {
    ov = {std::max(ov.min, x.overlap.min), std::max(ov.median, x.overlap.median)};
    se = {std::max(se.min, x.serial.min), std::max(se.median, x.serial.median)};
    lo = {std::max(lo.min, x.local.min), std::max(lo.median, x.local.median)};
  }
  print_times(c, lo, se, ov);
  bool ok = true;
  for (int r = 1; r < c.ranks; ++r)
    for (int l = 0; l < 3; ++l)
      if (results[r].w_overlap[l] != results[0].w_overlap[l] ||
          results[r].w_serial[l] != results[0].w_serial[l]) {
        std::printf("FAIL: rank %d's layer-%d weights differ from rank 0's\n", r, l + 1);
        ok = false;
      }
  if (ok) std::printf("weights identical on all %d ranks (overlapped and serial runs)\n", c.ranks);
  ok = check_reference(c, results[0], reference_weights(c, data)) && ok;
  for (kilnComm comm : comms) kilnCommDestroy(comm);
  kilnFinalize();
  return ok ? 0 : 1;
}
