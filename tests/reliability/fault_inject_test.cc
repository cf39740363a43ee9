// KILN_FAULT_INJECT (src/core/fault_inject.h): an injected allocation, kernel or copy failure
// surfaces as the API's normal error (a code and a message naming the injected fault, or a
// failed stream task), leaves no memory behind, and the next execution is correct: equal to
// the output of the same model before the injection and to a plain C++ reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/fault_inject.h"
#include "kiln/kiln.hpp"
#include "runtime/model_runtime.h"
#include "text_model.h"

namespace {

using kiln::fault::Site;

constexpr int64_t kRows = 4;
constexpr int64_t kCols = 16;

// y = x @ softmax(x^T x, axis 1): a transpose, two MatMuls and a Softmax, so that the N-th
// kernel run falls in the middle of an execution; the batch dim is open.
const char* kChain = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  chain (float[N, 16] x) => (float[N, 16] y) {
    t = Transpose<perm = [1, 0]>(x)
    g = MatMul(t, x)
    s = Softmax<axis = 1>(g)
    y = MatMul(x, s)
  }
)";

// The same in plain C++ (double accumulation): the independent reference.
std::vector<float> reference(const std::vector<float>& x, int64_t rows) {
  std::vector<double> s(kCols * kCols);
  for (int64_t i = 0; i < kCols; ++i) {
    double max = -INFINITY;
    for (int64_t j = 0; j < kCols; ++j) {
      double g = 0;
      for (int64_t r = 0; r < rows; ++r) g += double(x[r * kCols + i]) * x[r * kCols + j];
      s[i * kCols + j] = g;
      max = std::max(max, g);
    }
    double sum = 0;
    for (int64_t j = 0; j < kCols; ++j) sum += s[i * kCols + j] = std::exp(s[i * kCols + j] - max);
    for (int64_t j = 0; j < kCols; ++j) s[i * kCols + j] /= sum;
  }
  std::vector<float> y(rows * kCols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < kCols; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kCols; ++k) acc += double(x[r * kCols + k]) * s[k * kCols + j];
      y[r * kCols + j] = static_cast<float>(acc);
    }
  return y;
}

::testing::AssertionResult close_to(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-4f + 1e-4f * std::fabs(want[i])))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

std::string compile_chain() {
  static const std::string path = kiln::test_util::compile_text_model(kChain, "fault_chain");
  return path;
}

// One model with its device buffers for `rows` rows of input.
struct ChainRun {
  explicit ChainRun(int64_t rows = kRows)
      : model(kiln::Model::load(compile_chain())),
        rows(rows),
        in(rows * kCols * sizeof(float)),
        out(rows * kCols * sizeof(float)) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.f, 0.5f);
    x.resize(rows * kCols);
    for (float& v : x) v = normal(rng);
    in.copy_from_host(x);
    inputs.add(in);
    inputs.set_input_shape(0, KILN_FLOAT, {rows, kCols});
    outputs.add(out);
  }
  std::vector<float> execute() {
    out.fill(0);
    model.execute(inputs, outputs);
    return out.to_host<float>();
  }
  std::vector<float> execute_async(const kiln::Stream& stream) {
    out.fill(0);
    model.execute_async(inputs, outputs, stream);
    stream.synchronize();
    return out.to_host<float>();
  }
  kiln::rt::Model::Stats stats() const { return kiln::rt::ModelTable::get().find(model.id())->stats(); }

  kiln::Model model;
  int64_t rows;
  std::vector<float> x;
  kiln::DeviceBuffer in, out;
  kiln::Dataset inputs, outputs;
};

kilnrtMemStats mem_stats() {
  kilnrtMemStats s{};
  EXPECT_EQ(kilnrtGetMemStats(0, &s), KILN_SUCCESS);
  return s;
}

