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
// --wino: oneDNN's int8 Winograd F(2x2, 3x3) (algorithm::convolution_winograd, jit_int8_wino)
// against Kiln's choice (convolution_direct, oneDNN's first implementation) on ResNet-50's 3x3
// stride-1 layers: which of Kiln's attributes it accepts, both timed warm and cold in alternated
// rounds, and its error against the exact int8 result (Winograd rounds the source to a quarter
// of its steps and the transformed weights to 9/4 of theirs, so it is not exact).
//
// Usage: int8_conv_probe [RUNS] [--all | --wino]   (OMP_NUM_THREADS sets the threads; --all
//        also times the AVX2 / SSE4.1 / gemm implementations, never the fastest here)
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
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

// Times `runs` executions into `t`; weights rotate over `copies` buffers of w_md's size each.
void sample_conv(const dnnl::convolution_forward& conv, std::unordered_map<int, memory> args,
                 const memory::desc& w_md, int copies, int runs, dnnl::stream& s, std::vector<double>& t) {
  const size_t stride = (w_md.get_size() + 4095) & ~size_t{4095};
  std::unique_ptr<char, decltype(&std::free)> pool(static_cast<char*>(std::aligned_alloc(4096, stride * copies)),
                                                   &std::free);
  std::memset(pool.get(), 1, stride * copies);
  std::vector<memory> weights;
  for (int i = 0; i < copies; ++i) weights.emplace_back(w_md, s.get_engine(), pool.get() + stride * i);
  const int warmup = 3 * copies;
  for (int i = 0; i < warmup + runs; ++i) {
    args[DNNL_ARG_WEIGHTS] = weights[i % copies];
    const double start = now_us();
    conv.execute(s, args);
    s.wait();
    if (i >= warmup) t.push_back(now_us() - start);
  }
}

Timing time_conv(const dnnl::convolution_forward& conv, const std::unordered_map<int, memory>& args,
                 const memory::desc& w_md, int copies, int runs, dnnl::stream& s) {
  std::vector<double> t;
  sample_conv(conv, args, w_md, copies, runs, s, t);
  return summarise(t);
}

// Enough copies of `w_md`'s weights to pass 64 MiB: "cold" weights.
int cold_copies(const memory::desc& w_md) {
  return static_cast<int>(std::max<size_t>(2, (size_t{64} << 20) / w_md.get_size() + 1));
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
    const int copies = cold_copies(pd.weights_desc());
    const Timing warm = time_conv(conv, args, pd.weights_desc(), 1, runs, s);
    const Timing cold = time_conv(conv, args, pd.weights_desc(), copies, runs, s);
    std::printf("%4d -> %4d %3dx%-3d k%d s%d %-8s %-30s warm %7.1f %7.1f   cold %7.1f %7.1f\n", sh.ic, sh.oc, sh.hw,
                sh.hw, sh.k, sh.stride, sh.residual ? "residual" : "", impl.c_str(), warm.min, warm.median, cold.min,
                cold.median);
  } while (pd.next_impl());
}


// --wino ---------------------------------------------------------------------------------------

// ResNet-50's 3x3 stride-1 convolutions: the only ones Winograd F(2x2, 3x3) takes.
const Shape kWinoShapes[] = {
    {64, 64, 56, 3, 1, false}, {128, 128, 28, 3, 1, false}, {256, 256, 14, 3, 1, false}, {512, 512, 7, 3, 1, false}};

// A 3x3 stride-1 convolution with Kiln's plain attributes (kernels/cpu/qlinear_conv.cc):
// per-channel output scales (1e-3 unless given), an f32 bias, Relu; `alg` direct or Winograd.
// Throws dnnl::error when oneDNN has no implementation for it.
dnnl::convolution_forward::primitive_desc conv3x3_pd(const Shape& sh, dnnl::algorithm alg, const dnnl::engine& eng,
                                                     std::vector<float> scales = {}) {
  const memory::desc src({1, sh.ic, sh.hw, sh.hw}, dt::u8, tag::nhwc), dst({1, sh.oc, sh.hw, sh.hw}, dt::u8, tag::nhwc);
  const memory::desc w_any({sh.oc, sh.ic, 3, 3}, dt::s8, tag::any), bias({sh.oc}, dt::f32, tag::a);
  dnnl::post_ops po;
  po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  dnnl::primitive_attr attr;
  attr.set_post_ops(po);
  if (scales.empty()) scales.assign(sh.oc, 1e-3f);
  attr.set_output_scales(1 << 1, scales);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, alg, src, w_any, bias, dst, {1, 1}, {0, 0},
                                    {1, 1}, {1, 1});
  return dnnl::convolution_forward::primitive_desc(d, attr, eng);
}

