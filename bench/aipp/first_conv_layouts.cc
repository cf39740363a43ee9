// Which layout the first convolution of an AIPP model is fastest reading (issue 26): the Aipp
// node can write NCHW, NHWC, or (the suggestion) the channel-blocked NC1HWC0 the rest
// of the network computes in. oneDNN 2.6's own convolution, one thread, each layout pair of
// source and destination it has a non-reference implementation for, on the same shapes; the
// source rewritten and the caches scrubbed before each call (as after the Aipp node). Medians.
//
// usage: first_conv_layouts [IC OC H W K STRIDE] [--rounds N]
//        (default 3 16 640 640 3 2: PP-OCRv4 det's first convolution at 640x640;
//        3 32 224 224 3 2 is MobileNetV2's, 3 64 224 224 7 2 ResNet-50's)
#include <omp.h>
#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
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
      std::memset(wm.get_data_handle(), 0, pd.weights_desc().get_size());
      std::memset(bm.get_data_handle(), 0, bd.get_size());
      const dnnl::convolution_forward conv(pd);
      std::vector<double> t;
      for (int r = 0; r < rounds + 3; ++r) {
        for (size_t i = 0; i < scrub.size(); i += 64) scrub[i] = static_cast<unsigned char>(scrub[i] + i);
        float* p = static_cast<float*>(src.get_data_handle());
        for (size_t i = 0; i < sd.get_size() / sizeof(float); ++i) p[i] = static_cast<float>(i % 251) / 251.0f;
        const auto t0 = std::chrono::steady_clock::now();
        conv.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_BIAS, bm}, {DNNL_ARG_DST, dst}});
        strm.wait();
        if (r >= 3) t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      std::printf("  %-16s -> %-16s %-24s %8.3f ms [%.3f, %.3f]  %6.1f GFLOP/s  source %.1f MB\n", tag_name(st),
                  tag_name(dt), impl.c_str(), med, t[t.size() / 4], t[3 * t.size() / 4], flops / med * 1e-6,
                  static_cast<double>(pd.src_desc().get_size()) / 1e6);
    }
  }
  return 0;
}
