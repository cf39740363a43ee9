// The SIMD LayerNorm and Gelu kernels (src/kernels/cpu/layernorm.cc, gelu.cc) against the
// reference kernels of kiln LayerNorm, ONNX LayerNormalization and kiln Gelu (src/ops; the
// norms accumulate in double) on shapes that hit their edge cases: rows of 1 element, lengths
// that are not multiples of 8 or 16, BERT's [1, 128, 768], axes other than the last, no Bias,
// a mean far from zero, a Gelu sweep over [-10, 10] in both forms; plus nodes they do not
// take, inputs other than prepared, and concurrent runs.
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

// A one-node graph: kiln LayerNorm (or ONNX LayerNormalization) of X [x_lo, x_hi], Scale
// [-2, 2], Bias [-1, 1].
Built build(bool onnx, const Dims& x, const Dims& scale, const Dims* bias, int64_t axis,
            float epsilon = 1e-5f, unsigned seed = 1, float x_lo = -1.0f, float x_hi = 1.0f) {
  Built b;
  b.graph = std::make_shared<ir::Graph>("g");
  b.graph->opset_imports()[""] = 17;
  b.graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  std::mt19937 rng(seed);
  std::vector<ir::Value*> ins;
  std::vector<Dims> dims = {x, scale};
  if (bias) dims.push_back(*bias);
  const float ranges[3][2] = {{x_lo, x_hi}, {-2.0f, 2.0f}, {-1.0f, 1.0f}};
  for (size_t i = 0; i < dims.size(); ++i) {
    ir::Value* v = b.graph->get_or_add_value("in" + std::to_string(i));
    v->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(dims[i])};
    b.graph->inputs().push_back(v);
    b.inputs.push_back(random_tensor(dims[i], rng, ranges[i][0], ranges[i][1]));
    ins.push_back(v);
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = onnx ? b.graph->add_node("ln", "LayerNormalization", ops::kOnnxDomain, 17, ins, {y})
                : b.graph->add_node("ln", "LayerNorm", ops::kKilnDomain, ops::kKilnOpset, ins, {y});
  b.node->attrs()["axis"] = ir::Attribute::from_int(axis);
  b.node->attrs()["epsilon"] = ir::Attribute::from_float(epsilon);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

const KernelFactory* simd_factory(const ir::Node& node) {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(node.domain(), node.op_type(), DeviceKind::kCpu))
    if (f->name == "simd") return f;
  return nullptr;
}

// The tolerance, from float32 summation order (computed from the inputs in double, not from
// either kernel). The kernel sums each row of n elements in at most 4 accumulators per lane
// (4 in all on a scalar target) and then across lanes, so each float32 sum carries at most
// k = n / 4 + 8 roundings of its terms' magnitudes (a worst-case bound):
//  - the mean (a sum of x - x[0]) is off by k * eps * A, A the largest |x - x[0]| of a row,
//    plus 2 eps |mean| for its division and addition;
//  - the variance by k * eps relative, 1/sqrt(var + epsilon) by half that plus 2 eps;
//  - y = (x - mean) * inv * scale + bias then carries |scale| * inv * (mean error) plus
//    |scale| * |x - mean| * inv * (inv's relative error) plus 4 eps |y| of its own roundings.
float tolerance(const Built& b, const Tensor& ref, int64_t n, double epsilon) {
  const double eps = std::numeric_limits<float>::epsilon();
  const Tensor& x = b.inputs[0];
  const int64_t rows = x.num_elements() / n;
  double a = 0, inv_max = 0, dev_max = 0, mean_max = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data<float>() + r * n;
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      s += xr[i];
      a = std::max(a, std::fabs(static_cast<double>(xr[i]) - xr[0]));
    }
    const double mean = s / static_cast<double>(n);
    double v = 0;
    for (int64_t i = 0; i < n; ++i) v += (xr[i] - mean) * (xr[i] - mean);
    const double inv = 1.0 / std::sqrt(v / static_cast<double>(n) + epsilon);
    inv_max = std::max(inv_max, inv);
    mean_max = std::max(mean_max, std::fabs(mean));
    for (int64_t i = 0; i < n; ++i) dev_max = std::max(dev_max, std::fabs(xr[i] - mean) * inv);
  }
  const double k = static_cast<double>(n) / 4.0 + 8.0;
  const double sm = max_abs(b.inputs[1]);
  return static_cast<float>(eps * (sm * inv_max * (k * a + 2.0 * mean_max) +
                                   sm * dev_max * (k / 2.0 + 2.0) + 4.0 * max_abs(ref)));
}