// Which of Kiln's int8 convolution attributes oneDNN's Winograd accepts (primitive_desc
// creation on the 56x56 layer), and what convolution_auto picks at batch 1.
void wino_attributes(const dnnl::engine& eng) {
  const Shape sh = kWinoShapes[0];
  struct Case {
    const char* what;
    std::function<void(dnnl::primitive_attr&, dnnl::post_ops&, dt& src, dt& dst, dt& bias)> set;
  };
  const auto relu = [](dnnl::post_ops& po) { po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f); };
  const auto per_channel = [&](dnnl::primitive_attr& a) { a.set_output_scales(1 << 1, std::vector<float>(sh.oc, 1e-3f)); };
  const memory::desc y_md({1, sh.oc, sh.hw, sh.hw}, dt::u8, tag::nhwc);
  const Case cases[] = {
      {"Kiln's plain: per-channel output scales, f32 bias, Relu",
       [&](auto& a, auto& po, auto&, auto&, auto&) { per_channel(a), relu(po); }},
      {"one output scale, Relu", [&](auto& a, auto& po, auto&, auto&, auto&) { a.set_output_scales(0, {1e-3f}), relu(po); }},
      {"no post-op", [&](auto& a, auto&, auto&, auto&, auto&) { per_channel(a); }},
      {"Clip(0, 6) (Relu6)",
       [&](auto& a, auto& po, auto&, auto&, auto&) {
         per_channel(a), po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f, 100.f);
       }},
      {"source zero point (runtime)",
       [&](auto& a, auto& po, auto&, auto&, auto&) {
         per_channel(a), relu(po), a.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
       }},
      {"destination zero point (runtime)",
       [&](auto& a, auto& po, auto&, auto&, auto&) {
         per_channel(a), relu(po), a.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
       }},
      {"sum post-op (scale 0.7), Relu",
       [&](auto& a, auto& po, auto&, auto&, auto&) { per_channel(a), po.append_sum(0.7f), relu(po); }},
      {"sum post-op with a zero point (3), Relu",
       [&](auto& a, auto& po, auto&, auto&, auto&) { per_channel(a), po.append_sum(0.7f, 3, dt::u8), relu(po); }},
      {"Kiln's residual sum form: clip, sum, Relu",
       [&](auto& a, auto& po, auto&, auto&, auto&) {
         per_channel(a), po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, -60.f, 60.f), po.append_sum(0.7f),
             relu(po);
       }},
      {"Kiln's residual binary form: clip, binary add, linear, Relu",
       [&](auto& a, auto& po, auto&, auto&, auto&) {
         per_channel(a), po.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, -60.f, 60.f),
             po.append_binary(dnnl::algorithm::binary_add, y_md),
             po.append_eltwise(1.f, dnnl::algorithm::eltwise_linear, 0.7f, -3.f), relu(po);
       }},
      {"s8 source", [&](auto& a, auto& po, auto& src, auto&, auto&) { per_channel(a), relu(po), src = dt::s8; }},
      {"s8 destination", [&](auto& a, auto& po, auto&, auto& dst, auto&) { per_channel(a), relu(po), dst = dt::s8; }},
      {"s32 bias", [&](auto& a, auto& po, auto&, auto&, auto& bias) { per_channel(a), relu(po), bias = dt::s32; }},
  };
  std::printf("Winograd's attributes (%d -> %d at %dx%d, 3x3 stride 1 pad 1):\n", sh.ic, sh.oc, sh.hw, sh.hw);
  for (const Case& c : cases) {
    dnnl::primitive_attr attr;
    dnnl::post_ops po;
    dt src = dt::u8, dst = dt::u8, bias = dt::f32;
    c.set(attr, po, src, dst, bias);
    attr.set_post_ops(po);
    std::string verdict;
    try {
      dnnl::convolution_forward::desc d(
          dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
          memory::desc({1, sh.ic, sh.hw, sh.hw}, src, tag::nhwc), memory::desc({sh.oc, sh.ic, 3, 3}, dt::s8, tag::any),
          memory::desc({sh.oc}, bias, tag::a), memory::desc({1, sh.oc, sh.hw, sh.hw}, dst, tag::nhwc), {1, 1}, {0, 0},
          {1, 1}, {1, 1});
      verdict = "accepted: " + std::string(dnnl::convolution_forward::primitive_desc(d, attr, eng).impl_info_str());
    } catch (const dnnl::error&) {
      verdict = "refused (oneDNN has no implementation for it)";
    }
    std::printf("  %-60s %s\n", c.what, verdict.c_str());
  }
  for (const Shape& s : kWinoShapes)
    std::printf("  convolution_auto, %d -> %d at %dx%d: %s\n", s.ic, s.oc, s.hw, s.hw,
                conv3x3_pd(s, dnnl::algorithm::convolution_auto, eng).impl_info_str());
}

