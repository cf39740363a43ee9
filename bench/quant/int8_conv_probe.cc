// ResNet-50's int8 convolutions on every oneDNN implementation, with warm and with cold weights
// (issue 28: would a per-layer choice of oneDNN's implementation, TensorRT's tactic selection,
// bring Kiln's int8 ResNet-50 to 0.8x ONNX Runtime? docs/quantization.md, "Tactics").
//
// For each distinct convolution shape of ResNet-50 at batch 1 (u8 NHWC source and destination,
// s8 weights in the layout the implementation asks for, per-channel output scales, an f32 bias,
// the Relu post-op; the residual layers with Kiln's binary post-op chain: clip, binary add,
// linear), walks the primitive descriptor's implementations (primitive_desc::next_impl) and
// times each one's execute + wait:
//   warm   the same weights every run (they stay in the caches between runs, as in a probe of
//          one layer: what a tactic timed in isolation at compile time would see);
//   cold   one of enough copies of the weights to pass 64 MiB, in turn (the weights come from
//          memory, as in a whole-model run where every layer's weights are evicted by the
//          others' before the next inference; ResNet-50's int8 weights are 25.8 MB).
// Prints per shape and implementation the minimum and the median of the timed runs in us.
//
// Usage: int8_conv_probe [RUNS] [--all]   (OMP_NUM_THREADS sets the threads; --all also
//        times the AVX2 / SSE4.1 / gemm implementations, which are never the fastest here)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Shape {
  int ic, oc, hw, k, stride;
  bool residual;  // Kiln's fused residual epilogue (binary post-op form)
};

// ResNet-50's distinct convolutions after the stem (the stride-2 1x1 downsample layers carry
// the residual where qlinear_residual_fusion puts it).
const Shape kShapes[] = {
    {64, 64, 56, 1, 1, false},    {64, 64, 56, 3, 1, false},     {64, 256, 56, 1, 1, false},
    {64, 256, 56, 1, 1, true},    {256, 64, 56, 1, 1, false},    {256, 128, 56, 1, 1, false},
    {128, 128, 56, 3, 2, false},  {128, 512, 28, 1, 1, true},    {256, 512, 56, 1, 2, true},
    {512, 128, 28, 1, 1, false},  {128, 128, 28, 3, 1, false},   {512, 256, 28, 1, 1, false},
    {256, 256, 28, 3, 2, false},  {256, 1024, 14, 1, 1, true},   {512, 1024, 28, 1, 2, true},
    {1024, 256, 14, 1, 1, false}, {256, 256, 14, 3, 1, false},   {1024, 512, 14, 1, 1, false},
    {512, 512, 14, 3, 2, false},  {512, 2048, 7, 1, 1, true},    {1024, 2048, 14, 1, 2, true},
    {2048, 512, 7, 1, 1, false},  {512, 512, 7, 3, 1, false},
};

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double min = 0, median = 0;
};

Timing summarise(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

// Times `runs` executions; weights rotate over `copies` buffers of `bytes` each.
Timing time_conv(const dnnl::convolution_forward& conv, std::unordered_map<int, memory> args,
                 const memory::desc& w_md, int copies, int runs, dnnl::stream& s) {
  const size_t stride = (w_md.get_size() + 4095) & ~size_t{4095};
  std::unique_ptr<char, decltype(&std::free)> pool(static_cast<char*>(std::aligned_alloc(4096, stride * copies)),
                                                   &std::free);
  std::memset(pool.get(), 1, stride * copies);
  std::vector<memory> weights;
  for (int i = 0; i < copies; ++i) weights.emplace_back(w_md, s.get_engine(), pool.get() + stride * i);
  std::vector<double> t;
  const int warmup = 3 * copies;
  for (int i = 0; i < warmup + runs; ++i) {
    args[DNNL_ARG_WEIGHTS] = weights[i % copies];
    const double start = now_us();
    conv.execute(s, args);
    s.wait();
    if (i >= warmup) t.push_back(now_us() - start);
  }
  return summarise(t);
}

void probe(const Shape& sh, int runs, bool all, const dnnl::engine& eng, dnnl::stream& s) {
  const int pad = sh.k / 2, out = (sh.hw + 2 * pad - sh.k) / sh.stride + 1;
  const memory::desc src({1, sh.ic, sh.hw, sh.hw}, dt::u8, tag::nhwc), dst({1, sh.oc, out, out}, dt::u8, tag::nhwc);
  const memory::desc w_any({sh.oc, sh.ic, sh.k, sh.k}, dt::s8, tag::any), bias({sh.oc}, dt::f32, tag::a);
  dnnl::post_ops po;
  if (sh.residual) {  // as kernels/cpu/qlinear_conv.cc's binary form
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, -60.f, 60.f);
    po.append_binary(dnnl::algorithm::binary_add, dst);
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 0.7f, -3.f);
  }
  po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  attr.set_output_scales(1 << 1, std::vector<float>(sh.oc, 1e-3f));
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, w_any,
                                    bias, dst, {sh.stride, sh.stride}, {0, 0}, {pad, pad}, {pad, pad});
  dnnl::convolution_forward::primitive_desc pd(d, attr, eng);
  do {
    const std::string impl = pd.impl_info_str();
    if (impl.rfind("ref", 0) == 0) continue;
    if (!all && impl.find("avx512_core_vnni") == std::string::npos) continue;
    memory x(pd.src_desc(), eng), b(bias, eng), y(pd.dst_desc(), eng), r(dst, eng);
    std::memset(x.get_data_handle(), 3, pd.src_desc().get_size());
    std::memset(b.get_data_handle(), 0, bias.get_size());
    std::memset(r.get_data_handle(), 5, dst.get_size());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, x}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}};
    if (sh.residual) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = r;
    const dnnl::convolution_forward conv(pd);
    const size_t w_bytes = pd.weights_desc().get_size();
    const int copies = static_cast<int>(std::max<size_t>(2, (size_t{64} << 20) / w_bytes + 1));
    const Timing warm = time_conv(conv, args, pd.weights_desc(), 1, runs, s);
    const Timing cold = time_conv(conv, args, pd.weights_desc(), copies, runs, s);
    std::printf("%4d -> %4d %3dx%-3d k%d s%d %-8s %-30s warm %7.1f %7.1f   cold %7.1f %7.1f\n", sh.ic, sh.oc, sh.hw,
                sh.hw, sh.k, sh.stride, sh.residual ? "residual" : "", impl.c_str(), warm.min, warm.median, cold.min,
                cold.median);
  } while (pd.next_impl());
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 30;
  bool all = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--all") == 0) {
      all = true;
    } else {
      runs = std::atoi(argv[i]);
      if (runs < 1) {
        std::fprintf(stderr, "usage: int8_conv_probe [RUNS] [--all]\n");
        return 2;
      }
    }
  }
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream s(eng);
    std::printf("shape                               implementation                 warm min / median (us)  cold min / median\n");
    for (const Shape& sh : kShapes) probe(sh, runs, all, eng, s);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "int8_conv_probe: oneDNN: %s\n", e.what());
    return 1;
  }
  return 0;
}
