// Device and host memory through the C API: copies in every direction checked byte for
// byte against the host source, memset, stream-ordered async copies, every misuse
// returning its error code, the caching allocator's reuse rules and statistics, and the
// device memory limit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kiln/kiln.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::vector<unsigned char> random_bytes(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

std::string last_error() { return kilnGetRecentErrMsg(); }

// Blocks a stream: a KILN_CALLBACK_BLOCK callback that waits until release().
struct Latch {
  std::mutex mutex;
  std::condition_variable cv;
  bool open = false;
  std::atomic<bool> entered{false};

  static void wait_callback(void* user_data) {
    auto* latch = static_cast<Latch*>(user_data);
    latch->entered = true;
    std::unique_lock lock(latch->mutex);
    latch->cv.wait(lock, [latch] { return latch->open; });
  }
  void release() {
    {
      std::lock_guard lock(mutex);
      open = true;
    }
    cv.notify_all();
  }
};

kilnrtMemStats mem_stats(int32_t device) {
  kilnrtMemStats s{};
  EXPECT_EQ(kilnrtGetMemStats(device, &s), KILN_SUCCESS) << last_error();
  return s;
}

// Writes a kilnInit JSON config into the test's temporary directory.
std::string write_config(const std::string& name, const std::string& json) {
  std::string path = testing::TempDir() + "/" + name;
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
  return path;
}

class MemoryTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  }
  void TearDown() override { EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error(); }

  void* device_malloc(size_t size) {
    void* p = nullptr;
    EXPECT_EQ(kilnrtMalloc(&p, size, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS) << last_error();
    return p;
  }
};

// Two logical devices (KILN_DEVICES=cpu:2), device 0 current.
class TwoDeviceMemoryTest : public MemoryTest {
 protected:
  void SetUp() override {
    setenv("KILN_DEVICES", "cpu:2", 1);
    MemoryTest::SetUp();
    unsetenv("KILN_DEVICES");
  }
};

// ---- Copies ---------------------------------------------------------------------------