// Direct (Kiln's choice) against Winograd, warm and cold weights, `rounds` alternated rounds of
// `runs` each; min and median over all rounds' runs.
void wino_timing(int runs, int rounds, const dnnl::engine& eng, dnnl::stream& s) {
  std::printf("\nshape                      implementation                 warm min / median (us)  cold min / median;"
              " ratio: Winograd / direct, warm min, median, cold min, median\n");
  for (const Shape& sh : kWinoShapes) {
    struct Side {
      dnnl::convolution_forward::primitive_desc pd;
      std::unordered_map<int, memory> args;
      std::vector<double> warm, cold;
    };
    Side sides[2];
    sides[0].pd = conv3x3_pd(sh, dnnl::algorithm::convolution_direct, eng);
    sides[1].pd = conv3x3_pd(sh, dnnl::algorithm::convolution_winograd, eng);
    std::vector<dnnl::convolution_forward> convs;
    for (Side& side : sides) {
      const auto& pd = side.pd;
      memory x(pd.src_desc(), eng), b(pd.bias_desc(), eng), y(pd.dst_desc(), eng);
      std::memset(x.get_data_handle(), 3, pd.src_desc().get_size());
      std::memset(b.get_data_handle(), 0, pd.bias_desc().get_size());
      side.args = {{DNNL_ARG_SRC, x}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}};
      convs.emplace_back(pd);
    }
    for (int r = 0; r < rounds; ++r)
      for (int i = 0; i < 2; ++i) {
        sample_conv(convs[i], sides[i].args, sides[i].pd.weights_desc(), 1, runs, s, sides[i].warm);
        sample_conv(convs[i], sides[i].args, sides[i].pd.weights_desc(), cold_copies(sides[i].pd.weights_desc()), runs,
                    s, sides[i].cold);
      }
    Timing t[2][2];
    for (int i = 0; i < 2; ++i) t[i][0] = summarise(sides[i].warm), t[i][1] = summarise(sides[i].cold);
    for (int i = 0; i < 2; ++i)
      std::printf("%4d -> %4d %3dx%-3d k3 s1 %-30s warm %7.1f %7.1f   cold %7.1f %7.1f", sh.ic, sh.oc, sh.hw, sh.hw,
                  sides[i].pd.impl_info_str(), t[i][0].min, t[i][0].median, t[i][1].min, t[i][1].median),
          std::printf("\n");
    std::printf("%4d -> %4d %3dx%-3d       %-30s %5.3f %5.3f %5.3f %5.3f\n", sh.ic, sh.oc, sh.hw, sh.hw, "  ratio",
                t[1][0].min / t[0][0].min, t[1][0].median / t[0][0].median, t[1][1].min / t[0][1].min,
                t[1][1].median / t[0][1].median);
  }
}

// One layer's data as a calibrated model gives it: post-Relu u8 activations, per-channel
// symmetric s8 weights, an int32 bias, the output scale from the result's distribution; the
// exact int8 result (int32 accumulation, then the float32 epilogue of docs/quantization.md);
// and the float convolution of the data before quantisation, for scale: how far the exact
// int8 result itself is from it.
struct LayerData {
  std::vector<uint8_t> x;      // H W C
  std::vector<int8_t> w;       // O I 3 3
  std::vector<float> bias;     // B, an integer at scale x_scale * w_scale[c], as float32
  std::vector<float> scales;   // x_scale * w_scale[c] / y_scale
  std::vector<uint8_t> exact;  // H W O
  std::vector<float> ideal;    // H W O: the float result in output steps, Relu'd, within [0, 255]
};

