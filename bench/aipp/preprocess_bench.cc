// Kiln's AIPP against the OpenCV preprocessing chain it replaces, side by side in one process
// (issue 26), one thread each:
//   opencv:  cvtColor NV12 -> RGB (or BGR), resize INTER_LINEAR, convertTo float32,
//            (x - mean) * (1 / std), HWC -> CHW (cv::split into the planes of the tensor);
//   aipp kernel: the Aipp node of a model compiled from a graph that is only its input (with
//            the same configuration), its prepared kernel run on the NV12 frame: the
//            preprocessing alone, writing the float32 tensor as OpenCV's chain does;
//   aipp rows: the kernel's row function alone, every output row into one L1 buffer (the
//            rows' own cost, without the output's traffic), then the same again at once;
//   aipp model: the same model executed through the C API (adds the runtime's call and its
//            copy of the output tensor into the caller's buffer).
// With two more models, the same network compiled without and with AIPP: the network on a
// ready tensor, and with AIPP fused on the NV12 frame; the bar is
// fused <= plain + 10% of the OpenCV chain.
// Rounds alternate the variants; medians. The OpenCV chain and the kernel read the same
// frame, rewritten and with the caches scrubbed before each (as a frame just decoded); the
// models read it from device memory, with the caches scrubbed before each network too, and
// the plain and the fused network take turns going first. Copies are not timed on either side.
//
// usage: preprocess_bench AIPP_ONLY.kiln [PLAIN.kiln FUSED.kiln] [--rounds N] [--bgr]
//                         [--mean a,b,c] [--std a,b,c]
//        bench/aipp/aipp_bench.sh builds the models and runs this.
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/aipp_rows.h"
#include "kernels/kernel_registry.h"
#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "ops/aipp.h"
#include "ops/registry.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "preprocess_bench: %s: %s\n", what.c_str(), kilnGetRecentErrMsg());
  std::exit(1);
}
#define CHECK(call) \
  if ((call) != KILN_SUCCESS) die(#call)

struct Loaded {
  uint32_t id = 0;
  kilnmdlDesc* desc = nullptr;
  kilnmdlDataset* in = nullptr;
  kilnmdlDataset* out = nullptr;
  std::vector<void*> in_buffers;
  std::vector<std::vector<int64_t>> in_dims;
};

kilnmdlDataset* make_dataset(kilnmdlDesc* desc, bool inputs, std::vector<void*>* buffers) {
  kilnmdlDataset* ds = kilnmdlCreateDataset();
  const size_t n = inputs ? kilnmdlGetNumInputs(desc) : kilnmdlGetNumOutputs(desc);
  for (size_t i = 0; i < n; ++i) {
    const size_t bytes = inputs ? kilnmdlGetInputSizeByIndex(desc, i) : kilnmdlGetOutputSizeByIndex(desc, i);
    void* p = nullptr;
    CHECK(kilnrtMalloc(&p, bytes, KILN_MEM_MALLOC_HUGE_FIRST));
    CHECK(kilnmdlAddDatasetBuffer(ds, kilnCreateDataBuffer(p, bytes)));
    if (buffers) buffers->push_back(p);
  }
  return ds;
}

Loaded load(const char* path) {
  Loaded m;
  CHECK(kilnmdlLoadFromFile(path, &m.id));
  m.desc = kilnmdlCreateDesc();
  CHECK(kilnmdlGetDesc(m.desc, m.id));
  m.in = make_dataset(m.desc, true, &m.in_buffers);
  m.out = make_dataset(m.desc, false, nullptr);
  for (size_t i = 0; i < kilnmdlGetNumInputs(m.desc); ++i) {
    kilnmdlIODims dims;
    CHECK(kilnmdlGetInputDims(m.desc, i, &dims));
    m.in_dims.emplace_back(dims.dims, dims.dims + dims.dimCount);
  }
  return m;
}

double time_ms(const std::function<void()>& fn) {
  auto t = Clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A 95% confidence interval of the median of `v`, from its order statistics (no assumption on
// the distribution: the median lies between the ranks n/2 -+ 1.96 sqrt(n)/2).
std::pair<double, double> median_interval(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size()), half = 0.98 * std::sqrt(n);
  const auto rank = [&](double r) { return v[static_cast<size_t>(std::clamp(r, 0.0, n - 1))]; };
  return {rank(std::floor(n / 2 - half)), rank(std::ceil(n / 2 + half))};
}

std::vector<double> parse3(const char* s) {
  std::vector<double> v;
  for (const char* p = s; *p;) {
    char* e = nullptr;
    v.push_back(std::strtod(p, &e));
    p = *e == ',' ? e + 1 : e;
    if (e == p && *p) break;
  }
  if (v.size() != 3) die(std::string("expected three numbers, got ") + s);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<const char*> models;
  int rounds = 200;
  bool bgr = false;
  std::vector<double> mean{123.675, 116.28, 103.53}, stdv{58.395, 57.12, 57.375};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--bgr") bgr = true;
    else if (a == "--mean" && i + 1 < argc) mean = parse3(argv[++i]);
    else if (a == "--std" && i + 1 < argc) stdv = parse3(argv[++i]);
    else models.push_back(argv[i]);
  }
  if (models.size() != 1 && models.size() != 3) {
    std::fprintf(stderr, "usage: preprocess_bench AIPP_ONLY.kiln [PLAIN.kiln FUSED.kiln] [--rounds N] [--bgr] "
                         "[--mean a,b,c] [--std a,b,c]\n");
    return 2;
  }
  // One thread: both sides are measured on one core (OpenCV's own pool off, Kiln's device
  // of one core).
  cv::setNumThreads(1);
  setenv("KILN_NUM_THREADS", "1", 1);
  CHECK(kilnInit(nullptr));
  CHECK(kilnrtSetDevice(0));

  Loaded aipp = load(models[0]);
  if (aipp.in_dims.size() != 1 || aipp.in_dims[0].size() != 3) die("the AIPP model's input is not an NV12 [1,H*3/2,W]");
  const int W = static_cast<int>(aipp.in_dims[0][2]), H = static_cast<int>(aipp.in_dims[0][1] * 2 / 3);
  kilnmdlIODims od;
  CHECK(kilnmdlGetOutputDims(aipp.desc, 0, &od));
  const int h = static_cast<int>(od.dims[2]), w = static_cast<int>(od.dims[3]);

  // A frame of smooth content plus noise (not constant: resize and convert see real data).
  std::vector<uint8_t> frame(static_cast<size_t>(W) * H * 3 / 2);
  std::mt19937 rng(7);
  for (size_t i = 0; i < frame.size(); ++i) frame[i] = static_cast<uint8_t>((i * 7 + (i / W) * 3 + rng() % 32) & 0xFF);
  CHECK(kilnrtMemcpy(aipp.in_buffers[0], frame.size(), frame.data(), frame.size(), KILN_MEMCPY_HOST_TO_DEVICE));
  std::vector<uint8_t> frame_copy = frame;  // what the OpenCV chain and the kernel read

  std::vector<float> tensor(static_cast<size_t>(3) * h * w);
  const size_t tensor_bytes = tensor.size() * sizeof(float);
  cv::Mat rgb, small, f;
  const cv::Scalar cv_mean(mean[0], mean[1], mean[2]), cv_scale(1 / stdv[0], 1 / stdv[1], 1 / stdv[2]);
  auto opencv_chain = [&] {
    cv::Mat nv12(H * 3 / 2, W, CV_8UC1, frame_copy.data());
    cv::cvtColor(nv12, rgb, bgr ? cv::COLOR_YUV2BGR_NV12 : cv::COLOR_YUV2RGB_NV12);
    cv::resize(rgb, small, cv::Size(w, h), 0, 0, cv::INTER_LINEAR);
    small.convertTo(f, CV_32FC3);
    cv::subtract(f, cv_mean, f);
    cv::multiply(f, cv_scale, f);
    std::vector<cv::Mat> planes;
    for (int c = 0; c < 3; ++c) planes.emplace_back(h, w, CV_32FC1, tensor.data() + static_cast<size_t>(c) * h * w);
    cv::split(f, planes);
  };

  // The kernel alone, as the runtime prepares it. Its output tensor is allocated per run (the
  // runtime recycles it instead): keep big blocks on the heap so that is not a fresh mapping
  // page-faulted in every time.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  auto loaded = kiln::model::load_model(models[0]);
  if (!loaded.ok()) die(loaded.status().to_string());
  const kiln::ir::Node* aipp_node = nullptr;
  for (const kiln::ir::Value* v : loaded->graph->inputs())
    if (!aipp_node) aipp_node = kiln::ops::aipp_node_for_input(*loaded->graph, v);
  if (!aipp_node) die("the AIPP model has no Aipp node");
  std::unique_ptr<kiln::kernels::Kernel> kernel = kiln::kernels::select_kernel(*aipp_node);
  if (!kernel) die("no fast kernel for the Aipp node");
  kiln::RuntimeValue image(
      kiln::Tensor::view(kiln::DataType::kUInt8, {1, H * 3 / 2, W}, frame_copy.data(), nullptr));
  std::vector<const kiln::RuntimeValue*> kernel_inputs{&image};
  std::vector<kiln::RuntimeValue> kernel_outputs(1);
  auto run_kernel = [&] {
    // Free the last output first, so each run writes the same block (as the runtime's
    // recycled tensors), not two alternating ones.
    kernel_outputs[0] = kiln::RuntimeValue();
    kiln::ops::KernelContext ctx(*aipp_node, kernel_inputs, &kernel_outputs);
    kiln::Status s = kernel->run(ctx);
    if (!s.ok()) die(s.to_string());
  };

  // The kernel's row function alone, each output row written over the same three rows of an
  // L1-sized buffer: what the rows cost without the output's traffic to memory (as kiln
  // AippConv runs them into its strip buffer, with no convolution in between).
  auto info = kiln::ops::aipp_node_info(*aipp_node);
  if (!info.ok()) die(info.status().to_string());
  namespace aipp_simd = kiln::kernels::aipp_simd;
  const std::vector<aipp_simd::ImagePlan> plans = aipp_simd::make_plans(info->params);
  const aipp_simd::RowsFn rows_fn = aipp_simd::select_rows();
  std::vector<float> row_buffer(static_cast<size_t>(3) * w + 64);
  auto run_rows = [&] {
    aipp_simd::Job job = aipp_simd::make_job(info->out, image.tensor(), plans);
    job.dst = row_buffer.data();
    job.plane_floats = w, job.image_floats = 3 * w;
    for (int y = 0; y < h; ++y) {
      job.row0 = y, job.continues = y > 0;
      rows_fn(job, y, y + 1);
    }
  };

  Loaded plain, fused;
  if (models.size() == 3) {
    plain = load(models[1]);
    fused = load(models[2]);
    if (plain.in_buffers.size() != 1 || kilnmdlGetInputSizeByIndex(plain.desc, 0) != tensor_bytes)
      die("the plain model's input is not the " + std::to_string(tensor_bytes) + "-byte tensor the AIPP model writes");
    CHECK(kilnrtMemcpy(fused.in_buffers[0], frame.size(), frame.data(), frame.size(), KILN_MEMCPY_HOST_TO_DEVICE));
  }
  // Each timed call starts from the same cache state: a new video frame has just been
  // written by the decoder; whatever ran before (the other variant) is gone.
  std::vector<uint8_t> scrub(size_t{64} << 20);
  // With `input`, the call's model input is written last instead of the frame's copy: the
  // fused model's NV12 frame, or the plain model's tensor just made by the preprocessing.
  auto fresh = [&](const std::function<void()>& fn, void* input = nullptr, const void* data = nullptr,
                   size_t bytes = 0) {
    for (size_t i = 0; i < scrub.size(); i += 64) scrub[i] = static_cast<uint8_t>(i + scrub[i]);
    if (input) {
      CHECK(kilnrtMemcpy(input, bytes, data, bytes, KILN_MEMCPY_HOST_TO_DEVICE));
    } else {
      std::memcpy(frame_copy.data(), frame.data(), frame.size());  // the frame, freshly written
    }
    return time_ms(fn);
  };
  // t_extra: per round, the fused network's time minus the plain one's, run back to back.
  std::vector<double> t_cv, t_kernel, t_rows, t_rows2, t_aipp, t_plain, t_fused, t_extra;
  for (int r = 0; r < rounds + 5; ++r) {
    const bool keep = r >= 5;  // warm-up rounds
    double a = fresh(opencv_chain);
    double k = fresh(run_kernel);
    double rw = fresh(run_rows);
    double rw2 = time_ms(run_rows);
    if (keep) t_rows2.push_back(rw2);
    double b = time_ms([&] { CHECK(kilnmdlExecute(aipp.id, aipp.in, aipp.out)); });
    if (keep) t_cv.push_back(a), t_kernel.push_back(k), t_rows.push_back(rw), t_aipp.push_back(b);
    if (models.size() == 3) {
      // Each network starts from scrubbed caches (its weights in memory, as after the rest of a
      // video pipeline's work) with only its input just written, and the two take turns going
      // first: the second one otherwise always finds the first one's weights and activations
      // (dirty lines to write back) in the caches.
      auto plain_run = [&] { CHECK(kilnmdlExecute(plain.id, plain.in, plain.out)); };
      auto fused_run = [&] { CHECK(kilnmdlExecute(fused.id, fused.in, fused.out)); };
      auto plain_fresh = [&] { return fresh(plain_run, plain.in_buffers[0], tensor.data(), tensor_bytes); };
      auto fused_fresh = [&] { return fresh(fused_run, fused.in_buffers[0], frame.data(), frame.size()); };
      double c = 0, d = 0;
      if (r % 2 == 0) {
        c = plain_fresh();
        d = fused_fresh();
      } else {
        d = fused_fresh();
        c = plain_fresh();
      }
      if (keep) t_plain.push_back(c), t_fused.push_back(d), t_extra.push_back(d - c);
    }
  }
  const double cv_ms = median(t_cv), kernel_ms = median(t_kernel), aipp_ms = median(t_aipp);
  std::printf("preprocessing %dx%d NV12 -> %dx%d float32 CHW, 1 thread, median of %d rounds\n", W, H, w, h, rounds);
  std::printf("  opencv chain      %8.3f ms\n", cv_ms);
  std::printf("  kiln aipp kernel  %8.3f ms   (%.1fx faster)\n", kernel_ms, cv_ms / kernel_ms);
  std::printf("  kiln aipp rows    %8.3f ms   (the row function, output rows into one L1 buffer)\n",
              median(t_rows));
  std::printf("  kiln aipp rows hot %8.3f ms   (the same again at once: the frame where the first run left it)\n",
              median(t_rows2));
  std::printf("  kiln aipp model   %8.3f ms   (%.1fx faster; + the runtime's call and output copy)\n", aipp_ms,
              cv_ms / aipp_ms);
  if (models.size() == 3) {
    // On a shared machine a network's time moves by a factor of two from one second to the next
    // (other jobs' use of the memory and the last-level cache), so the medians of the two
    // networks, each over all rounds, may differ by more than the bar (10% of the OpenCV chain,
    // about 0.2 ms at 224x224). The bar is judged on the rounds' own differences: the two
    // networks ran back to back in each round and share its machine state.
    const double p = median(t_plain), fz = median(t_fused), bar = 0.1 * cv_ms;
    // Met when the whole interval of the median difference is under the bar, missed when it is
    // all above; otherwise this run's noise cannot tell.
    const double extra = median(t_extra);
    const auto [lo, hi] = median_interval(t_extra);
    const char* verdict = hi <= bar ? "met" : lo > bar ? "MISSED" : "not resolved at this noise";
    std::printf("model alone on a ready tensor   %8.3f ms\n", p);
    std::printf("model with AIPP on NV12         %8.3f ms\n", fz);
    std::printf("  with AIPP - alone, per round  %8.3f ms median, 95%% interval [%.3f, %.3f]   (bar: <= 10%% of "
                "opencv = %.3f ms: %s)\n",
                extra, lo, hi, bar, verdict);
  }
  return 0;
}
