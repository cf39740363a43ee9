// A model with shape buckets through the C API: the caller gives actual shapes with
// kilnmdlSetDatasetTensorDesc and never picks a bucket; an in-between batch runs the next
// bucket up, padded with the declared pad value, outputs sliced back; a batch beyond every
// bucket runs the dynamic graph; with a caller workspace sized by kilnmdlQuerySize too.
// Expected values are computed here in plain arithmetic.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "../process_temp_dir.h"

namespace {

using kiln::DataType;
using kiln::Dim;
using kiln::Shape;
using kiln::Tensor;

constexpr float kPad = 0.5f;
const float kW[4] = {1, -2, 3, 0.25f};

std::string last_error() { return kilnGetRecentErrMsg(); }

kiln::ir::Value* add_value(kiln::ir::Graph& g, const std::string& name, Shape shape) {
  kiln::ir::Value* v = *g.add_value(name);
  v->type().dtype = DataType::kFloat32;
  v->type().shape = std::move(shape);
  return v;
}

// y = x + w (x [batch, 4]) and s = ReduceSum(x) ([1, 1]): s sees the padding, y is sliced.
std::shared_ptr<kiln::ir::Graph> graph(Dim batch) {
  auto g = std::make_shared<kiln::ir::Graph>("main");
  auto* x = add_value(*g, "x", Shape{batch, 4});
  auto* w = add_value(*g, "w", Shape{4});
  w->set_initializer(Tensor::from_vector<float>(std::vector<float>(kW, kW + 4)));
  auto* y = add_value(*g, "y", Shape{batch, 4});
  auto* s = add_value(*g, "s", Shape{1, 1});
  g->inputs() = {x};
  g->add_node("add", "Add", "", 13, {x, w}, {y});
  g->add_node("sum", "ReduceSum", "", 13, {x}, {s});
  g->outputs() = {y, s};
  g->opset_imports()[""] = 13;
  return g;
}

std::string write_bucketed_model() {
  static const kiln::test_support::ProcessTempDir temp("kiln_buckets_api");
  const std::string& dir = temp.path();
  kiln::model::BucketedModel m;
  m.kind = kiln::model::BucketKind::kBatch;
  for (int64_t b : {1, 4}) m.variants.push_back({{{"x", {b, 4}}}, graph(Dim(b))});
  m.pad_values["x"] = kPad;
  m.dynamic_graph = graph(Dim::symbolic("N"));
  kiln::model::ModelInfo info;
  info.kiln_version = "0.1.0";
  std::string path = dir + "/buckets.kiln";
  kiln::Status s = kiln::model::write_model(m, info, path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return path;
}

class BucketsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtSetDevice(0), KILN_SUCCESS) << last_error();
    path_ = write_bucketed_model();
  }
  void TearDown() override { EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << last_error(); }

  // Runs batch n (x[i] = i * 0.25 - 1) and checks y and s against plain arithmetic;
  // `padded_rows` rows of pad value reach s.
  void run_and_check(uint32_t id, int64_t n, int64_t padded_rows) {
    SCOPED_TRACE("batch " + std::to_string(n));
    std::vector<float> x(static_cast<size_t>(n) * 4);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 1.0f;
    const size_t in_bytes = x.size() * 4, y_bytes = 16 * 4 * 4;  // room for batch 16
    void *in = nullptr, *y = nullptr, *s = nullptr;
    ASSERT_EQ(kilnrtMalloc(&in, in_bytes, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMalloc(&y, y_bytes, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMalloc(&s, 4, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
    ASSERT_EQ(kilnrtMemcpy(in, in_bytes, x.data(), in_bytes, KILN_MEMCPY_HOST_TO_DEVICE), KILN_SUCCESS);
    kilnmdlDataset* inputs = kilnmdlCreateDataset();
    kilnmdlDataset* outputs = kilnmdlCreateDataset();
    kilnDataBuffer* bufs[3] = {kilnCreateDataBuffer(in, in_bytes), kilnCreateDataBuffer(y, y_bytes),
                               kilnCreateDataBuffer(s, 4)};
    ASSERT_EQ(kilnmdlAddDatasetBuffer(inputs, bufs[0]), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(outputs, bufs[1]), KILN_SUCCESS);
    ASSERT_EQ(kilnmdlAddDatasetBuffer(outputs, bufs[2]), KILN_SUCCESS);
    int64_t dims[2] = {n, 4};
    kilnTensorDesc* d = kilnCreateTensorDesc(KILN_FLOAT, 2, dims, KILN_FORMAT_ND);
    ASSERT_EQ(kilnmdlSetDatasetTensorDesc(inputs, d, 0), KILN_SUCCESS) << last_error();
    kilnDestroyTensorDesc(d);
    ASSERT_EQ(kilnmdlExecute(id, inputs, outputs), KILN_SUCCESS) << last_error();

    const kilnTensorDesc* yd = kilnmdlGetDatasetTensorDesc(outputs, 0);
    ASSERT_NE(yd, nullptr);
    ASSERT_EQ(kilnGetTensorDescNumDims(yd), 2u);
    int64_t y0 = 0, y1 = 0;
    ASSERT_EQ(kilnGetTensorDescDimV2(yd, 0, &y0), KILN_SUCCESS);
    ASSERT_EQ(kilnGetTensorDescDimV2(yd, 1, &y1), KILN_SUCCESS);
    EXPECT_EQ(y0, n);  // sliced back to the true batch
    EXPECT_EQ(y1, 4);
    std::vector<float> yh(x.size()), sh(1);
    ASSERT_EQ(kilnrtMemcpy(yh.data(), in_bytes, y, in_bytes, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
    ASSERT_EQ(kilnrtMemcpy(sh.data(), 4, s, 4, KILN_MEMCPY_DEVICE_TO_HOST), KILN_SUCCESS);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(yh[i], x[i] + kW[i % 4]) << i;
    double sum = std::accumulate(x.begin(), x.end(), 0.0) + static_cast<double>(padded_rows) * 4 * kPad;
    EXPECT_NEAR(sh[0], sum, 1e-5 * (1 + std::abs(sum)));

    kilnmdlDestroyDataset(inputs);
    kilnmdlDestroyDataset(outputs);
    for (kilnDataBuffer* b : bufs) kilnDestroyDataBuffer(b);
    kilnrtFree(in);
    kilnrtFree(y);
    kilnrtFree(s);
  }

  std::string path_;
};

TEST_F(BucketsApiTest, ThePickedBucketIsPaddedAndItsOutputsSliced) {
  uint32_t id = 0;
  ASSERT_EQ(kilnmdlLoadFromFile(path_.c_str(), &id), KILN_SUCCESS) << last_error();
  // The batch is open to the caller: the buckets disagree on it.
  kilnmdlDesc* desc = kilnmdlCreateDesc();
  ASSERT_EQ(kilnmdlGetDesc(desc, id), KILN_SUCCESS) << last_error();
  kilnmdlIODims dims{};
  ASSERT_EQ(kilnmdlGetInputDims(desc, 0, &dims), KILN_SUCCESS);
  ASSERT_EQ(dims.dimCount, 2u);
  EXPECT_EQ(dims.dims[0], -1);
  EXPECT_EQ(dims.dims[1], 4);
  ASSERT_EQ(kilnmdlGetOutputDims(desc, 1, &dims), KILN_SUCCESS);
  EXPECT_EQ(dims.dims[0], 1);  // s is [1,1] in every bucket
  kilnmdlDestroyDesc(desc);
  run_and_check(id, 1, 0);  // bucket 1 exactly
  run_and_check(id, 3, 1);  // bucket 4, one padded row (which ReduceSum sees)
  run_and_check(id, 2, 2);
  run_and_check(id, 4, 0);  // bucket 4 exactly
  run_and_check(id, 7, 0);  // no bucket: the dynamic graph at the true shape
  run_and_check(id, 3, 1);  // buckets still serve after the dynamic path ran
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
}

TEST_F(BucketsApiTest, ACallerWorkspaceSizedByQuerySizeRunsEveryBucket) {
  size_t work = 0, weight = 0;
  ASSERT_EQ(kilnmdlQuerySize(path_.c_str(), &work, &weight), KILN_SUCCESS) << last_error();
  EXPECT_EQ(weight, 16u);  // w once, though three graphs hold it
  EXPECT_GE(work, 4u * 4 * 4);  // at least the largest bucket's padded input
  void* ws = nullptr;
  ASSERT_EQ(kilnrtMalloc(&ws, work, KILN_MEM_MALLOC_NORMAL_ONLY), KILN_SUCCESS) << last_error();
  uint32_t id = 0;
  ASSERT_EQ(kilnmdlLoadFromFileWithMem(path_.c_str(), &id, ws, work, nullptr, 0), KILN_SUCCESS) << last_error();
  run_and_check(id, 1, 0);
  run_and_check(id, 3, 1);
  run_and_check(id, 4, 0);
  EXPECT_EQ(kilnmdlUnload(id), KILN_SUCCESS);
  kilnrtFree(ws);
}

}  // namespace