// x: Relu(N(0, 1)) with `x_sigmas` standard deviations at 255 (4: a tight calibration, large
// values; 8: a loose one, values half as large against Winograd's source rounding). w: N(0, 1),
// each output channel scaled to +-127. B: N(0, 0.5) of the result's standard deviation. y: 4
// standard deviations of the pre-Relu result at 255.
LayerData make_layer(const Shape& sh, double x_sigmas, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const int hw = sh.hw, ic = sh.ic, oc = sh.oc, k = 9 * ic;
  LayerData d;
  const double x_scale = x_sigmas / 255;
  d.x.resize(size_t(hw) * hw * ic);
  std::vector<float> xf(d.x.size());
  for (size_t i = 0; i < d.x.size(); ++i) {
    xf[i] = float(std::max(0.0, normal(rng)));
    d.x[i] = uint8_t(std::min(255.0, std::nearbyint(xf[i] / x_scale)));
  }
  d.w.resize(size_t(oc) * k);
  std::vector<int8_t> w_hwi(d.w.size());  // O 3 3 I, for the reference's inner loop
  std::vector<float> wf_hwi(d.w.size());
  std::vector<double> w_scale(oc);
  for (int o = 0; o < oc; ++o) {
    std::vector<double> wf(k);
    double m = 0;
    for (double& v : wf) v = normal(rng), m = std::max(m, std::abs(v));
    w_scale[o] = m / 127;
    for (int i = 0; i < ic; ++i)
      for (int t = 0; t < 9; ++t) {
        wf_hwi[size_t(o) * k + t * ic + i] = float(wf[i * 9 + t]);
        d.w[size_t(o) * k + i * 9 + t] = w_hwi[size_t(o) * k + t * ic + i] = int8_t(std::nearbyint(wf[i * 9 + t] / w_scale[o]));
      }
  }
  std::vector<int32_t> acc(size_t(hw) * hw * oc, 0);
  std::vector<double> accf(acc.size(), 0);
  for (int oy = 0; oy < hw; ++oy)
    for (int ox = 0; ox < hw; ++ox)
      for (int o = 0; o < oc; ++o) {
        int32_t sum = 0;
        double sumf = 0;
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 3; ++kx) {
            const int iy = oy + ky - 1, ix = ox + kx - 1;
            if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;  // zero padding: x_zero_point 0
            const uint8_t* xp = &d.x[(size_t(iy) * hw + ix) * ic];
            const int8_t* wp = &w_hwi[size_t(o) * k + (ky * 3 + kx) * ic];
            for (int i = 0; i < ic; ++i) sum += int32_t(xp[i]) * wp[i];
            const float* xfp = &xf[(size_t(iy) * hw + ix) * ic];
            const float* wfp = &wf_hwi[size_t(o) * k + (ky * 3 + kx) * ic];
            for (int i = 0; i < ic; ++i) sumf += double(xfp[i]) * wfp[i];
          }
        acc[(size_t(oy) * hw + ox) * oc + o] = sum;
        accf[(size_t(oy) * hw + ox) * oc + o] = sumf;
      }
  double sq = 0;
  for (size_t i = 0; i < acc.size(); ++i) {
    const double v = acc[i] * x_scale * w_scale[i % oc];
    sq += v * v;
  }
  const double sd = std::sqrt(sq / acc.size());
  d.bias.resize(oc);
  for (int o = 0; o < oc; ++o) d.bias[o] = float(std::nearbyint(0.5 * sd * normal(rng) / (x_scale * w_scale[o])));
  const double y_scale = 4 * sd * std::sqrt(1.25) / 255;
  for (int o = 0; o < oc; ++o) d.scales.push_back(float(double(float(x_scale * w_scale[o])) / y_scale));
  d.exact.resize(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) {
    const float v = (float(acc[i]) + d.bias[i % oc]) * d.scales[i % oc];
    d.exact[i] = uint8_t(std::clamp(std::nearbyint(v), 0.f, 255.f));
    const double b = d.bias[i % oc] * x_scale * w_scale[i % oc];
    d.ideal.push_back(float(std::clamp((accf[i] + b) / y_scale, 0.0, 255.0)));
  }
  return d;
}