void expect_close(const Tensor& got, const Tensor& ref, float tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), DataType::kFloat32) << what;
  ASSERT_EQ(got.dims(), ref.dims()) << what;
  float worst = 0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const float d = std::fabs(got.data<float>()[i] - ref.data<float>()[i]);
    if (!(d <= worst)) {
      worst = d;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << worst_i << " is " << got.data<float>()[worst_i]
                        << ", reference " << ref.data<float>()[worst_i];
}

void expect_matches_reference(const Built& b, int64_t n, double epsilon = 1e-5) {
  const ir::Node& node = *b.node;
  const std::string what = ir::to_text(*b.graph);
  const KernelFactory* f = simd_factory(node);
  ASSERT_NE(f, nullptr) << what;
  ASSERT_TRUE(f->applicable(node).ok()) << what;
  auto kernel = f->prepare(node);
  ASSERT_TRUE(kernel.ok()) << what << ": " << kernel.status().to_string();
  EXPECT_EQ((*kernel)->implementation().rfind("simd:", 0), 0u);
  auto ref = run_reference(node, b.inputs);
  ASSERT_TRUE(ref.ok()) << what << ": " << ref.status().to_string();
  auto got = run_kernel(**kernel, node, b.inputs);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  expect_close(*got, *ref, tolerance(b, *ref, n, epsilon),
               what + " [" + (*kernel)->implementation() + "]");
}

TEST(SimdLayerNormKernel, LastAxisOddLengths) {
  const int64_t ns[] = {1, 2, 7, 8, 15, 16, 17, 33, 63, 64, 65, 129, 768, 1000};
  for (int64_t n : ns)
    for (bool onnx : {false, true})
      for (bool with_bias : {false, true}) {
        const Dims bias = {n};
        Built b = build(onnx, {3, 5, n}, {n}, with_bias ? &bias : nullptr, -1, 1e-5f, 3);
        expect_matches_reference(b, n);
      }
}

TEST(SimdLayerNormKernel, BertShape) {
  const Dims bias = {768};
  Built b = build(false, {1, 128, 768}, {768}, &bias, -1, 1e-12f, 5, -4.0f, 4.0f);
  expect_matches_reference(b, 768, 1e-12);
}

// axis = -2, 1 and 0: the normalised dims X[axis:] are contiguous; Scale and Bias with one
// value per element (1s where those dims are 1); a Scale that broadcasts runs the reference.
TEST(SimdLayerNormKernel, OtherAxes) {
  {
    const Dims bias = {5, 7};
    Built b = build(false, {2, 3, 5, 7}, {5, 7}, &bias, -2, 1e-5f, 7);
    expect_matches_reference(b, 35);
  }
  {
    Built b = build(true, {2, 3, 5, 7}, {3, 1, 1}, nullptr, 1, 1e-5f, 7);
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());  // Scale broadcasts: reference
  }
  {
    const Dims bias = {3, 5, 7};
    Built b = build(true, {2, 3, 5, 7}, {3, 5, 7}, &bias, 1, 1e-5f, 9);
    expect_matches_reference(b, 105);
  }
  {
    const Dims bias = {1, 5, 7};  // a 1 where the normalised dim is 1
    Built b = build(true, {2, 1, 5, 7}, {5, 7}, &bias, 1, 1e-5f, 9);
    expect_matches_reference(b, 35);
  }
  {
    const Dims bias = {4, 9};
    Built b = build(false, {4, 9}, {4, 9}, &bias, 0, 1e-3f, 11);
    expect_matches_reference(b, 36, 1e-3);
  }
}

// A mean far from zero against the spread (x in [1000, 1001]): the shifted sum keeps the mean
// accurate.
TEST(SimdLayerNormKernel, LargeMean) {
  const Dims bias = {129};
  Built b = build(false, {4, 129}, {129}, &bias, -1, 1e-5f, 13, 1000.0f, 1001.0f);
  expect_matches_reference(b, 129);
}