// Expects `call` to throw a kiln::Error with `code` whose message names the injected fault.
template <typename F>
void expect_injected(F&& call, kilnError code, const std::string& what) {
  try {
    call();
    ADD_FAILURE() << "no error; expected an injected " << what;
  } catch (const kiln::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("injected fault (KILN_FAULT_INJECT="), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

class FaultInjectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(kiln::fault::configure("").ok());
    runtime_ = std::make_unique<kiln::Runtime>();
    device_ = std::make_unique<kiln::Device>(0);
  }
  void TearDown() override {
    EXPECT_TRUE(kiln::fault::configure("").ok());
    device_.reset();
    runtime_.reset();
  }
  static void inject(const std::string& spec) {
    kiln::Status s = kiln::fault::configure(spec);
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::unique_ptr<kiln::Runtime> runtime_;
  std::unique_ptr<kiln::Device> device_;
};

TEST(FaultSpecTest, BadSpecsAreClearErrors) {
  for (const char* spec : {"kernel:0", "disk:3", "kernel:every:0", "copy:p:0", "copy:p:1.5", "alloc:x",
                           "kernel:3,kernel:4", "seed:abc", "kernel", "kernel:every:2:3", "alloc:-1"}) {
    kiln::Status s = kiln::fault::check_spec(spec);
    EXPECT_EQ(s.code(), kiln::StatusCode::kInvalidArgument) << spec;
    EXPECT_NE(s.message().find(std::string("KILN_FAULT_INJECT='") + spec + "'"), std::string::npos)
        << s.to_string();
  }
  for (const char* spec : {"", "kernel:3", "alloc:every:10,copy:p:0.5,seed:9", "copy:p:1"})
    EXPECT_TRUE(kiln::fault::check_spec(spec).ok()) << spec;
  // A bad spec leaves the one in force.
  ASSERT_TRUE(kiln::fault::configure("kernel:5").ok());
  EXPECT_FALSE(kiln::fault::configure("kernel:0").ok());
  EXPECT_EQ(kiln::fault::current_spec(), "kernel:5");
  ASSERT_TRUE(kiln::fault::configure("").ok());
  EXPECT_EQ(kiln::fault::current_spec(), "");
}

TEST(FaultSpecTest, RulesFailTheEventsTheyName) {
  auto failures = [](const std::string& spec, int events) {
    EXPECT_TRUE(kiln::fault::configure(spec).ok());
    std::vector<int> failed;
    for (int i = 1; i <= events; ++i)
      if (uint64_t e = kiln::fault::should_fail(Site::kKernel)) {
        EXPECT_EQ(e, static_cast<uint64_t>(i));
        failed.push_back(i);
      }
    EXPECT_EQ(kiln::fault::injected(Site::kKernel), failed.size());
    EXPECT_EQ(kiln::fault::should_fail(Site::kAlloc), 0u);  // other sites unarmed
    return failed;
  };
  EXPECT_EQ(failures("kernel:3", 10), (std::vector<int>{3}));
  EXPECT_EQ(failures("kernel:every:4", 10), (std::vector<int>{4, 8}));
  EXPECT_EQ(failures("kernel:p:1", 3), (std::vector<int>{1, 2, 3}));
  std::vector<int> a = failures("kernel:p:0.1,seed:5", 10000);
  EXPECT_EQ(failures("kernel:p:0.1,seed:5", 10000), a);  // the seed repeats the draws
  EXPECT_NE(failures("kernel:p:0.1,seed:6", 10000), a);
  EXPECT_GT(a.size(), 850u);
  EXPECT_LT(a.size(), 1150u);
  ASSERT_TRUE(kiln::fault::configure("").ok());
  EXPECT_EQ(kiln::fault::should_fail(Site::kKernel), 0u);
}

TEST_F(FaultInjectTest, KernelFaultFailsOneExecutionAndTheNextIsCorrect) {
  ChainRun run;
  const std::vector<float> before = run.execute();
  ASSERT_TRUE(close_to(before, reference(run.x, kRows)));
  const kiln::rt::Model::Stats warm = run.stats();
  const kilnrtMemStats mem = mem_stats();

  inject("kernel:2");  // the second node of the next execution
  expect_injected([&] { run.execute(); }, KILN_ERROR_FAILURE, "kernel run 2 failed: node ");
  EXPECT_EQ(kiln::fault::injected(Site::kKernel), 1u);
  // Recovered: the same execution context runs again, bit for bit the output of before.
  EXPECT_EQ(run.execute(), before);
  const kiln::rt::Model::Stats after = run.stats();
  EXPECT_EQ(after.arenas.in_use, warm.arenas.in_use);
  EXPECT_EQ(after.contexts, warm.contexts);
  EXPECT_EQ(mem_stats().inUse, mem.inUse);

  // Every fifth kernel run fails (the model has fewer kernels than that): each execution
  // fails or is right. The arena keeps what an execution cut short left it (blocks outside the
  // warm execution's plan), but a second round holds no more than the first: nothing leaks.
  auto round = [&] {
    inject("kernel:every:5");
    int failed = 0, right = 0;
    for (int i = 0; i < 30; ++i) {
      try {
        EXPECT_EQ(run.execute(), before) << "execution " << i;
        ++right;
      } catch (const kiln::Error& e) {
        EXPECT_NE(std::string(e.what()).find("injected fault"), std::string::npos) << e.what();
        ++failed;
      }
    }
    EXPECT_GT(failed, 0);
    EXPECT_GT(right, 0);
    EXPECT_EQ(static_cast<uint64_t>(failed), kiln::fault::injected(Site::kKernel));
    inject("");
    EXPECT_EQ(run.execute(), before);
    return run.stats();
  };
  const kiln::rt::Model::Stats first = round();
  const kiln::rt::Model::Stats second = round();
  EXPECT_EQ(second.arenas.held, first.arenas.held);
  EXPECT_EQ(second.arenas.in_use, first.arenas.in_use);
  EXPECT_EQ(second.parked_bytes, first.parked_bytes);
  EXPECT_EQ(second.contexts, warm.contexts);
  EXPECT_EQ(mem_stats().inUse, mem.inUse);
  std::printf("arena bytes held: warm %zu, after one round of faults %zu, after two %zu\n", warm.arenas.held,
              first.arenas.held, second.arenas.held);
}

TEST_F(FaultInjectTest, KernelFaultFailsTheStreamTaskAndTheStreamGoesOn) {
  ChainRun run;
  kiln::Stream stream;
  const std::vector<float> before = run.execute_async(stream);
  ASSERT_TRUE(close_to(before, reference(run.x, kRows)));
  inject("kernel:1");
  expect_injected([&] { run.execute_async(stream); }, KILN_ERROR_RT_TASK_FAILED, "kernel run 1 failed");
  EXPECT_EQ(run.execute_async(stream), before);
}

TEST_F(FaultInjectTest, AllocationFaultsAreBadAllocAndLeaveTheAllocatorAsItWas) {
  const kilnrtMemStats mem = mem_stats();
  inject("alloc:1");
  void* p = nullptr;
  EXPECT_EQ(kilnrtMalloc(&p, 4096, KILN_MEM_MALLOC_HUGE_FIRST), KILN_ERROR_BAD_ALLOC);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("injected fault (KILN_FAULT_INJECT=alloc:1): allocation 1"),
            std::string::npos)
      << kilnGetRecentErrMsg();
  EXPECT_EQ(mem_stats().inUse, mem.inUse);
  EXPECT_EQ(mem_stats().reserved, mem.reserved);
  ASSERT_EQ(kilnrtMalloc(&p, 4096, KILN_MEM_MALLOC_HUGE_FIRST), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnrtFree(p), KILN_SUCCESS);

  inject("alloc:1");
  void* host = nullptr;
  EXPECT_EQ(kilnrtMallocHost(&host, 4096), KILN_ERROR_BAD_ALLOC);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("pinned host allocation"), std::string::npos)
      << kilnGetRecentErrMsg();
  ASSERT_EQ(kilnrtMallocHost(&host, 4096), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnrtFreeHost(host), KILN_SUCCESS);
}