// Runs the convolution (Kiln's plain attributes with the layer's scales) on the layer's data.
std::vector<uint8_t> run_layer(const Shape& sh, dnnl::algorithm alg, const LayerData& d, const dnnl::engine& eng,
                               dnnl::stream& s) {
  const dnnl::convolution_forward::primitive_desc pd = conv3x3_pd(sh, alg, eng, d.scales);
  std::vector<uint8_t> y(d.exact.size());
  memory x(pd.src_desc(), eng, const_cast<uint8_t*>(d.x.data())), b(pd.bias_desc(), eng, const_cast<float*>(d.bias.data()));
  memory ym(pd.dst_desc(), eng, y.data()), w(pd.weights_desc(), eng);
  // oneDNN 2.6 transforms weights into the Winograd layout from f32 only (no s8 -> wino reorder):
  // W's integers as f32, exact.
  memory w_user(memory::desc({sh.oc, sh.ic, 3, 3}, dt::f32, tag::oihw), eng);
  std::copy(d.w.begin(), d.w.end(), static_cast<float*>(w_user.get_data_handle()));
  dnnl::reorder(w_user, w).execute(s, w_user, w);
  dnnl::convolution_forward(pd).execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, ym}});
  s.wait();
  return y;
}

// Deviation of `y` from the exact result, in output quantisation steps; and its mean distance
// from the float result (the exact result's own, for scale: about a quarter step).
void print_error(const char* what, const std::vector<uint8_t>& y, const LayerData& d) {
  const std::vector<uint8_t>& exact = d.exact;
  double to_float = 0;
  for (size_t i = 0; i < y.size(); ++i) to_float += std::abs(y[i] - d.ideal[i]);
  int max_d = 0;
  size_t at_least[4] = {0, 0, 0, 0};  // >= 1, 2, 4, 8 steps
  double sum = 0;
  size_t nonzero = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const int dv = std::abs(int(y[i]) - int(exact[i]));
    max_d = std::max(max_d, dv);
    sum += dv;
    nonzero += exact[i] != 0;
    for (int j = 0; j < 4; ++j) at_least[j] += dv >= (1 << j);
  }
  const double n = double(y.size());
  std::printf("    %-8s max %3d  mean %.3f  >=1: %6.2f%%  >=2: %6.2f%%  >=4: %6.2f%%  >=8: %6.3f%%  (of %zu, %zu exact non-zero)"
              "  to float: mean %.3f\n",
              what, max_d, sum / n, 100 * at_least[0] / n, 100 * at_least[1] / n, 100 * at_least[2] / n,
              100 * at_least[3] / n, y.size(), nonzero, to_float / n);
}

void wino_error(const dnnl::engine& eng, dnnl::stream& s) {
  std::printf("\nerror against the exact int8 result, in output steps (u8 Y after Relu; x: Relu(N(0,1)), its\n"
              "standard deviations at 255 as given; y: 4 standard deviations of the pre-Relu result at 255):\n");
  for (double x_sigmas : {4.0, 8.0})
    for (const Shape& sh : kWinoShapes) {
      const LayerData d = make_layer(sh, x_sigmas, 28);
      std::printf("  %4d -> %4d at %dx%d, x: %.0f sigmas at 255\n", sh.ic, sh.oc, sh.hw, sh.hw, x_sigmas);
      print_error("direct", run_layer(sh, dnnl::algorithm::convolution_direct, d, eng, s), d);
      print_error("wino", run_layer(sh, dnnl::algorithm::convolution_winograd, d, eng, s), d);
    }
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 30;
  bool all = false, wino = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--all") == 0) {
      all = true;
    } else if (std::strcmp(argv[i], "--wino") == 0) {
      wino = true;
    } else {
      runs = std::atoi(argv[i]);
      if (runs < 1) {
        std::fprintf(stderr, "usage: int8_conv_probe [RUNS] [--all | --wino]\n");
        return 2;
      }
    }
  }
  try {
    dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    dnnl::stream s(eng);
    if (wino) {
      wino_attributes(eng);
      wino_timing(runs, 3, eng, s);
      wino_error(eng, s);
      return 0;
    }
    std::printf("shape                               implementation                 warm min / median (us)  cold min / median\n");
    for (const Shape& sh : kShapes) probe(sh, runs, all, eng, s);
  } catch (const dnnl::error& e) {
    std::fprintf(stderr, "int8_conv_probe: oneDNN: %s\n", e.what());
    return 1;
  }
  return 0;
}