TEST(SimdLayerNormKernel, NotApplicable) {
  const Dims bias = {8};
  {  // float64
    Built b = build(false, {3, 8}, {8}, &bias, -1);
    for (ir::Value* v : b.node->inputs()) v->type().dtype = DataType::kFloat64;
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  }
  {  // a dynamic dim
    Built b = build(false, {3, 8}, {8}, &bias, -1);
    b.node->input(0)->type().shape = Shape({Dim(), Dim(8)});
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  }
  {  // Scale broadcast along the normalised dims
    Built b = build(false, {3, 5, 8}, {1, 8}, &bias, -2);
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  }
  {  // ONNX's Mean and InvStdDev outputs
    Built b = build(true, {3, 8}, {8}, &bias, -1);
    ir::Value* mean = b.graph->get_or_add_value("mean");
    b.node->outputs().push_back(mean);
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  }
  {  // an empty X
    Built b = build(false, {0, 8}, {8}, &bias, -1);
    EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  }
}

TEST(SimdLayerNormKernel, InputsOtherThanPreparedRunTheReference) {
  const Dims bias = {33};
  Built b = build(false, {4, 33}, {33}, &bias, -1);
  auto kernel = simd_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  std::mt19937 rng(17);
  std::vector<Tensor> other = b.inputs;
  other[0] = random_tensor({6, 33}, rng, -1.0f, 1.0f);
  auto ref = run_reference(*b.node, other);
  auto got = run_kernel(**kernel, *b.node, other);
  ASSERT_TRUE(ref.ok() && got.ok());
  expect_close(*got, *ref, 0.0f, "other X shape");
}

TEST(SimdLayerNormKernel, ConcurrentRuns) {
  const Dims bias = {200};
  Built b = build(false, {64, 200}, {200}, &bias, -1);
  auto kernel = simd_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  const Kernel& k = **kernel;
  constexpr int kThreads = 4, kRuns = 25;
  std::vector<std::vector<Tensor>> inputs(kThreads, b.inputs);
  std::vector<Tensor> refs(kThreads);
  std::vector<float> tols(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937 rng(200 + t);
    inputs[t][0] = random_tensor({64, 200}, rng, -1.0f, 1.0f);
    auto r = run_reference(*b.node, inputs[t]);
    ASSERT_TRUE(r.ok());
    refs[t] = *r;
    Built bt = b;
    bt.inputs = inputs[t];
    tols[t] = tolerance(bt, refs[t], 200, 1e-5);
  }
  std::vector<float> worst(kThreads, 0.0f);
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kRuns; ++i) {
        auto got = run_kernel(k, *b.node, inputs[t]);
        if (!got.ok()) {
          ++failures[t];
          continue;
        }
        for (int64_t e = 0; e < refs[t].num_elements(); ++e)
          worst[t] =
              std::max(worst[t], std::fabs(got->data<float>()[e] - refs[t].data<float>()[e]));
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(failures[t], 0);
    EXPECT_LE(worst[t], tols[t]) << "thread " << t;
  }
}

}  // namespace
}  // namespace kiln::kernels

// ---- Gelu (src/kernels/cpu/gelu.cc) -----------------------------------------------------