TEST_F(FaultInjectTest, ActivationAllocationFaultFailsTheExecutionAndTheNextIsCorrect) {
  // A model freshly loaded: its first execution takes its activations from the arena.
  ChainRun fresh;
  inject("alloc:1");
  expect_injected([&] { fresh.execute(); }, KILN_ERROR_BAD_ALLOC, "activation of the execution");
  EXPECT_EQ(fresh.stats().arenas.in_use, 0u);
  inject("");
  const std::vector<float> y = fresh.execute();
  EXPECT_TRUE(close_to(y, reference(fresh.x, kRows)));
  // And equal to another model's un-injected output.
  ChainRun other;
  EXPECT_EQ(other.execute(), y);
  // A new shape makes new activations: every second allocation fails, executions fail or are right.
  ChainRun wide(3 * kRows);
  inject("alloc:every:2");
  int right = 0;
  for (int i = 0; i < 6; ++i) {
    try {
      EXPECT_TRUE(close_to(wide.execute(), reference(wide.x, 3 * kRows)));
      ++right;
    } catch (const kiln::Error& e) {
      EXPECT_EQ(e.code(), KILN_ERROR_BAD_ALLOC) << e.what();
    }
  }
  EXPECT_GT(kiln::fault::injected(Site::kAlloc), 0u);
  inject("");
  EXPECT_TRUE(close_to(wide.execute(), reference(wide.x, 3 * kRows)));
}

