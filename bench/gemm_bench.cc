// Kiln's packed-B GEMM (src/kernels/cpu/gemm.h) against oneDNN's sgemm, the route the matmul
// kernel takes otherwise, on the weight products of BERT-base and friends: alternated rounds in
// one process, medians, GFLOP/s and the ratio Kiln / oneDNN (below 1 is faster).
//
//   gemm_bench [--threads N] [--rounds R] [--cold]
//
// --cold rotates over enough copies of the weights that every product reads B from DRAM, as a
// model's layers do (each weight is used once per inference).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/gemm.h"

namespace {

struct Case {
  const char* name;
  int64_t m, k, n;
};

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 15;
  bool cold = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--cold") cold = true;
    else {
      std::fprintf(stderr, "usage: gemm_bench [--threads N] [--rounds R] [--cold]\n");
      return 2;
    }
  }
  kiln::set_num_threads(threads);
  const Case cases[] = {
      {"BERT qkv/out 128x768x768", 128, 768, 768},
      {"BERT ffn_in 128x768x3072", 128, 768, 3072},
      {"BERT ffn_out 128x3072x768", 128, 3072, 768},
      {"OCR rec 40x120x360", 40, 120, 360},
      {"ResNet fc-like 64x2048x1000", 64, 2048, 1000},
      {"ResNet fc 1x2048x1000", 1, 2048, 1000},
      {"BERT pooler 1x768x768", 1, 768, 768},
      {"odd 77x333x129", 77, 333, 129},
  };
  std::printf("packed GEMM (%s) vs oneDNN sgemm, %d thread(s), %d rounds, %s weights\n",
              kiln::kernels::gemm::target_name(), threads, rounds, cold ? "cold" : "hot");
  std::printf("%-30s %10s %10s %8s %8s %7s\n", "product", "kiln ms", "onednn ms", "kiln GF",
              "dnnl GF", "ratio");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Case& c : cases) {
    const size_t b_elems = static_cast<size_t>(c.k * c.n);
    // Copies of B that together exceed the last-level cache when --cold.
    const int copies = cold ? std::max<int>(1, static_cast<int>((256u << 20) / (b_elems * 4))) : 1;
    std::vector<float> a(static_cast<size_t>(c.m * c.k)), y1(static_cast<size_t>(c.m * c.n)),
        y2(y1.size());
    for (float& x : a) x = dist(rng);
    std::vector<std::vector<float>> bs(static_cast<size_t>(copies), std::vector<float>(b_elems));
    std::vector<kiln::kernels::gemm::PackedB> packed;
    for (auto& b : bs) {
      for (float& x : b) x = dist(rng);
      packed.push_back(kiln::kernels::gemm::PackedB::pack(b.data(), c.k, c.n, c.n, 1));
    }
    kiln::kernels::gemm::Epilogue ep;
    std::vector<double> tk, td;
    double max_diff = 0;
    for (int r = 0; r < rounds; ++r) {
      const size_t i = static_cast<size_t>(r % copies);
      double t0 = now_ms();
      kiln::kernels::gemm::multiply(c.m, a.data(), c.k, packed[i], y1.data(), c.n, ep);
      double t1 = now_ms();
      dnnl_sgemm('N', 'N', c.m, c.n, c.k, 1.0f, a.data(), c.k, bs[i].data(), c.n, 0.0f, y2.data(),
                 c.n);
      double t2 = now_ms();
      if (r > 0) {  // the first round warms both up
        tk.push_back(t1 - t0);
        td.push_back(t2 - t1);
      }
      for (size_t j = 0; j < y1.size(); ++j)
        max_diff = std::max(max_diff, static_cast<double>(std::abs(y1[j] - y2[j])));
    }
    const double flop = 2.0 * static_cast<double>(c.m * c.k * c.n);
    const double mk = median(tk), md = median(td);
    std::printf("%-30s %10.3f %10.3f %8.1f %8.1f %7.2f   max |diff| %.1e\n", c.name, mk, md,
                flop / mk / 1e6, flop / md / 1e6, mk / md, max_diff);
  }
  return 0;
}