namespace kiln::kernels {
namespace {

// kiln Gelu(X) with `approximate`, X of `dims` (static, or with unknown dims when dynamic).
Built build_gelu(const Dims& dims, const std::string& approximate, bool dynamic = false) {
  Built b;
  b.graph = std::make_shared<ir::Graph>("g");
  b.graph->opset_imports()[""] = 17;
  b.graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  ir::Value* v = b.graph->get_or_add_value("x");
  Shape shape = Shape::from_static(dims);
  if (dynamic) shape = Shape(std::vector<Dim>(dims.size(), Dim()));
  v->type() = ir::TensorType{DataType::kFloat32, shape};
  b.graph->inputs().push_back(v);
  b.inputs.push_back(Tensor::make(DataType::kFloat32, dims));
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("gelu", "Gelu", ops::kKilnDomain, ops::kKilnOpset, {v}, {y});
  b.node->attrs()["approximate"] = ir::Attribute::from_string(approximate);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

// Elementwise: the kernel's 1 + erf (or 1 + tanh) is off from the exact value by its
// approximation error (erf: 3.8 eps, measured against double erf at 2M points of [-6, 6],
// plus up to 1 eps for FMA in its Horner steps; Highway's tanh: 4 ulp, at most 2 eps where
// |tanh| >= 0.5) and the rounding of the sum (1 eps); the reference's by 0.5 eps (libm's erff /
// tanhf) and 1 eps. Times 0.5 |x|, plus 2 eps of the result for the two products:
// |y - yref| <= 0.5 |x| * K * eps + 2 eps |yref|, K = 7.5 (erf) or 6 (tanh, also covering a
// last-bit difference in tanh's argument).
void expect_gelu_matches(const Built& b, float k_eps, const std::string& what) {
  const KernelFactory* f = simd_factory(*b.node);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*b.node).ok()) << what;
  auto kernel = f->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  auto ref = run_reference(*b.node, b.inputs);
  auto got = run_kernel(**kernel, *b.node, b.inputs);
  ASSERT_TRUE(ref.ok() && got.ok()) << what;
  ASSERT_EQ(got->dims(), ref->dims());
  const float eps = std::numeric_limits<float>::epsilon();
  const float* x = b.inputs[0].data<float>();
  for (int64_t i = 0; i < ref->num_elements(); ++i) {
    const float g = got->data<float>()[i], r = ref->data<float>()[i];
    if (std::isnan(r) || std::isnan(g)) {
      ASSERT_TRUE(std::isnan(r) && std::isnan(g))
          << what << " x = " << x[i] << ": " << g << ", reference " << r;
      continue;
    }
    ASSERT_LE(std::fabs(g - r), 0.5f * std::fabs(x[i]) * k_eps * eps + 2.0f * eps * std::fabs(r))
        << what << " x = " << x[i] << ": " << g << ", reference " << r << " ["
        << (*kernel)->implementation() << "]";
  }
}

TEST(SimdGeluKernel, SweepBothForms) {
  constexpr int64_t kSteps = 40001;  // not a multiple of the vector width
  for (const char* form : {"none", "tanh"}) {
    Built b = build_gelu({kSteps}, form);
    float* x = b.inputs[0].data<float>();
    for (int64_t i = 0; i < kSteps; ++i)
      x[i] = -10.0f + 20.0f * static_cast<float>(i) / (kSteps - 1);
    x[7] = std::numeric_limits<float>::quiet_NaN();
    expect_gelu_matches(b, std::string(form) == "tanh" ? 6.0f : 7.5f, form);
  }
}

TEST(SimdGeluKernel, ShapesAndDynamicDims) {
  std::mt19937 rng(23);
  for (bool dynamic : {false, true})
    for (const Dims& dims : {Dims{3, 5, 7}, Dims{1}, Dims{2, 129}}) {
      Built b = build_gelu(dims, "none", dynamic);
      b.inputs[0] = random_tensor(dims, rng, -6.0f, 6.0f);
      expect_gelu_matches(b, 7.5f, dynamic ? "dynamic" : "static");
    }
}

TEST(SimdGeluKernel, NotApplicable) {
  Built b = build_gelu({4}, "none");
  b.node->input(0)->type().dtype = DataType::kFloat64;
  b.node->output(0)->type().dtype = DataType::kFloat64;
  EXPECT_FALSE(simd_factory(*b.node)->applicable(*b.node).ok());
  Built c = build_gelu({4}, "none");
  c.node->attrs()["approximate"] = ir::Attribute::from_string("sigmoid");
  EXPECT_FALSE(simd_factory(*c.node)->applicable(*c.node).ok());
}

TEST(SimdGeluKernel, ConcurrentRuns) {
  Built b = build_gelu({64, 1000}, "tanh");
  auto kernel = simd_factory(*b.node)->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  const Kernel& k = **kernel;
  constexpr int kThreads = 4, kRuns = 10;
  std::vector<std::vector<Tensor>> inputs(kThreads);
  std::vector<Tensor> refs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937 rng(400 + t);
    inputs[t] = {random_tensor({64, 1000}, rng, -6.0f, 6.0f)};
    auto r = run_reference(*b.node, inputs[t]);
    ASSERT_TRUE(r.ok());
    refs[t] = *r;
  }
  const float eps = std::numeric_limits<float>::epsilon();
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
        const float* x = inputs[t][0].data<float>();
        for (int64_t e = 0; e < refs[t].num_elements(); ++e) {
          const float g = got->data<float>()[e], r = refs[t].data<float>()[e];
          if (!(std::fabs(g - r) <=
                0.5f * std::fabs(x[e]) * 6.0f * eps + 2.0f * eps * std::fabs(r)))
            ++mismatches[t];
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
