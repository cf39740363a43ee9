// The SIMD Softmax kernel (src/kernels/cpu/softmax.cc) against the reference kernel of ONNX
// Softmax (src/ops/softmax.cc, which sums in double) on rows of 1 element, lengths that are
// not multiples of 8 or 16, opset-11 coercion to 2-D, an axis followed by 1s, wide-ranging
// values, -inf / +inf / NaN rows; plus nodes it does not take, inputs other than prepared,
// and concurrent runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ir/graph.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"
#include "simd_test_util.h"

namespace kiln::kernels {
namespace {

using testing::Built;
using testing::Dims;
using testing::max_abs;
using testing::random_tensor;
using testing::run_kernel;
using testing::run_reference;
using testing::run_with;

// Softmax(X) at `opset` with `axis` (none: the default), X uniform in [-range, range].
Built build(const Dims& x, int opset, const int64_t* axis, float range = 5.0f, unsigned seed = 1) {
  Built b;
  b.graph = std::make_shared<ir::Graph>("g");
  b.graph->opset_imports()[""] = opset;
  std::mt19937 rng(seed);
  ir::Value* v = b.graph->get_or_add_value("x");
  v->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(x)};
  b.graph->inputs().push_back(v);
  b.inputs.push_back(random_tensor(x, rng, -range, range));
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("sm", "Softmax", ops::kOnnxDomain, opset, {v}, {y});
  if (axis) b.node->attrs()["axis"] = ir::Attribute::from_int(*axis);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

const KernelFactory* simd_factory() {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(ops::kOnnxDomain, "Softmax", DeviceKind::kCpu))
    if (f->name == "simd") return f;
  return nullptr;
}

// Elementwise, relative: each output is e * (1 / sum). The reference rounds exp once (0.5 ulp)
// and sums in double; the kernel's Exp is within 2 ulp and its float32 sum of n positive terms,
// in 2 accumulators per lane, is within (n / 2 + 8) * eps relative (worst case); 1 / sum and
// the product add an ulp each. So |y - yref| <= (n / 2 + 14) * eps * |yref|, plus an absolute
// 1e-30 for results in the denormal range (exp below -87), where relative error means nothing.
void expect_close(const Tensor& got, const Tensor& ref, int64_t n, const std::string& what) {
  ASSERT_EQ(got.dtype(), DataType::kFloat32) << what;
  ASSERT_EQ(got.dims(), ref.dims()) << what;
  const float rel = std::numeric_limits<float>::epsilon() * (static_cast<float>(n) / 2.0f + 14.0f);
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const float g = got.data<float>()[i], r = ref.data<float>()[i];
    if (std::isnan(r) || std::isnan(g)) {
      ASSERT_TRUE(std::isnan(r) && std::isnan(g))
          << what << ": element " << i << " is " << g << ", reference " << r;
      continue;
    }
    ASSERT_LE(std::fabs(g - r), rel * std::fabs(r) + 1e-30f)
        << what << ": element " << i << " is " << g << ", reference " << r;
  }
}

void expect_matches_reference(const Built& b, int64_t n) {
  const ir::Node& node = *b.node;
  const std::string what = ir::to_text(*b.graph);
  const KernelFactory* f = simd_factory();
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(node).ok()) << what;
  auto kernel = f->prepare(node);
  ASSERT_TRUE(kernel.ok()) << what << ": " << kernel.status().to_string();
  EXPECT_EQ((*kernel)->implementation().rfind("simd:", 0), 0u);
  auto ref = run_reference(node, b.inputs);
  ASSERT_TRUE(ref.ok()) << what << ": " << ref.status().to_string();
  auto got = run_kernel(**kernel, node, b.inputs);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  expect_close(*got, *ref, n, what + " [" + (*kernel)->implementation() + "]");
}

TEST(SimdSoftmaxKernel, LastAxisOddLengths) {
  const int64_t ns[] = {1, 2, 7, 8, 15, 16, 17, 31, 33, 64, 129, 1000};
  for (int64_t n : ns) {
    Built b = build({3, 5, n}, 13, nullptr, 5.0f, 3);
    expect_matches_reference(b, n);
  }
}

// Values over [-100, 100]: most exponentials underflow, some into the denormal range.
TEST(SimdSoftmaxKernel, WideValues) {
  Built b = build({16, 129}, 13, nullptr, 100.0f, 5);
  expect_matches_reference(b, 129);
}

