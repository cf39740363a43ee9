// kilnrtMemcpy host-to-device throughput against plain memcpy of the same buffers, and
// kilnrtMemcpyAsync (one synchronize per copy, and one per batch) for comparison.
//
// The variants alternate within each run and the table gives medians, so drift of the
// machine (other processes, frequency) hits all of them alike. Usage:
//   memcpy_bench [runs]   (default 11)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "kiln/kiln.h"

namespace {

using Clock = std::chrono::steady_clock;

bool check(kilnError e, const char* what) {
  if (e == KILN_SUCCESS) return true;
  std::fprintf(stderr, "%s failed (%d): %s\n", what, e, kilnGetRecentErrMsg());
  return false;
}

double seconds_of(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  size_t bytes;
  double memcpy_gbs, sync_gbs, async_gbs, batch_gbs;
};

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 11;
  if (runs < 1) runs = 1;
  if (!check(kilnInit(nullptr), "kilnInit") || !check(kilnrtSetDevice(0), "kilnrtSetDevice")) return 1;
  kilnrtStream stream = nullptr;
  if (!check(kilnrtCreateStream(&stream), "kilnrtCreateStream")) return 1;

  const size_t sizes[] = {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20};
  const size_t bytes_per_run = size_t{256} << 20;  // each variant moves this much per run
  std::vector<Row> rows;
  for (size_t n : sizes) {
    const int iters = static_cast<int>(std::max<size_t>(bytes_per_run / n, 2));
    // Pageable host source, 64-byte aligned like the device block: with glibc 2.36 on
    // this CPU, memcpy (rep movsb) of a few KiB is ~30x slower when (dst - src) mod 4096
    // is below 64, which a 16-byte aligned malloc buffer can hit at random; both sides
    // would pay it, but it would hide the runtime's own cost.
    unsigned char* src = static_cast<unsigned char*>(std::aligned_alloc(64, (n + 63) / 64 * 64));
    if (src == nullptr) return 1;
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7);
    void* dev = nullptr;
    if (!check(kilnrtMalloc(&dev, n, KILN_MEM_MALLOC_HUGE_FIRST), "kilnrtMalloc")) return 1;
    std::memset(dev, 0, n);  // a CPU device pointer is addressable: warm it the same way
    bool ok = true;
    auto plain = [&] {
      for (int i = 0; i < iters; ++i) {
        std::memcpy(dev, src, n);
        // Keeps the compiler from merging the repeated copies.
        asm volatile("" : : "r"(dev) : "memory");
      }
    };
    auto sync = [&] {
      for (int i = 0; i < iters; ++i) ok &= kilnrtMemcpy(dev, n, src, n, KILN_MEMCPY_HOST_TO_DEVICE) == 0;
    };
    auto async_each = [&] {
      for (int i = 0; i < iters; ++i) {
        ok &= kilnrtMemcpyAsync(dev, n, src, n, KILN_MEMCPY_HOST_TO_DEVICE, stream) == 0;
        ok &= kilnrtSynchronizeStream(stream) == 0;
      }
    };
    auto async_batch = [&] {
      for (int i = 0; i < iters; ++i) {
        ok &= kilnrtMemcpyAsync(dev, n, src, n, KILN_MEMCPY_HOST_TO_DEVICE, stream) == 0;
      }
      ok &= kilnrtSynchronizeStream(stream) == 0;
    };
    plain();  // warm-up
    sync();
    std::vector<double> t_plain, t_sync, t_async, t_batch;
    for (int r = 0; r < runs; ++r) {
      t_plain.push_back(seconds_of(plain));
      t_sync.push_back(seconds_of(sync));
      t_async.push_back(seconds_of(async_each));
      t_batch.push_back(seconds_of(async_batch));
    }
    if (!ok) {
      std::fprintf(stderr, "a copy failed: %s\n", kilnGetRecentErrMsg());
      return 1;
    }
    const double moved = static_cast<double>(n) * iters / 1e9;
    rows.push_back(Row{n, moved / median(t_plain), moved / median(t_sync), moved / median(t_async),
                       moved / median(t_batch)});
    kilnrtFree(dev);
    std::free(src);
  }

  std::printf("H2D copy throughput, pageable host source -> device buffer (median of %d runs)\n", runs);
  std::printf("%10s %12s %14s %7s %16s %7s %16s %7s\n", "size", "memcpy GB/s", "kilnrtMemcpy", "ratio",
              "async+sync each", "ratio", "async batch+sync", "ratio");
  for (const Row& r : rows) {
    char size[32];
    if (r.bytes >= (size_t{1} << 20)) {
      std::snprintf(size, sizeof size, "%zu MiB", r.bytes >> 20);
    } else {
      std::snprintf(size, sizeof size, "%zu KiB", r.bytes >> 10);
    }
    std::printf("%10s %12.2f %14.2f %6.2fx %16.2f %6.2fx %16.2f %6.2fx\n", size, r.memcpy_gbs, r.sync_gbs,
                r.sync_gbs / r.memcpy_gbs, r.async_gbs, r.async_gbs / r.memcpy_gbs, r.batch_gbs,
                r.batch_gbs / r.memcpy_gbs);
  }
  kilnrtDestroyStream(stream);
  kilnFinalize();
  return 0;
}
