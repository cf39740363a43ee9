// Cooperative cancellation of model executions (runtime/execution_cancel.h): a caller's flag,
// set before or during an execution submitted under an ExecutionCancelScope, stops it at a
// node boundary with a message naming the node; cleared, the same model runs again, right
// (checked against products computed here), synchronously and on a stream.
#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include <atomic>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "runtime/execution_cancel.h"
#include "../process_temp_dir.h"

namespace {

std::string last_error() { return kilnGetRecentErrMsg(); }

// y = x W W W: three MatMuls no pass fuses or folds (W is an input).
const char* kChain = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  chain (float[2, 2] x, float[2, 2] w) => (float[2, 2] y) {
    h1 = MatMul(x, w)
    h2 = MatMul(h1, w)
    y = MatMul(h2, w)
  }
)";

std::string compile_chain() {
  static const kiln::test_support::ProcessTempDir dir("kiln_execution_cancel_test");
  onnx::ModelProto m;
  auto parsed = onnx::OnnxParser::Parse(m, kChain);
  EXPECT_TRUE(parsed.IsOK()) << parsed.ErrorMessage();
  std::string bytes = m.SerializeAsString();
  auto compiled = kiln::compiler::compile_onnx_bytes(bytes.data(), bytes.size(), "chain", {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  std::string path = dir.path() + "/chain.kiln";
  if (compiled.ok()) {
    EXPECT_TRUE(kiln::model::write_model(*compiled->graph, compiled->info, path).ok());
  }
  return path;
}

// 2x2 row-major product.
std::vector<float> matmul(const std::vector<float>& a, const std::vector<float>& b) {
  return {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3], a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
}

class ExecutionCancelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnmdlLoadFromFile(compile_chain().c_str(), &id_), KILN_SUCCESS) << last_error();
    in_ = kilnmdlCreateDataset();
    out_ = kilnmdlCreateDataset();
    for (void** p : {&x_, &w_, &y_}) ASSERT_EQ(kilnrtMalloc(p, kBytes, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS);
    for (void* p : {x_, w_}) ASSERT_EQ(kilnmdlAddDatasetBuffer(in_, kilnCreateDataBuffer(p, kBytes)), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(out_, kilnCreateDataBuffer(y_, kBytes)), KILN_SUCCESS);
    ASSERT_EQ(kilnrtMemcpy(x_, kBytes, x_host_.data(), kBytes, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
    ASSERT_EQ(kilnrtMemcpy(w_, kBytes, w_host_.data(), kBytes, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
  }
  void TearDown() override {
    for (kilnmdlDataset* d : {in_, out_}) {
      for (size_t i = 0; i < kilnmdlGetDatasetNumBuffers(d); ++i) kilnDestroyDataBuffer(kilnmdlGetDatasetBuffer(d, i));
      kilnmdlDestroyDataset(d);
    }
    for (void* p : {x_, w_, y_}) kilnrtFree(p);
    kilnmdlUnload(id_);
    EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error();
  }

  // y as computed here, x W W W.
  std::vector<float> expected() const { return matmul(matmul(matmul(x_host_, w_host_), w_host_), w_host_); }
  std::vector<float> output() const {
    std::vector<float> y(4);
    EXPECT_EQ(kilnrtMemcpy(y.data(), kBytes, y_, kBytes, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
    return y;
  }
  void expect_output_right() const {
    std::vector<float> y = output(), want = expected();
    for (size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y[i], want[i]) << i;
  }

  static constexpr size_t kBytes = 4 * sizeof(float);
  const std::vector<float> x_host_{1, 2, 3, 4};
  const std::vector<float> w_host_{0.5f, -1, 2, 0.25f};
  uint32_t id_ = 0;
  kilnmdlDataset* in_ = nullptr;
  kilnmdlDataset* out_ = nullptr;
  void* x_ = nullptr;
  void* w_ = nullptr;
  void* y_ = nullptr;
};

TEST_F(ExecutionCancelTest, ASetFlagStopsASynchronousExecutionBeforeItsFirstNode) {
  std::atomic<bool> cancel{true};
  {
    kiln::rt::ExecutionCancelScope scope(&cancel);
    EXPECT_NE(kilnmdlExecute(id_, in_, out_), KILN_SUCCESS);
    EXPECT_NE(last_error().find("execution cancelled by its caller before node"), std::string::npos) << last_error();
    EXPECT_NE(last_error().find("(step 1 of 3)"), std::string::npos) << last_error();
    cancel = false;
    ASSERT_EQ(kilnmdlExecute(id_, in_, out_), KILN_SUCCESS) << last_error();
    expect_output_right();
  }
  // Outside the scope the flag is not watched.
  cancel = true;
  ASSERT_EQ(kilnmdlExecute(id_, in_, out_), KILN_SUCCESS) << last_error();
  expect_output_right();
}

TEST_F(ExecutionCancelTest, AStreamCarriesTheSubmittersFlagAndRecoversAtSynchronize) {
  kilnrtStream stream = nullptr;
  ASSERT_EQ(kilnrtCreateStream(&stream), KILN_SUCCESS) << last_error();
  std::atomic<bool> cancel{true};
  {
    kiln::rt::ExecutionCancelScope scope(&cancel);
    ASSERT_EQ(kilnmdlExecuteAsync(id_, in_, out_, stream), KILN_SUCCESS) << last_error();
  }
  // The scope is closed: the queued task still watches the flag it was submitted with.
  EXPECT_NE(kilnrtSynchronizeStream(stream), KILN_SUCCESS);
  EXPECT_NE(last_error().find("execution cancelled by its caller"), std::string::npos) << last_error();
  // Synchronize cleared the stream's error: the next execution runs, right.
  cancel = false;
  {
    kiln::rt::ExecutionCancelScope scope(&cancel);
    ASSERT_EQ(kilnmdlExecuteAsync(id_, in_, out_, stream), KILN_SUCCESS) << last_error();
  }
  ASSERT_EQ(kilnrtSynchronizeStream(stream), KILN_SUCCESS) << last_error();
  expect_output_right();
  EXPECT_EQ(kilnrtDestroyStream(stream), KILN_SUCCESS);
}

}  // namespace
