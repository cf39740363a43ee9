// Resources exhausted in the middle of work (issue 32): the device's memory limit reached by an
// execution's activations, and the host refusing memory (RLIMIT_AS) to an execution. Each
// fails that execution with BAD_ALLOC and a message naming the limit; once the resource is
// back, the same model in the same process runs again and its output is right.
// (File descriptors: tests/comm/exhaustion_test.cc; a full disk: tests/model and the profiler's.)
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "text_model.h"

namespace {

constexpr int64_t kCols = 8;
constexpr size_t kMiB = size_t{1} << 20;

// y = (x + x) * (x * x) + (x - (x + x)), five element-wise nodes at -O0: at the fourth, three
// [N, 8] float activations are alive and a fourth is being made.
std::string compile_model() {
  // -O0: no fusion, activations between the nodes.
  static const std::string path = kiln::test_util::compile_text_model(R"(
      <ir_version: 8, opset_import: ["" : 17]>
      grow (float[N, 8] x) => (float[N, 8] y) {
        a = Add(x, x)
        b = Mul(x, x)
        c = Sub(x, a)
        d = Mul(a, b)
        y = Add(d, c)
      }
    )",
                                                                      "exhaustion_grow", 0);
  return path;
}

// Runs the model on the device buffers `in` and `out` holding `rows` rows.
void execute(const kiln::Model& model, const kiln::DeviceBuffer& in, const kiln::DeviceBuffer& out, int64_t rows) {
  kiln::Dataset inputs, outputs;
  inputs.add(in);
  inputs.set_input_shape(0, KILN_FLOAT, {rows, kCols});
  outputs.add(out);
  model.execute(inputs, outputs);
}

// Executes the model on `rows` rows of random input; returns the first element that differs
// from 2x^3 - x computed here, or -1 when all match. Throws kiln::Error when the
// execution fails.
int64_t execute_and_check(const kiln::Model& model, int64_t rows) {
  const size_t bytes = static_cast<size_t>(rows * kCols) * sizeof(float);
  std::vector<float> x(static_cast<size_t>(rows * kCols));
  std::mt19937 rng(static_cast<unsigned>(rows));
  std::uniform_real_distribution<float> uniform(-2.f, 2.f);
  for (float& v : x) v = uniform(rng);
  kiln::DeviceBuffer in(bytes), out(bytes);
  in.copy_from_host(x);
  execute(model, in, out, rows);
  std::vector<float> y = out.to_host<float>();
  for (size_t i = 0; i < y.size(); ++i) {
    // 2x^3 - x in double; float rounding of the terms bounds the error (the kernels may also
    // contract a multiply and an add into one FMA).
    const double v = x[i], d = 2 * v * v * v, c = -v;
    if (!(std::fabs(y[i] - (d + c)) <= 1e-6 * (std::fabs(d) + std::fabs(c)))) {
      ADD_FAILURE() << "element " << i << " of " << rows << " rows: x " << x[i] << ", got " << y[i] << ", want "
                    << d + c;
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

TEST(ExhaustionTest, DeviceMemoryLimitReachedMidExecutionIsBadAllocAndTheNextFits) {
  const std::string config = ::testing::TempDir() + "kiln_exhaustion_16mb.json";
  std::ofstream(config) << R"({"devices": {"kind": "cpu", "count": 1, "memory_mb": 16}})";
  kiln::Runtime runtime(config);
  kiln::Device device(0);
  kiln::Model model = kiln::Model::load(compile_model());
  // 64K rows: 2 MiB per tensor, 8 MiB of activations at the peak.
  ASSERT_EQ(execute_and_check(model, 64 * 1024), -1);
  // 192K rows: 6 MiB per tensor; input and output take 12 of the device's 16 MiB, and the
  // fourth node needs a fourth 6 MiB activation: 24 MiB > 16 MiB, refused mid-execution.
  const int64_t rows = 192 * 1024;
  const size_t bytes = static_cast<size_t>(rows * kCols) * sizeof(float);
  {
    kiln::DeviceBuffer in(bytes), out(bytes);
    in.fill(0);
    try {
      execute(model, in, out, rows);
      ADD_FAILURE() << "24 MiB of activations ran on a 16 MiB device";
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), KILN_ERROR_BAD_ALLOC) << e.what();
      EXPECT_NE(std::string(e.what()).find("device memory limit of 16777216 bytes is reached"), std::string::npos)
          << e.what();
      std::printf("device memory limit: %s\n", e.what());
    }
  }
  // Recovered: the same model runs shapes that fit, right.
  EXPECT_EQ(execute_and_check(model, 64 * 1024), -1);
  EXPECT_EQ(execute_and_check(model, 96 * 1024), -1);
  std::remove(config.c_str());
}

// Lowers the soft RLIMIT_AS to the address space in use now plus `headroom`, restored on scope exit.
class AddressSpaceLimit {
 public:
  explicit AddressSpaceLimit(size_t headroom) {
    getrlimit(RLIMIT_AS, &saved_);
    size_t vm_kib = 0;
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kib = std::stoul(line.substr(7));
    rlimit low = saved_;
    low.rlim_cur = static_cast<rlim_t>(vm_kib * 1024 + headroom);
    ok_ = vm_kib > 0 && setrlimit(RLIMIT_AS, &low) == 0;
  }
  ~AddressSpaceLimit() { setrlimit(RLIMIT_AS, &saved_); }
  bool ok() const { return ok_; }

 private:
  rlimit saved_{};
  bool ok_ = false;
};

TEST(ExhaustionTest, HostRefusingMemoryMidExecutionIsBadAllocAndTheProcessRecovers) {
  kiln::Runtime runtime;
  kiln::Device device(0);
  kiln::Model model = kiln::Model::load(compile_model());
  ASSERT_EQ(execute_and_check(model, 1024), -1);
  // 1M rows: 32 MiB per tensor. The input and output buffers are made before the limit; the
  // execution's activations then need 32 MiB each and the host has 16 MiB to give.
  const int64_t rows = 1024 * 1024;
  const size_t bytes = static_cast<size_t>(rows * kCols) * sizeof(float);
  {
    kiln::DeviceBuffer in(bytes), out(bytes);
    in.fill(0);
    AddressSpaceLimit limit(16 * kMiB);
    ASSERT_TRUE(limit.ok());
    try {
      execute(model, in, out, rows);
      ADD_FAILURE() << "32 MiB activations ran in 16 MiB of address space";
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), KILN_ERROR_BAD_ALLOC) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
      std::printf("host memory refused: %s\n", e.what());
    }
  }
  // Recovered: with the address space back, the same execution runs and is right.
  EXPECT_EQ(execute_and_check(model, rows), -1);
  EXPECT_EQ(execute_and_check(model, 1024), -1);
}

}  // namespace
