// The SIMD kiln Attention kernel (src/kernels/cpu/attention.cc) against the reference kernel
// (src/ops/fused_attention.cc, which accumulates in double) on shapes that hit its edge
// cases: sequence lengths 1, 7, 129, head sizes that are not multiples of 8 or 16, K and Kt,
// every broadcast of the mask, batch broadcasting, -inf and BERT's -10000 mask values, NaN
// rows; plus nodes it does not take, inputs other than prepared, and concurrent runs.
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

// A one-node graph kiln::Attention(Q, K, V[, Mask]) -> y typed by the op's inference; values
// uniform in [-1, 1] (Q and K scaled by `qk_range`), seeded.
Built build(const Dims& q, const Dims& k, const Dims& v, const Dims* mask, int k_transposed,
            float scale, unsigned seed = 1, float qk_range = 1.0f) {
  Built b;
  b.graph = std::make_shared<ir::Graph>("g");
  b.graph->opset_imports()[""] = 17;
  b.graph->opset_imports()[ops::kKilnDomain] = ops::kKilnOpset;
  std::mt19937 rng(seed);
  std::vector<ir::Value*> ins;
  std::vector<Dims> dims = {q, k, v};
  if (mask) dims.push_back(*mask);
  for (size_t i = 0; i < dims.size(); ++i) {
    ir::Value* val = b.graph->get_or_add_value("in" + std::to_string(i));
    val->type() = ir::TensorType{DataType::kFloat32, Shape::from_static(dims[i])};
    b.graph->inputs().push_back(val);
    const float r = i < 2 ? qk_range : 1.0f;
    b.inputs.push_back(random_tensor(dims[i], rng, -r, r));
    ins.push_back(val);
  }
  ir::Value* y = b.graph->get_or_add_value("y");
  b.node = b.graph->add_node("attn", "Attention", ops::kKilnDomain, ops::kKilnOpset, ins, {y});
  b.node->attrs()["k_transposed"] = ir::Attribute::from_int(k_transposed);
  b.node->attrs()["scale"] = ir::Attribute::from_float(scale);
  b.graph->outputs() = {y};
  Status st = ops::infer_node(*b.node);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return b;
}

const KernelFactory* simd_factory() {
  for (const KernelFactory* f :
       KernelRegistry::instance().candidates(ops::kKilnDomain, "Attention", DeviceKind::kCpu))
    if (f->name == "simd") return f;
  return nullptr;
}

// The tolerance, from float32 summation order (the reference accumulates in double):
//  - a score s = scale * q.k over D products, summed in float32 with FMA, is off by about
//    D * eps * max|Q| * max|K| * |scale| (partial sums of random sign stay near
//    sqrt(D) * max|Q| max|K|, and D roundings of eps times them add up like a random walk);
//    a score error e changes its softmax weight by a factor exp(e) and, through the sum,
//    all the weights by up to that factor again: 2 * e relative;
//  - the softmax: Highway's Exp (within 2 ulp), the float32 sum of Sk terms (at most Sk * eps
//    relative), 1/sum and the product: (Sk + 8) * eps relative on each weight;
//  - Y = sum of Sk weights (summing to 1) times V, in float32: Sk * eps * max|V|.
// So |Y - Yref| <= max|V| * eps * (2 * D * max|Q| * max|K| * |scale| + 2 * Sk + 8), plus 8
// eps for the roundings of the scores and the output.
float tolerance(const Built& b, int64_t d, int64_t sk, float scale) {
  const float eps = std::numeric_limits<float>::epsilon();
  const float mq = max_abs(b.inputs[0]), mk = max_abs(b.inputs[1]), mv = max_abs(b.inputs[2]);
  return mv * eps *
         (2.0f * static_cast<float>(d) * mq * mk * std::fabs(scale) +
          2.0f * static_cast<float>(sk) + 16.0f);
}

// got and ref agree within tol elementwise, and NaN exactly where the reference has NaN.
void expect_close(const Tensor& got, const Tensor& ref, float tol, const std::string& what) {
  ASSERT_EQ(got.dtype(), DataType::kFloat32) << what;
  ASSERT_EQ(got.dims(), ref.dims()) << what;
  float worst = 0;
  int64_t worst_i = 0;
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const float g = got.data<float>()[i], r = ref.data<float>()[i];
    if (std::isnan(r) || std::isnan(g)) {
      ASSERT_TRUE(std::isnan(r) && std::isnan(g))
          << what << ": element " << i << " is " << g << ", reference " << r;
      continue;
    }
    const float d = std::fabs(g - r);
    if (d > worst) {
      worst = d;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, tol) << what << ": element " << worst_i << " is " << got.data<float>()[worst_i]
                        << ", reference " << ref.data<float>()[worst_i];
}