TEST(SimdSoftmaxKernel, AxesWithContiguousRows) {
  {  // opset 11: coerced to [2, 3 * 5] at axis 1
    const int64_t axis = 1;
    Built b = build({2, 3, 5}, 11, &axis, 5.0f, 7);
    expect_matches_reference(b, 15);
  }
  {  // opset 11, default axis 1
    Built b = build({4, 3, 7}, 11, nullptr, 5.0f, 7);
    expect_matches_reference(b, 21);
  }
  {  // opset 13: axis 1 followed by 1s
    const int64_t axis = 1;
    Built b = build({3, 17, 1, 1}, 13, &axis, 5.0f, 9);
    expect_matches_reference(b, 17);
  }
  {  // opset 13, axis 0 of a 1-D tensor
    const int64_t axis = 0;
    Built b = build({37}, 13, &axis, 5.0f, 9);
    expect_matches_reference(b, 37);
  }
}

// -inf entries weigh 0; a row of only -inf, holding +inf, or holding NaN is NaN (reference).
TEST(SimdSoftmaxKernel, InfiniteAndNaN) {
  Built b = build({5, 19}, 13, nullptr, 5.0f, 11);
  float* x = b.inputs[0].data<float>();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < 19; ++j) {
    if (j % 3 == 0) x[0 * 19 + j] = -inf;
    x[1 * 19 + j] = -inf;
  }
  x[2 * 19 + 18] = -inf;  // in the tail
  x[3 * 19 + 4] = std::numeric_limits<float>::quiet_NaN();
  x[4 * 19 + 17] = inf;
  expect_matches_reference(b, 19);
}

TEST(SimdSoftmaxKernel, NotApplicable) {
  const KernelFactory* f = simd_factory();
  ASSERT_NE(f, nullptr);
  {  // opset 13 along a strided axis
    const int64_t axis = 0;
    EXPECT_FALSE(f->applicable(*build({3, 4}, 13, &axis).node).ok());
  }
  {  // float64
    Built b = build({3, 4}, 13, nullptr);
    b.node->input(0)->type().dtype = DataType::kFloat64;
    b.node->output(0)->type().dtype = DataType::kFloat64;
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  {  // a dynamic dim
    Built b = build({3, 4}, 13, nullptr);
    b.node->input(0)->type().shape = Shape({Dim(), Dim(4)});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  EXPECT_FALSE(f->applicable(*build({3, 0}, 13, nullptr).node).ok());  // empty rows
}

TEST(SimdSoftmaxKernel, InputsOtherThanPreparedRunTheReference) {
  Built b = build({4, 33}, 13, nullptr);
  auto kernel = simd_factory()->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  std::mt19937 rng(17);
  std::vector<Tensor> other = {random_tensor({6, 10}, rng, -5.0f, 5.0f)};
  auto ref = run_reference(*b.node, other);
  auto got = run_kernel(**kernel, *b.node, other);
  ASSERT_TRUE(ref.ok() && got.ok());
  ASSERT_EQ(got->dims(), ref->dims());
  for (int64_t i = 0; i < ref->num_elements(); ++i)
    EXPECT_EQ(got->data<float>()[i], ref->data<float>()[i]) << "element " << i;
}

TEST(SimdSoftmaxKernel, ConcurrentRuns) {
  Built b = build({256, 129}, 13, nullptr);
  auto kernel = simd_factory()->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  const Kernel& k = **kernel;
  constexpr int kThreads = 4, kRuns = 25;
  std::vector<std::vector<Tensor>> inputs(kThreads);
  std::vector<Tensor> refs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937 rng(300 + t);
    inputs[t] = {random_tensor({256, 129}, rng, -5.0f, 5.0f)};
    auto r = run_reference(*b.node, inputs[t]);
    ASSERT_TRUE(r.ok());
    refs[t] = *r;
  }
  const float rel = std::numeric_limits<float>::epsilon() * (129.0f / 2.0f + 14.0f);
  std::vector<int> failures(kThreads, 0), mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRuns; ++i) {
        auto got = run_kernel(k, *b.node, inputs[t]);
        if (!got.ok()) {
          ++failures[t];
          continue;
        }
        for (int64_t e = 0; e < refs[t].num_elements(); ++e) {
          const float g = got->data<float>()[e], r = refs[t].data<float>()[e];
          if (!(std::fabs(g - r) <= rel * std::fabs(r) + 1e-30f)) ++mismatches[t];
        }
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0) << "thread " << t;
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  }
}

}  // namespace
}  // namespace kiln::kernels