TEST_F(MemoryTest, RoundTripHostDeviceDeviceHost) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{4096}, 3 * kMiB + 7}) {
    SCOPED_TRACE(n);
    std::vector<unsigned char> src = random_bytes(n, static_cast<unsigned>(n));
    std::vector<unsigned char> back(n, 0);
    void* a = device_malloc(n);
    void* b = device_malloc(n);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
    ASSERT_EQ(kilnrtMemcpy(a, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMemcpy(b, n, a, n, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMemcpy(back.data(), n, b, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS) << last_error();
    EXPECT_EQ(back, src);
    EXPECT_EQ(kilnrtFree(a), KILN_SUCCESS) << last_error();
    EXPECT_EQ(kilnrtFree(b), KILN_SUCCESS) << last_error();
  }
}

TEST_F(MemoryTest, DefaultKindFollowsThePointers) {
  const size_t n = 10000;
  std::vector<unsigned char> src = random_bytes(n, 1);
  std::vector<unsigned char> mid(n, 0), back(n, 0);
  void* a = device_malloc(n);
  void* b = device_malloc(n);
  ASSERT_EQ(kilnrtMemcpy(a, n, src.data(), n, KILN_MEMCPY_DEFAULT), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpy(b, n, a, n, KILN_MEMCPY_DEFAULT), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpy(mid.data(), n, b, n, KILN_MEMCPY_DEFAULT), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpy(back.data(), n, mid.data(), n, KILN_MEMCPY_DEFAULT), KILN_SUCCESS) << last_error();
  EXPECT_EQ(back, src);
  kilnrtFree(a);
  kilnrtFree(b);
}

TEST_F(MemoryTest, PinnedHostIsHostMemory) {
  const size_t n = 100000;
  std::vector<unsigned char> src = random_bytes(n, 2);
  void* pinned = nullptr;
  ASSERT_EQ(kilnrtMallocHost(&pinned, n), KILN_SUCCESS) << last_error();
  ASSERT_NE(pinned, nullptr);
  void* dev = device_malloc(n);
  ASSERT_EQ(kilnrtMemcpy(pinned, n, src.data(), n, KILN_MEMCPY_HOST_TO_HOST), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpy(dev, n, pinned, n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS) << last_error();
  std::memset(pinned, 0, n);
  ASSERT_EQ(kilnrtMemcpy(pinned, n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS) << last_error();
  EXPECT_EQ(std::memcmp(pinned, src.data(), n), 0);
  // Pinned memory is not device memory.
  EXPECT_EQ(kilnrtMemcpy(pinned, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("pinned host memory"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtFree(pinned), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("kilnrtFreeHost"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtFreeHost(dev), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtFreeHost(static_cast<char*>(pinned) + 8), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtFreeHost(pinned), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtFreeHost(pinned), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtFreeHost(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMallocHost(nullptr, 16), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMallocHost(&pinned, 0), KILN_ERROR_INVALID_PARAM);
  kilnrtFree(dev);
}

TEST_F(MemoryTest, SubRangesOfAnAllocation) {
  const size_t n = 4096;
  std::vector<unsigned char> src = random_bytes(n, 3);
  void* dev = device_malloc(n);
  char* d = static_cast<char*>(dev);
  ASSERT_EQ(kilnrtMemset(dev, n, 0, n), KILN_SUCCESS) << last_error();
  // Interior pointers are fine for copies as long as the range stays inside.
  ASSERT_EQ(kilnrtMemcpy(d + 1000, n - 1000, src.data(), 96, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS)
      << last_error();
  std::vector<unsigned char> back(n);
  ASSERT_EQ(kilnrtMemcpy(back.data(), n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS) << last_error();
  for (size_t i = 0; i < n; ++i) {
    unsigned char want = (i >= 1000 && i < 1096) ? src[i - 1000] : 0;
    ASSERT_EQ(back[i], want) << "byte " << i;
  }
  kilnrtFree(dev);
}

TEST_F(MemoryTest, OverlappingDeviceCopyIsMemmove) {
  const size_t n = 5000;
  std::vector<unsigned char> src = random_bytes(n, 4);
  void* dev = device_malloc(n);
  char* d = static_cast<char*>(dev);
  ASSERT_EQ(kilnrtMemcpy(dev, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
  // Forward overlap: [0, 3000) -> [700, 3700); then backward: [2000, 4000) -> [1500, 3500).
  ASSERT_EQ(kilnrtMemcpy(d + 700, n - 700, d, 3000, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpy(d + 1500, n - 1500, d + 2000, 2000, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_SUCCESS)
      << last_error();
  // Reference: copy each source range out first, then write it.
  std::vector<unsigned char> want = src;
  std::vector<unsigned char> tmp(want.begin(), want.begin() + 3000);
  std::copy(tmp.begin(), tmp.end(), want.begin() + 700);
  tmp.assign(want.begin() + 2000, want.begin() + 4000);
  std::copy(tmp.begin(), tmp.end(), want.begin() + 1500);
  std::vector<unsigned char> back(n);
  ASSERT_EQ(kilnrtMemcpy(back.data(), n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  EXPECT_EQ(back, want);
  kilnrtFree(dev);
}

// Copies from 8 MiB up take the streaming-store path: odd sizes and offsets on both sides.
TEST_F(MemoryTest, LargeCopiesAtOddOffsets) {
  const size_t cap = 10 * kMiB;
  const size_t n = 9 * kMiB + 13;
  std::vector<unsigned char> src = random_bytes(n + 3, 9);
  std::vector<unsigned char> back(n + 5, 0);
  void* dev = device_malloc(cap);
  void* dev2 = device_malloc(cap);
  char* d = static_cast<char*>(dev);
  ASSERT_EQ(kilnrtMemcpy(d + 7, cap - 7, src.data() + 3, n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtMemcpy(static_cast<char*>(dev2) + 1, cap - 1, d + 7, n, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtMemcpy(back.data() + 5, n, static_cast<char*>(dev2) + 1, n, KILN_MEMCPY_DEVICE_TO_HOST),
            KILN_SUCCESS)
      << last_error();
  EXPECT_EQ(std::memcmp(back.data() + 5, src.data() + 3, n), 0);
  // A large overlapping copy inside one allocation still moves like memmove.
  ASSERT_EQ(kilnrtMemcpy(d + 7 + kMiB, cap - 7 - kMiB, d + 7, 8 * kMiB + 1, KILN_MEMCPY_DEVICE_TO_DEVICE),
            KILN_SUCCESS)
      << last_error();
  std::vector<unsigned char> want(src.begin() + 3, src.end());
  std::vector<unsigned char> moved(want.begin(), want.begin() + 8 * kMiB + 1);
  std::copy(moved.begin(), moved.end(), want.begin() + kMiB);
  std::vector<unsigned char> got(n);
  ASSERT_EQ(kilnrtMemcpy(got.data(), n, d + 7, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  EXPECT_EQ(got, want);
  // And asynchronously, on the copy engine.
  std::fill(back.begin(), back.end(), 0);
  ASSERT_EQ(kilnrtMemcpyAsync(back.data(), n, d + 7, n, KILN_MEMCPY_DEVICE_TO_HOST, nullptr), KILN_SUCCESS);
  ASSERT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS) << last_error();
  EXPECT_EQ(std::memcmp(back.data(), want.data(), n), 0);
  kilnrtFree(dev);
  kilnrtFree(dev2);
}

TEST_F(MemoryTest, MemsetSetsTheLowByte) {
  const size_t n = 3000;
  void* dev = device_malloc(n);
  ASSERT_EQ(kilnrtMemset(dev, n, 0x11, n), KILN_SUCCESS) << last_error();
  // Only the low byte of value counts: 0x1AB sets 0xAB.
  ASSERT_EQ(kilnrtMemset(static_cast<char*>(dev) + 100, n - 100, 0x1AB, 2000), KILN_SUCCESS) << last_error();
  std::vector<unsigned char> back(n);
  ASSERT_EQ(kilnrtMemcpy(back.data(), n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], (i >= 100 && i < 2100) ? 0xAB : 0x11) << "byte " << i;
  }
  EXPECT_EQ(kilnrtMemset(dev, 10, 0, 11), KILN_ERROR_INVALID_PARAM);
  EXPECT_NE(last_error().find("maxCount"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemset(dev, n + 1, 0, n + 1), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemset(back.data(), n, 0, n), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemset(nullptr, n, 0, n), KILN_ERROR_INVALID_PARAM);
  kilnrtFree(dev);
}

// ---- Asynchronous copies --------------------------------------------------------------

TEST_F(MemoryTest, AsyncCopiesRunInStreamOrder) {
  const size_t n = 64 * 1024;
  const int rounds = 50;
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS) << last_error();
  void* dev = device_malloc(n);
  void* out = nullptr;
  ASSERT_EQ(kilnrtMallocHost(&out, n * rounds), KILN_SUCCESS) << last_error();
  std::vector<std::vector<unsigned char>> src(rounds);
  // Each round overwrites the same device buffer, then copies it out: only in-order
  // execution gives every slot its own round's bytes.
  for (int r = 0; r < rounds; ++r) {
    src[r] = random_bytes(n, 100 + r);
    ASSERT_EQ(kilnrtMemcpyAsync(dev, n, src[r].data(), n, KILN_MEMCPY_HOST_TO_DEVICE, stream), KILN_SUCCESS)
        << last_error();
    ASSERT_EQ(kilnrtMemsetAsync(dev, n, r, 16, stream), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMemcpyAsync(static_cast<char*>(out) + r * n, n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST, stream),
              KILN_SUCCESS)
        << last_error();
  }
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  for (int r = 0; r < rounds; ++r) {
    const unsigned char* got = static_cast<const unsigned char*>(out) + r * n;
    for (size_t i = 0; i < 16; ++i) ASSERT_EQ(got[i], r) << "round " << r << " byte " << i;
    ASSERT_EQ(std::memcmp(got + 16, src[r].data() + 16, n - 16), 0) << "round " << r;
  }
  EXPECT_EQ(kilnrtFreeHost(out), KILN_SUCCESS);
  EXPECT_EQ(kilnrtFree(dev), KILN_SUCCESS);
  EXPECT_EQ(kilnrtDestroyStream(stream), KILN_SUCCESS);
}

TEST_F(MemoryTest, NullStreamIsTheDefaultStream) {
  const size_t n = 1000;
  std::vector<unsigned char> src = random_bytes(n, 5), back(n, 0);
  void* dev = device_malloc(n);
  ASSERT_EQ(kilnrtMemcpyAsync(dev, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE, nullptr), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtMemcpyAsync(back.data(), n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST, nullptr), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtSynchronizeStream(nullptr), KILN_SUCCESS) << last_error();
  EXPECT_EQ(back, src);
  kilnrtFree(dev);
}

TEST_F(MemoryTest, AsyncCopiesAcrossStreamsFollowEvents) {
  const size_t n = 4 * kMiB;
  kilnrtStream producer = nullptr, consumer = nullptr;
  kilnrtEvent ready = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&producer), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtCreateStream(&consumer), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtCreateEvent(&ready), KILN_SUCCESS) << last_error();
  std::vector<unsigned char> src = random_bytes(n, 6), back(n, 0);
  void* dev = device_malloc(n);
  // The producer is held at a latch, so the consumer's copy can only be right if it
  // waited for the event.
  Latch latch;
  ASSERT_EQ(kilnrtLaunchCallback(&Latch::wait_callback, &latch, KILN_CALLBACK_BLOCK, producer), KILN_SUCCESS)
      << last_error();
  ASSERT_EQ(kilnrtMemcpyAsync(dev, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE, producer), KILN_SUCCESS);
  ASSERT_EQ(kilnrtRecordEvent(ready, producer), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtStreamWaitEvent(consumer, ready), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpyAsync(back.data(), n, dev, n, KILN_MEMCPY_DEVICE_TO_HOST, consumer), KILN_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kilnrtStreamStatus status = KILN_STREAM_STATUS_COMPLETE;
  ASSERT_EQ(kilnrtStreamQuery(consumer, &status), KILN_SUCCESS) << last_error();
  EXPECT_EQ(status, KILN_STREAM_STATUS_NOT_READY);
  latch.release();
  ASSERT_EQ(kilnrtSynchronizeStream(consumer), KILN_SUCCESS) << last_error();
  EXPECT_EQ(back, src);
  ASSERT_EQ(kilnrtSynchronizeStream(producer), KILN_SUCCESS) << last_error();
  kilnrtDestroyEvent(ready);
  kilnrtDestroyStream(producer);
  kilnrtDestroyStream(consumer);
  kilnrtFree(dev);
}

TEST_F(TwoDeviceMemoryTest, CopyBetweenDevicesThroughHostWithEvents) {
  uint32_t count = 0;
  ASSERT_EQ(kilnrtGetDeviceCount(&count), KILN_SUCCESS);
  ASSERT_EQ(count, 2u);
  const size_t n = 2 * kMiB + 3;
  std::vector<unsigned char> src = random_bytes(n, 7), back(n, 0);
  kilnrtStream s0 = nullptr, s1 = nullptr;
  kilnrtEvent staged = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&s0), KILN_SUCCESS);
  void* d0 = device_malloc(n);
  ASSERT_EQ(kilnrtSetDevice(1), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtCreateStream(&s1), KILN_SUCCESS);
  void* d1 = device_malloc(n);
  ASSERT_EQ(kilnrtCreateEvent(&staged), KILN_SUCCESS);
  void* host = nullptr;
  ASSERT_EQ(kilnrtMallocHost(&host, n), KILN_SUCCESS);
  // cpu:0 -> pinned host -> cpu:1, ordered by an event across the devices.
  Latch latch;
  ASSERT_EQ(kilnrtLaunchCallback(&Latch::wait_callback, &latch, KILN_CALLBACK_BLOCK, s0), KILN_SUCCESS);
  ASSERT_EQ(kilnrtMemcpyAsync(d0, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE, s0), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpyAsync(host, n, d0, n, KILN_MEMCPY_DEVICE_TO_HOST, s0), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtRecordEvent(staged, s0), KILN_SUCCESS);
  ASSERT_EQ(kilnrtStreamWaitEvent(s1, staged), KILN_SUCCESS);
  ASSERT_EQ(kilnrtMemcpyAsync(d1, n, host, n, KILN_MEMCPY_HOST_TO_DEVICE, s1), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMemcpyAsync(back.data(), n, d1, n, KILN_MEMCPY_DEVICE_TO_HOST, s1), KILN_SUCCESS) << last_error();
  latch.release();
  ASSERT_EQ(kilnrtSynchronizeStream(s1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(back, src);

  // Device memory stays on its device.
  EXPECT_EQ(kilnrtMemcpy(d1, n, d0, n, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("cpu:0"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("cpu:1"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpy(d1, n, d0, n, KILN_MEMCPY_DEFAULT), KILN_ERROR_INVALID_MEMORY);
  // A pointer of device 1 on a stream of device 0, and the reverse.
  EXPECT_EQ(kilnrtMemcpyAsync(d1, n, src.data(), n, KILN_MEMCPY_HOST_TO_DEVICE, s0), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("cpu:1"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpyAsync(back.data(), n, d0, n, KILN_MEMCPY_DEVICE_TO_HOST, s1), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemsetAsync(d1, n, 0, n, s0), KILN_ERROR_INVALID_MEMORY);
  // Allocations count on their own device.
  EXPECT_GT(mem_stats(0).inUse, 0u);
  EXPECT_GT(mem_stats(1).inUse, 0u);
  ASSERT_EQ(kilnrtSynchronizeStream(s0), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtFree(d0), KILN_SUCCESS) << last_error();  // any thread and device may free
  EXPECT_EQ(kilnrtFree(d1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(mem_stats(0).inUse, 0u);
  EXPECT_EQ(mem_stats(1).inUse, 0u);
  kilnrtFreeHost(host);
  kilnrtDestroyEvent(staged);
  kilnrtDestroyStream(s1);
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS);
  kilnrtDestroyStream(s0);
}

// ---- Misuse ---------------------------------------------------------------------------

TEST_F(MemoryTest, WrongDomainsAreErrors) {
  const size_t n = 1024;
  std::vector<unsigned char> host(n, 1), host2(n, 2);
  void* dev = device_malloc(n);
  void* dev2 = device_malloc(n);
  // A host pointer where device memory belongs.
  EXPECT_EQ(kilnrtMemcpy(host.data(), n, host2.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("dst"), std::string::npos) << last_error();
  EXPECT_NE(last_error().find("host memory"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpy(host.data(), n, host2.data(), n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemcpy(dev, n, host.data(), n, KILN_MEMCPY_DEVICE_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  // A device pointer where host memory belongs.
  EXPECT_EQ(kilnrtMemcpy(dev, n, dev2, n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("src"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpy(host.data(), n, dev, n, KILN_MEMCPY_HOST_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("device memory of cpu:0"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpy(dev, n, host.data(), n, KILN_MEMCPY_HOST_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemcpy(dev, n, dev2, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  // Nothing was written by the failed calls.
  EXPECT_EQ(host, std::vector<unsigned char>(n, 1));
  kilnrtFree(dev);
  kilnrtFree(dev2);
}

TEST_F(MemoryTest, BadSizesAndNullsAreErrors) {
  const size_t n = 1000;
  std::vector<unsigned char> host(2 * n, 0);
  void* dev = device_malloc(n);
  char* d = static_cast<char*>(dev);
  EXPECT_EQ(kilnrtMemcpy(dev, n - 1, host.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_NE(last_error().find("destMax"), std::string::npos) << last_error();
  // Ranges running past the allocation (its size is what was asked for, not the class).
  EXPECT_EQ(kilnrtMemcpy(dev, 2 * n, host.data(), n + 1, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("runs past the end"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemcpy(d + 500, 2 * n, host.data(), 501, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemcpy(host.data(), 2 * n, d + 1, n, KILN_MEMCPY_DEVICE_TO_HOST), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemcpy(d + 999, 1, host.data(), 1, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS) << last_error();
  // Null pointers and bad enums.
  EXPECT_EQ(kilnrtMemcpy(nullptr, n, host.data(), n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMemcpy(dev, n, nullptr, n, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMemcpyAsync(dev, n, nullptr, n, KILN_MEMCPY_HOST_TO_DEVICE, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMemcpy(dev, n, host.data(), n, static_cast<kilnrtMemcpyKind>(9)), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMalloc(nullptr, n, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_INVALID_PARAM);
  void* p = nullptr;
  EXPECT_EQ(kilnrtMalloc(&p, 0, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMalloc(&p, n, static_cast<kilnrtMemMallocPolicy>(7)), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtMalloc(&p, SIZE_MAX, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_BAD_ALLOC);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(kilnrtFree(nullptr), KILN_ERROR_INVALID_PARAM);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(kilnrtGetMemInfo(KILN_DDR_MEM, nullptr, &total), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetMemInfo(static_cast<kilnrtMemAttr>(42), &free_bytes, &total), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnrtGetMemStats(0, nullptr), KILN_ERROR_INVALID_PARAM);
  kilnrtMemStats stats;
  EXPECT_EQ(kilnrtGetMemStats(1, &stats), KILN_ERROR_INVALID_DEVICE);
  EXPECT_EQ(kilnrtGetMemStats(-1, &stats), KILN_ERROR_INVALID_DEVICE);
  EXPECT_EQ(kilnrtEmptyCache(5), KILN_ERROR_INVALID_DEVICE);
  kilnrtFree(dev);
}

TEST_F(MemoryTest, BadFreesAreErrors) {
  std::vector<unsigned char> host(256);
  void* dev = device_malloc(256);
  EXPECT_EQ(kilnrtFree(host.data()), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("not device memory"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtFree(static_cast<char*>(dev) + 64), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("64 bytes into"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtFree(dev), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtFree(dev), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("already freed"), std::string::npos) << last_error();
  // A freed pointer is no longer device memory.
  EXPECT_EQ(kilnrtMemcpy(dev, 256, host.data(), 256, KILN_MEMCPY_HOST_TO_DEVICE), KILN_ERROR_INVALID_MEMORY);
  EXPECT_NE(last_error().find("freed"), std::string::npos) << last_error();
  EXPECT_EQ(kilnrtMemset(dev, 256, 0, 256), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtMemcpyAsync(host.data(), 256, dev, 256, KILN_MEMCPY_DEVICE_TO_HOST, nullptr),
            KILN_ERROR_INVALID_MEMORY);
}

TEST_F(MemoryTest, InvalidStreamHandleIsAnError) {
  void* dev = device_malloc(64);
  int not_a_stream = 0;
  std::vector<unsigned char> host(64);
  EXPECT_NE(kilnrtMemcpyAsync(dev, 64, host.data(), 64, KILN_MEMCPY_HOST_TO_DEVICE, &not_a_stream), KILN_SUCCESS);
  EXPECT_NE(kilnrtMemsetAsync(dev, 64, 0, 64, &not_a_stream), KILN_SUCCESS);
  kilnrtFree(dev);
}

TEST_F(MemoryTest, NoContextOnAThread) {
  kilnError malloc_code = KILN_SUCCESS, info_code = KILN_SUCCESS;
  std::thread t([&] {
    void* p = nullptr;
    malloc_code = kilnrtMalloc(&p, 64, KILN_MEM_MALLOC_HUGE_FIRST);
    size_t free_bytes = 0, total = 0;
    info_code = kilnrtGetMemInfo(KILN_DDR_MEM, &free_bytes, &total);
  });
  t.join();
  EXPECT_EQ(malloc_code, KILN_ERROR_RT_CONTEXT_NULL);
  EXPECT_EQ(info_code, KILN_ERROR_RT_CONTEXT_NULL);
}

TEST(MemoryUninitializedTest, EveryCallNeedsKilnInit) {
  void* p = nullptr;
  char buf[16];
  size_t a = 0, b = 0;
  kilnrtMemStats stats;
  EXPECT_EQ(kilnrtMalloc(&p, 16, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtFree(buf), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtMallocHost(&p, 16), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtFreeHost(buf), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtMemcpy(buf, 16, buf + 8, 8, KILN_MEMCPY_HOST_TO_HOST), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtMemcpyAsync(buf, 16, buf + 8, 8, KILN_MEMCPY_HOST_TO_HOST, nullptr), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtMemset(buf, 16, 0, 16), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtMemsetAsync(buf, 16, 0, 16, nullptr), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtGetMemInfo(KILN_DDR_MEM, &a, &b), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtGetMemStats(0, &stats), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(kilnrtEmptyCache(0), KILN_ERROR_UNINITIALIZE);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("kilnInit"), std::string::npos) << kilnGetRecentErrMsg();
}

TEST(MemoryLifetimeTest, FinalizeReleasesAllocations) {
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  void* dev = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(kilnrtMalloc(&dev, 4096, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMallocHost(&pinned, 4096), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  // The old pointers belong to no one now.
  EXPECT_EQ(kilnrtFree(dev), KILN_ERROR_INVALID_MEMORY);
  EXPECT_EQ(kilnrtFreeHost(pinned), KILN_ERROR_INVALID_MEMORY);
  kilnrtMemStats stats = mem_stats(0);
  EXPECT_EQ(stats.inUse, 0u);
  EXPECT_EQ(stats.allocCount, 0u);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
}

// ---- Caching allocator ----------------------------------------------------------------

TEST_F(MemoryTest, FreedBlockIsReusedForItsSizeClass) {
  void* p = device_malloc(4000);  // class 4096
  ASSERT_EQ(kilnrtFree(p), KILN_SUCCESS);
  kilnrtMemStats before = mem_stats(0);
  void* q = device_malloc(3700);  // same class
  EXPECT_EQ(q, p);
  kilnrtMemStats after = mem_stats(0);
  EXPECT_EQ(after.cacheHits, before.cacheHits + 1);
  EXPECT_EQ(after.allocCount, before.allocCount + 1);
  // Another class does not take the cached block.
  ASSERT_EQ(kilnrtFree(q), KILN_SUCCESS);
  void* r = device_malloc(8000);
  EXPECT_NE(r, p);
  EXPECT_EQ(mem_stats(0).cacheHits, after.cacheHits);
  kilnrtFree(r);
}

TEST_F(MemoryTest, FreedBlockWaitsForBusyStreams) {
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS) << last_error();
  void* p = device_malloc(100000);
  Latch latch;
  ASSERT_EQ(kilnrtLaunchCallback(&Latch::wait_callback, &latch, KILN_CALLBACK_BLOCK, stream), KILN_SUCCESS)
      << last_error();
  // The stream could still be about to use p when it is freed.
  std::vector<unsigned char> host(100000, 9);
  ASSERT_EQ(kilnrtMemcpyAsync(host.data(), host.size(), p, host.size(), KILN_MEMCPY_DEVICE_TO_HOST, stream),
            KILN_SUCCESS);
  ASSERT_EQ(kilnrtFree(p), KILN_SUCCESS) << last_error();
  kilnrtMemStats before = mem_stats(0);
  void* q = device_malloc(100000);
  EXPECT_NE(q, p);
  EXPECT_EQ(mem_stats(0).cacheHits, before.cacheHits);
  // empty_cache must not release the block either.
  ASSERT_EQ(kilnrtEmptyCache(0), KILN_SUCCESS);
  EXPECT_GT(mem_stats(0).cached, 0u);
  latch.release();
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  void* r = device_malloc(100000);
  EXPECT_EQ(r, p);
  EXPECT_EQ(mem_stats(0).cacheHits, before.cacheHits + 1);
  kilnrtFree(q);
  kilnrtFree(r);
  kilnrtDestroyStream(stream);
}

TEST_F(MemoryTest, StatsFollowAllocations) {
  kilnrtMemStats s0 = mem_stats(0);
  EXPECT_EQ(s0.inUse, 0u);
  EXPECT_EQ(s0.cached, 0u);
  EXPECT_EQ(s0.reserved, 0u);
  EXPECT_EQ(s0.fragmentation, 0.0);
  // Classes: multiples of 512 B up to 1 MiB, of 2 MiB above.
  void* small = device_malloc(1000);      // 1024
  void* large = device_malloc(3 * kMiB);  // 4 MiB
  kilnrtMemStats s1 = mem_stats(0);
  EXPECT_EQ(s1.inUse, 1024 + 4 * kMiB);
  EXPECT_EQ(s1.reserved, 1024 + 4 * kMiB);
  EXPECT_EQ(s1.peakInUse, 1024 + 4 * kMiB);
  EXPECT_EQ(s1.allocCount, 2u);
  EXPECT_EQ(s1.cacheHits, 0u);
  ASSERT_EQ(kilnrtFree(large), KILN_SUCCESS);
  kilnrtMemStats s2 = mem_stats(0);
  EXPECT_EQ(s2.inUse, 1024u);
  EXPECT_EQ(s2.cached, 4 * kMiB);
  EXPECT_EQ(s2.peakInUse, 1024 + 4 * kMiB);
  EXPECT_EQ(s2.reserved, 1024 + 4 * kMiB);
  EXPECT_EQ(s2.fragmentation, 0.0);  // one cached block
  ASSERT_EQ(kilnrtFree(small), KILN_SUCCESS);
  kilnrtMemStats s3 = mem_stats(0);
  EXPECT_EQ(s3.inUse, 0u);
  EXPECT_EQ(s3.cached, 1024 + 4 * kMiB);
  EXPECT_DOUBLE_EQ(s3.fragmentation, 1.0 - 4.0 * kMiB / (4.0 * kMiB + 1024));
  ASSERT_EQ(kilnrtEmptyCache(0), KILN_SUCCESS);
  kilnrtMemStats s4 = mem_stats(0);
  EXPECT_EQ(s4.cached, 0u);
  EXPECT_EQ(s4.reserved, 0u);
  EXPECT_EQ(s4.fragmentation, 0.0);
  EXPECT_EQ(s4.peakInUse, 1024 + 4 * kMiB);
}

TEST_F(MemoryTest, MemInfoMatchesStats) {
  size_t free0 = 0, total0 = 0;
  ASSERT_EQ(kilnrtGetMemInfo(KILN_HBM_MEM, &free0, &total0), KILN_SUCCESS) << last_error();
  EXPECT_GT(total0, 0u);
  EXPECT_EQ(free0 + mem_stats(0).reserved, total0);
  void* p = device_malloc(5 * kMiB);  // 6 MiB class
  size_t free1 = 0, total1 = 0;
  ASSERT_EQ(kilnrtGetMemInfo(KILN_DDR_MEM, &free1, &total1), KILN_SUCCESS) << last_error();
  EXPECT_EQ(total1, total0);
  EXPECT_EQ(free1, free0 - 6 * kMiB);
  EXPECT_EQ(free1 + mem_stats(0).reserved, total1);
  kilnrtFree(p);
}

TEST(MemoryLimitTest, OverTheLimitIsBadAlloc) {
  std::string config =
      write_config("kiln_memory_limit.json", R"({"devices": {"kind": "cpu", "count": 1, "memory_mb": 16}})");
  ASSERT_EQ(kilnInit(config.c_str()), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(kilnrtGetMemInfo(KILN_DDR_MEM, &free_bytes, &total), KILN_SUCCESS) << last_error();
  EXPECT_EQ(total, 16 * kMiB);
  EXPECT_EQ(free_bytes, 16 * kMiB);
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  ASSERT_EQ(kilnrtMalloc(&a, 8 * kMiB, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMalloc(&b, 8 * kMiB, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
  EXPECT_EQ(kilnrtMalloc(&c, 1000, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_BAD_ALLOC);
  EXPECT_EQ(c, nullptr);
  std::string message = last_error();
  EXPECT_NE(message.find("1000 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("16777216 bytes"), std::string::npos) << message;
  EXPECT_EQ(kilnrtMalloc(&c, 17 * kMiB, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_BAD_ALLOC);
  // A free makes room: the cached 8 MiB block is released for a 4 MiB request.
  ASSERT_EQ(kilnrtFree(a), KILN_SUCCESS) << last_error();
  ASSERT_EQ(kilnrtMalloc(&c, 4 * kMiB, KILN_MEM_MALLOC_HUGE_ONLY), KILN_SUCCESS) << last_error();
  kilnrtMemStats stats{};
  ASSERT_EQ(kilnrtGetMemStats(0, &stats), KILN_SUCCESS);
  EXPECT_EQ(stats.inUse, 12 * kMiB);
  EXPECT_EQ(stats.cached, 0u);
  EXPECT_EQ(stats.reserved, 12 * kMiB);
  ASSERT_EQ(kilnrtGetMemInfo(KILN_DDR_MEM, &free_bytes, &total), KILN_SUCCESS) << last_error();
  EXPECT_EQ(free_bytes, 4 * kMiB);
  // The new block is usable end to end.
  std::vector<unsigned char> src = random_bytes(4 * kMiB, 8), back(4 * kMiB);
  ASSERT_EQ(kilnrtMemcpy(c, src.size(), src.data(), src.size(), KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
  ASSERT_EQ(kilnrtMemcpy(back.data(), back.size(), c, src.size(), KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  EXPECT_EQ(back, src);
  EXPECT_EQ(kilnrtFree(b), KILN_SUCCESS);
  EXPECT_EQ(kilnrtFree(c), KILN_SUCCESS);
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  std::remove(config.c_str());
}

TEST_F(MemoryTest, ConcurrentMallocFreeFromThreads) {
  constexpr int kThreads = 4;
  constexpr int kIters = 500;
  kilnrtContext context = nullptr;
  ASSERT_EQ(kilnrtGetCurrentContext(&context), KILN_SUCCESS) << last_error();
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (kilnrtSetCurrentContext(context) != KILN_SUCCESS) {
        failures++;
        return;
      }
      std::mt19937 rng(t);
      for (int i = 0; i < kIters; ++i) {
        size_t n = 1 + rng() % 20000;
        void* p = nullptr;
        if (kilnrtMalloc(&p, n, KILN_MEM_MALLOC_HUGE_FIRST) != KILN_SUCCESS) {
          failures++;
          continue;
        }
        unsigned char tag = static_cast<unsigned char>(t * 31 + i);
        std::vector<unsigned char> back(n);
        if (kilnrtMemset(p, n, tag, n) != KILN_SUCCESS ||
            kilnrtMemcpy(back.data(), n, p, n, KILN_MEMCPY_DEVICE_TO_HOST) != KILN_SUCCESS ||
            back != std::vector<unsigned char>(n, tag) || kilnrtFree(p) != KILN_SUCCESS) {
          failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  kilnrtMemStats stats = mem_stats(0);
  EXPECT_EQ(stats.inUse, 0u);
  EXPECT_EQ(stats.allocCount, static_cast<uint64_t>(kThreads * kIters));
  EXPECT_GT(stats.cacheHits, 0u);
}

}  // namespace