// Prepares the SIMD kernel for b's node (it must take it) and compares with the reference.
void expect_matches_reference(const Built& b, float tol) {
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
  expect_close(*got, *ref, tol, what + " [" + (*kernel)->implementation() + "]");
}

struct Geometry {
  int64_t sq, sk, d, dv;
};

// Q [B, H, Sq, D], K [B, H, Sk, D] or Kt [B, H, D, Sk], V [B, H, Sk, Dv].
Dims kdims(const Dims& lead, const Geometry& g, int kt) {
  Dims k = lead;
  k.push_back(kt ? g.d : g.sk);
  k.push_back(kt ? g.sk : g.d);
  return k;
}
Dims mat(const Dims& lead, int64_t r, int64_t c) {
  Dims m = lead;
  m.push_back(r);
  m.push_back(c);
  return m;
}

TEST(SimdAttentionKernel, OddLengthsAndHeadSizes) {
  const Geometry gs[] = {{1, 1, 1, 1},     {7, 7, 7, 7},    {129, 129, 64, 64},
                         {1, 129, 24, 40}, {129, 1, 17, 9}, {7, 33, 100, 3},
                         {16, 16, 16, 16}, {33, 17, 8, 72}, {128, 128, 64, 64}};
  for (const Geometry& g : gs)
    for (int kt = 0; kt < 2; ++kt) {
      const Dims lead = {2, 3};
      const float scale = 1.0f / std::sqrt(static_cast<float>(g.d));
      Built b = build(mat(lead, g.sq, g.d), kdims(lead, g, kt), mat(lead, g.sk, g.dv), nullptr, kt,
                      scale, 3);
      expect_matches_reference(b, tolerance(b, g.d, g.sk, scale));
    }
}

TEST(SimdAttentionKernel, MaskBroadcasts) {
  const Geometry g = {7, 129, 24, 20};
  const Dims lead = {2, 3};
  const Dims masks[] = {
      {2, 1, 1, 129},  // BERT's [B, 1, 1, Sk]
      {2, 3, 7, 129},  // full
      {7, 129},        // per query and key, every batch
      {129},           // per key
      {1},             // one value
      {},              // a scalar
      {2, 3, 7, 1},    // per query: constant along the row
      {1, 3, 1, 129},  // per head and key
      {7, 1},
  };
  for (const Dims& m : masks)
    for (int kt = 0; kt < 2; ++kt) {
      Built b =
          build(mat(lead, g.sq, g.d), kdims(lead, g, kt), mat(lead, g.sk, g.dv), &m, kt, 0.2f, 5);
      expect_matches_reference(b, tolerance(b, g.d, g.sk, 0.2f));
    }
}

TEST(SimdAttentionKernel, BatchBroadcasting) {
  struct Case {
    Dims q, k, v, mask;
    bool has_mask;
  };
  const Case cases[] = {
      {{2, 3, 7, 17}, {1, 3, 9, 17}, {2, 1, 9, 5}, {}, false},
      {{7, 17}, {4, 9, 17}, {9, 5}, {}, false},                  // Q without batch
      {{3, 7, 17}, {9, 17}, {9, 5}, {2, 1, 7, 9}, true},         // the mask adds a batch dim
      {{5, 1, 17}, {5, 33, 17}, {5, 33, 19}, {5, 1, 33}, true},  // Sq = 1 (decoding)
      {{1, 1, 129, 17}, {2, 2, 129, 17}, {1, 2, 129, 17}, {129, 129}, true},
  };
  for (const Case& c : cases) {
    Built b = build(c.q, c.k, c.v, c.has_mask ? &c.mask : nullptr, 0, 0.5f, 7);
    expect_matches_reference(b, tolerance(b, c.q.back(), c.k[c.k.size() - 2], 0.5f));
  }
}

// BERT's additive mask: 0 for tokens, -10000 for padding, as [B, 1, 1, Sk]; the masked
// scores quantise to float32 steps of 1e-3, and their weights vanish on both sides.
TEST(SimdAttentionKernel, BertPaddingMask) {
  const Geometry g = {128, 128, 64, 64};
  const Dims lead = {2, 12}, m = {2, 1, 1, 128};
  Built b =
      build(mat(lead, g.sq, g.d), kdims(lead, g, 0), mat(lead, g.sk, g.dv), &m, 0, 0.125f, 9, 3.0f);
  float* mask = b.inputs[3].data<float>();
  for (int64_t j = 0; j < 128; ++j) {
    mask[j] = j < 100 ? 0.0f : -10000.0f;
    mask[128 + j] = j < 7 ? 0.0f : -10000.0f;
  }
  expect_matches_reference(b, tolerance(b, g.d, g.sk, 0.125f));
}

