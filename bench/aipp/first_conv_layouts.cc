// Which layout the first convolution of an AIPP model is fastest reading (issue 26): the Aipp
// node can write NCHW, NHWC, or (the suggestion) the channel-blocked NC1HWC0 the rest
// of the network computes in. oneDNN 2.6's own convolution, one thread, each layout pair of
// source and destination it has a non-reference implementation for, on the same shapes; the
// source rewritten and the caches scrubbed before each call (as after the Aipp node). Medians.
//
// With 16 output channels, a 3x3 kernel and stride 2, also a prototype of the direct convolution an Aipp node could run
// itself (docs/aipp.md, "Where the det model's extra time goes"): per output row, the KxK input
// rows it reads copied into a zero-bordered row buffer (standing for the Aipp node's own rows,
// which would never reach memory as an image), then per 8 output pixels 8 accumulators of the 16
// channels, one FMA per tap and pixel of a broadcast input value and the tap's weight vector;
// output NC1HWC0. Checked against oneDNN's output (max relative difference printed).
//
// usage: first_conv_layouts [IC OC H W K STRIDE] [--rounds N]
//        (default 3 16 640 640 3 2: PP-OCRv4 det's first convolution at 640x640;
//        3 32 224 224 3 2 is MobileNetV2's, 3 64 224 224 7 2 ResNet-50's)
#include <immintrin.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

using dnnl::memory;
using Tag = memory::format_tag;

const char* tag_name(Tag t) {
  switch (t) {
    case Tag::nchw: return "NCHW";
    case Tag::nhwc: return "NHWC";
    case Tag::nChw16c: return "NC1HWC0 (c0 16)";
    default: return "?";
  }
}