TEST_F(FaultInjectTest, CopyFaultFailsTheCopyTaskAndTheNextCopyWorks) {
  kiln::Stream stream;
  kiln::DeviceBuffer dst(256);
  kiln::HostBuffer src(256);
  std::fill_n(src.as<unsigned char>(), 256, 0x5a);
  dst.fill(0);
  inject("copy:1");
  dst.copy_from_host_async(src.data(), 256, stream);
  expect_injected([&] { stream.synchronize(); }, KILN_ERROR_RT_TASK_FAILED, "copy 1 failed: MemcpyAsync");
  EXPECT_EQ(dst.to_host<unsigned char>(), std::vector<unsigned char>(256, 0)) << "the failed copy wrote";
  dst.copy_from_host_async(src.data(), 256, stream);
  stream.synchronize();
  EXPECT_EQ(dst.to_host<unsigned char>(), std::vector<unsigned char>(256, 0x5a));
  // A synchronous copy returns the error itself.
  inject("copy:1");
  std::vector<unsigned char> back(256, 1);
  EXPECT_EQ(kilnrtMemcpy(back.data(), back.size(), dst.data(), 256, KILN_MEMCPY_DEVICE_TO_HOST), KILN_ERROR_FAILURE);
  EXPECT_NE(std::string(kilnGetRecentErrMsg()).find("injected fault (KILN_FAULT_INJECT=copy:1): copy 1 failed: "
                                                    "kilnrtMemcpy of 256 bytes"),
            std::string::npos)
      << kilnGetRecentErrMsg();
  EXPECT_EQ(back, std::vector<unsigned char>(256, 1));
  EXPECT_EQ(kilnrtMemcpy(back.data(), back.size(), dst.data(), 256, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
  EXPECT_EQ(back, std::vector<unsigned char>(256, 0x5a));
  // A memset task is a copy-engine task too.
  inject("copy:1");
  dst.fill_async(7, stream);
  expect_injected([&] { stream.synchronize(); }, KILN_ERROR_RT_TASK_FAILED, "copy 1 failed");
  EXPECT_EQ(dst.to_host<unsigned char>(), std::vector<unsigned char>(256, 0x5a));
}

}  // namespace