// -inf in the mask: weight 0; a row of only -inf, or holding NaN, is NaN as in the
// reference (and the unfused Softmax).
TEST(SimdAttentionKernel, InfiniteAndNaNScores) {
  const Geometry g = {5, 19, 9, 11};
  const Dims lead = {2}, m = {2, 5, 19};
  Built b = build(mat(lead, g.sq, g.d), kdims(lead, g, 1), mat(lead, g.sk, g.dv), &m, 1, 1.0f, 11);
  float* mask = b.inputs[3].data<float>();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < 19; ++j) {
    mask[0 * 19 + j] = j % 3 == 0 ? -inf : 0.0f;  // some keys masked out
    mask[1 * 19 + j] = -inf;                      // every key masked: NaN
    mask[2 * 19 + j] = j == 18 ? -inf : 0.0f;     // the last (tail) key masked
  }
  mask[3 * 19 + 4] = std::numeric_limits<float>::quiet_NaN();  // NaN row
  mask[4 * 19 + 17] = inf;                                     // +inf score: NaN row
  expect_matches_reference(b, tolerance(b, g.d, g.sk, 1.0f));
}

TEST(SimdAttentionKernel, NotApplicable) {
  const KernelFactory* f = simd_factory();
  ASSERT_NE(f, nullptr);
  const Dims q = {2, 7, 8}, k = {2, 9, 8}, v = {2, 9, 4};
  {  // float64
    Built b = build(q, k, v, nullptr, 0, 1.0f);
    for (ir::Value* x : b.node->inputs()) x->type().dtype = DataType::kFloat64;
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  {  // a dynamic dim
    Built b = build(q, k, v, nullptr, 0, 1.0f);
    b.node->input(0)->type().shape = Shape({Dim(2), Dim(), Dim(8)});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  {  // head sizes that differ
    Built b = build(q, k, v, nullptr, 0, 1.0f);
    b.node->input(1)->type().shape = Shape::from_static({2, 9, 5});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  {  // an empty key sequence (the reference writes zeros)
    Built b = build(q, k, v, nullptr, 0, 1.0f);
    b.node->input(1)->type().shape = Shape::from_static({2, 0, 8});
    b.node->input(2)->type().shape = Shape::from_static({2, 0, 4});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
  {  // a mask that does not broadcast
    const Dims m = {2, 7, 9};
    Built b = build(q, k, v, &m, 0, 1.0f);
    EXPECT_TRUE(f->applicable(*b.node).ok());
    b.node->input(3)->type().shape = Shape::from_static({2, 7, 3});
    EXPECT_FALSE(f->applicable(*b.node).ok());
  }
}

// Inputs of other shapes than prepared: the kernel runs the reference kernel.
TEST(SimdAttentionKernel, InputsOtherThanPreparedRunTheReference) {
  const Dims m = {2, 1, 9};
  Built b = build({2, 7, 8}, {2, 9, 8}, {2, 9, 4}, &m, 0, 0.5f);
  auto kernel = simd_factory()->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  std::mt19937 rng(13);
  std::vector<Tensor> other = b.inputs;
  other[0] = random_tensor({2, 5, 8}, rng, -1.0f, 1.0f);  // another Sq
  auto ref = run_reference(*b.node, other);
  auto got = run_kernel(**kernel, *b.node, other);
  ASSERT_TRUE(ref.ok() && got.ok());
  expect_close(*got, *ref, 0.0f, "other Q shape");
}

// One prepared kernel run from several threads at once; each thread checks its own inputs.
TEST(SimdAttentionKernel, ConcurrentRuns) {
  const Dims m = {2, 1, 1, 33};
  Built b = build({2, 4, 33, 24}, {2, 4, 33, 24}, {2, 4, 33, 40}, &m, 0, 0.25f);
  auto kernel = simd_factory()->prepare(*b.node);
  ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
  const Kernel& k = **kernel;
  constexpr int kThreads = 4, kRuns = 25;
  std::vector<std::vector<Tensor>> inputs(kThreads, b.inputs);
  std::vector<Tensor> refs(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937 rng(100 + t);
    for (int i = 0; i < 4; ++i) inputs[t][i] = random_tensor(b.inputs[i].dims(), rng, -1.0f, 1.0f);
    auto r = run_reference(*b.node, inputs[t]);
    ASSERT_TRUE(r.ok());
    refs[t] = *r;
  }
  const float tol = std::numeric_limits<float>::epsilon() * (2.0f * 24 * 0.25f + 2.0f * 33 + 16.0f);
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
    EXPECT_LE(worst[t], tol) << "thread " << t;
  }
}

}  // namespace
}  // namespace kiln::kernels