// The prototype: src NCHW [ic][h][w], weights packed [ic][k][k][16], dst [oh][ow][16]. K and S
// constants, so that the 8 accumulators stay in registers.
template <int K, int S>
__attribute__((target("avx512f,fma"))) void direct_conv16(const float* src, long ic, long h, long w, const float* wpk,
                                                            const float* bias, long pad, float* dst, long oh, long ow,
                                                            std::vector<float>& rows) {
  const long rw = w + 2 * pad + 8 * S;  // a row with its zero borders and slack for the last block
  rows.assign(static_cast<size_t>(ic * K * rw), 0.0f);
  const __m512 b = _mm512_loadu_ps(bias);
  for (long y = 0; y < oh; ++y) {
    for (long c = 0; c < ic; ++c)
      for (long ky = 0; ky < K; ++ky) {
        float* r = rows.data() + (c * K + ky) * rw;
        const long iy = y * S + ky - pad;
        if (iy < 0 || iy >= h) std::fill(r, r + rw, 0.0f);
        else std::memcpy(r + pad, src + (c * h + iy) * w, static_cast<size_t>(w) * sizeof(float));
      }
    float* out = dst + y * ow * 16;
    for (long x = 0; x < ow; x += 8) {
      __m512 a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b;
      for (long c = 0; c < ic; ++c) {
#pragma GCC unroll 16
        for (int ky = 0; ky < K; ++ky) {
          const float* r = rows.data() + (c * K + ky) * rw + x * S;
          const float* wv = wpk + ((c * K + ky) * K) * 16;
#pragma GCC unroll 16
          for (int kx = 0; kx < K; ++kx) {
            const __m512 wt = _mm512_loadu_ps(wv + kx * 16);
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(r[0 * S + kx]), wt, a0);
            a1 = _mm512_fmadd_ps(_mm512_set1_ps(r[1 * S + kx]), wt, a1);
            a2 = _mm512_fmadd_ps(_mm512_set1_ps(r[2 * S + kx]), wt, a2);
            a3 = _mm512_fmadd_ps(_mm512_set1_ps(r[3 * S + kx]), wt, a3);
            a4 = _mm512_fmadd_ps(_mm512_set1_ps(r[4 * S + kx]), wt, a4);
            a5 = _mm512_fmadd_ps(_mm512_set1_ps(r[5 * S + kx]), wt, a5);
            a6 = _mm512_fmadd_ps(_mm512_set1_ps(r[6 * S + kx]), wt, a6);
            a7 = _mm512_fmadd_ps(_mm512_set1_ps(r[7 * S + kx]), wt, a7);
          }
        }
      }
      const __m512 acc[8] = {a0, a1, a2, a3, a4, a5, a6, a7};
      const long n = std::min<long>(8, ow - x);
      // Non-temporal: the 6.5 MB output leaves the caches anyway (ordinary stores read each line first).
      for (int p = 0; p < n; ++p) _mm512_stream_ps(out + (x + p) * 16, acc[p]);
    }
  }
  _mm_sfence();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> dims{3, 16, 640, 640, 3, 2};
  int rounds = 60;
  size_t d = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (d < dims.size()) dims[d++] = std::atol(argv[i]);
  }
  const long ic = dims[0], oc = dims[1], h = dims[2], w = dims[3], k = dims[4], s = dims[5], pad = k / 2;
  const long oh = (h + 2 * pad - k) / s + 1, ow = (w + 2 * pad - k) / s + 1;
  std::string load;
  std::getline(std::ifstream("/proc/loadavg"), load);
  std::printf("conv %ldx%ldx%ld -> %ld channels, %ldx%ld stride %ld pad %ld, 1 thread, %d rounds, load %s\n", ic, h, w,
              oc, k, k, s, pad, rounds, load.c_str());
  omp_set_num_threads(1);  // oneDNN's OpenMP pool: one thread, as preprocess_bench's models
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  std::vector<unsigned char> scrub(size_t{64} << 20);
  const double flops = 2.0 * oc * oh * ow * ic * k * k;
  std::vector<float> wts(static_cast<size_t>(oc * ic * k * k)), bias(static_cast<size_t>(oc));
  for (size_t i = 0; i < wts.size(); ++i) wts[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = static_cast<float>(i % 7) * 0.1f;
  std::vector<float> onednn_out;  // oneDNN's NCHW -> NC1HWC0 result, for the prototype's check
  auto fill_src = [&](float* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 251) / 251.0f;
  };
  auto scrub_caches = [&] {
    for (size_t i = 0; i < scrub.size(); i += 64) scrub[i] = static_cast<unsigned char>(scrub[i] + i);
  };
  auto report = [&](const char* what, const char* impl, std::vector<double> t, double src_mb) {
    std::sort(t.begin(), t.end());
    const double med = t[t.size() / 2];
    std::printf("  %-35s %-24s %8.3f ms [%.3f, %.3f]  %6.1f GFLOP/s  source %.1f MB\n", what, impl, med,
                t[t.size() / 4], t[3 * t.size() / 4], flops / med * 1e-6, src_mb);
  };
  for (Tag st : {Tag::nchw, Tag::nhwc, Tag::nChw16c}) {
    for (Tag dt : {Tag::nChw16c, Tag::nhwc}) {
      const memory::desc sd({1, ic, h, w}, memory::data_type::f32, st);
      const memory::desc dd({1, oc, oh, ow}, memory::data_type::f32, dt);
      const memory::desc wd({oc, ic, k, k}, memory::data_type::f32, Tag::any);
      const memory::desc bd({oc}, memory::data_type::f32, Tag::x);
      const dnnl::convolution_forward::desc cd(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::convolution_direct, sd, wd, bd, dd, {s, s},
                                               {pad, pad}, {pad, pad});
      const dnnl::convolution_forward::primitive_desc pd(cd, eng);
      const std::string impl = pd.impl_info_str();
      if (impl.rfind("ref", 0) == 0) {
        std::printf("  %-16s -> %-16s %-24s (reference only: not timed)\n", tag_name(st), tag_name(dt), impl.c_str());
        continue;
      }
      memory src(sd, eng), dst(dd, eng), wm(pd.weights_desc(), eng), bm(bd, eng);
      memory plain_w({{oc, ic, k, k}, memory::data_type::f32, Tag::oihw}, eng, wts.data());
      dnnl::reorder(plain_w, wm).execute(strm, plain_w, wm);
      std::memcpy(bm.get_data_handle(), bias.data(), bias.size() * sizeof(float));
      const dnnl::convolution_forward conv(pd);
      std::vector<double> t;
      for (int r = 0; r < rounds + 3; ++r) {
        scrub_caches();
        fill_src(static_cast<float*>(src.get_data_handle()), sd.get_size() / sizeof(float));
        const auto t0 = std::chrono::steady_clock::now();
        conv.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
        strm.wait();
        if (r >= 3) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      if (st == Tag::nchw && dt == Tag::nChw16c) {
        const float* o = static_cast<const float*>(dst.get_data_handle());
        onednn_out.assign(o, o + dd.get_size() / sizeof(float));
      }
      const std::string what = std::string(tag_name(st)) + " -> " + tag_name(dt);
      report(what.c_str(), impl.c_str(), t, static_cast<double>(pd.src_desc().get_size()) / 1e6);
    }
  }
  if (oc != 16 || k != 3 || s != 2 || onednn_out.empty()) return 0;
  // The prototype on the same source, weights and bias.
  std::vector<float> src(static_cast<size_t>(ic * h * w)), rows;
  float* dst = static_cast<float*>(std::aligned_alloc(64, static_cast<size_t>(16 * oh * ow) * sizeof(float)));
  const size_t dst_size = static_cast<size_t>(16 * oh * ow);
  std::vector<float> wpk(static_cast<size_t>(ic * k * k * 16));
  for (long o = 0; o < oc; ++o)
    for (long j = 0; j < ic * k * k; ++j) wpk[static_cast<size_t>(j * 16 + o)] = wts[static_cast<size_t>(o * ic * k * k + j)];
  // Twice: from a source just written after the scrub (as oneDNN above), and with the source
  // and the output already in the caches where they fit (an upper bound of what a fused node's
  // rows in L1 would give: its image rows never leave the core).
  std::vector<double> t, t_warm;
  for (int r = 0; r < rounds + 3; ++r) {
    scrub_caches();
    fill_src(src.data(), src.size());
    auto t0 = std::chrono::steady_clock::now();
    direct_conv16<3, 2>(src.data(), ic, h, w, wpk.data(), bias.data(), pad, dst, oh, ow, rows);
    if (r >= 3) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    t0 = std::chrono::steady_clock::now();
    direct_conv16<3, 2>(src.data(), ic, h, w, wpk.data(), bias.data(), pad, dst, oh, ow, rows);
    if (r >= 3) t_warm.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  double worst = 0;
  for (size_t i = 0; i < dst_size; ++i)
    worst = std::max(worst, std::fabs(dst[i] - onednn_out[i]) / std::max(1.0, std::fabs(static_cast<double>(onednn_out[i]))));
  report("NCHW rows -> NC1HWC0, direct", "prototype", t, static_cast<double>(src.size() * sizeof(float)) / 1e6);
  report("  the same, run again right after", "prototype", t_warm, static_cast<double>(src.size() * sizeof(float)) / 1e6);
  std::printf("  prototype vs oneDNN: max |difference| / max(1, |oneDNN|) = %.2g\n", worst);
  std::free(dst);
  return 0;
}
