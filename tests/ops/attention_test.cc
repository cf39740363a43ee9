// Tests of Attention, RotaryEmbedding and TensorScatter: reference kernels, inference and
// error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64, from the ONNX operator definitions;
// generator kept outside the tree).

TEST(AttentionTest, GqaCausalPastMaskQkBias) {
  auto r = run_op("Attention", 23, {make<float>({1, 2, 2, 2}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986}), make<float>({1, 1, 2, 2}, {0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<float>({1, 1, 2, 3}, {-0.49000001, -0.109999999, 0.00999999978, 0.109999999, 0.99000001, 0.589999974}), make<float>({2, 3}, {-0.910000026, -0.930000007, 0.0299999993, -0.0700000003, 0.829999983, 0.25999999}), make<float>({1, 1, 1, 2}, {0.239999995, 0.980000019}), make<float>({1, 1, 1, 3}, {-0.569999993, -0.680000007, 0.230000004})}, {{"is_causal", attr_i(1)}, {"qk_matmul_output_mode", attr_i(2)}}, 4);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 2, 2, 3}, {-0.540527999, -0.470012009, 0.148952007, -0.341744512, 0.102298051, 0.195106745, -0.542929888, -0.487125486, 0.155557215, -0.309667826, 0.0938409641, 0.273358136}, 1e-5, 1e-6);
  expect_tensor((*r)[1], {1, 1, 3, 2}, {0.239999995, 0.980000019, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}, 1e-5, 1e-6);
  expect_tensor((*r)[2], {1, 1, 3, 3}, {-0.569999993, -0.680000007, 0.230000004, -0.49000001, -0.109999999, 0.00999999978, 0.109999999, 0.99000001, 0.589999974}, 1e-5, 1e-6);
  expect_tensor((*r)[3], {1, 2, 2, 3}, {-0.32013151, -0.859218597, -INFINITY, -0.357792467, 1.08279061, 0.27944544, -0.458158791, -1.12869704, -INFINITY, 0.205488801, 0.38982603, 0.333892643}, 1e-5, 1e-6);
}

TEST(AttentionTest, ThreeDSoftcapBoolMaskScale) {
  auto r = run_op("Attention", 23, {make<float>({1, 2, 4}, {0.0299999993, -0.00999999978, -0.5, -0.980000019, -0.620000005, 0.379999995, -0.600000024, -0.25999999}), make<float>({1, 3, 4}, {-0.99000001, 0.660000026, -0.689999998, -0.460000008, 0.75999999, 0.0199999996, 0.689999998, 0.280000001, 0.479999989, -0.819999993, 0.0799999982, 0.0199999996}), make<float>({1, 3, 4}, {0.74000001, -0.280000001, 0.200000003, -0.879999995, -0.219999999, -0.349999994, -0.699999988, 0.629999995, -0.239999995, 0.959999979, 0.180000007, 0.209999993}), make<bool>({2, 3}, {true, false, true, true, true, false})}, {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(2)}, {"softcap", attr_f(1.5f)}, {"scale", attr_f(0.5f)}}, 1);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 2, 4}, {0.242785543, 0.349128485, 0.192063063, -0.447436363, 0.410878897, -0.303998411, -0.138664752, -0.311795801}, 1e-5, 1e-6);
}

TEST(RotaryEmbeddingTest, InterleavedPartialWithPositions) {
  Tensor y = run1("RotaryEmbedding", 23, {make<float>({1, 2, 2, 4}, {0.280000001, 0.349999994, -0.699999988, -0.119999997, -0.519999981, -0.200000003, -0.810000002, 0.939999998, -0.569999993, 0.340000004, -0.400000006, 0.75, 0.319999993, -0.74000001, 0.689999998, 0.889999986}), make<float>({3, 1}, {0.810000002, 0.140000001, -0.709999979}), make<float>({3, 1}, {-0.620000005, 0.860000014, 0.100000001}), make<int64_t>({1, 2}, {2, 0})}, {{"interleaved", attr_i(1)}, {"rotary_embedding_dim", attr_i(2)}});
  expect_tensor(y, {1, 2, 2, 4}, {-0.233799994, -0.220499992, -0.699999988, -0.119999997, -0.54519999, 0.160399988, -0.810000002, 0.939999998, 0.370699972, -0.298399985, -0.400000006, 0.75, -0.199600011, -0.797800004, 0.689999998, 0.889999986});
}

TEST(RotaryEmbeddingTest, ThreeDNoPositions) {
  Tensor y = run1("RotaryEmbedding", 23, {make<float>({1, 2, 4}, {-0.639999986, 0.769999981, 0.280000001, 0.140000001, -0.25, -0.180000007, -0.519999981, -0.920000017}), make<float>({1, 2, 1}, {0.75, -0.0599999987}), make<float>({1, 2, 1}, {0.100000001, -0.360000014})}, {{"num_heads", attr_i(2)}});
  expect_tensor(y, {1, 2, 4}, {-0.556999981, 0.513499975, 0.195999995, 0.133000001, -0.0498000048, 0.1008, -0.300000012, 0.242400005});
}

TEST(AttentionTest, InferShapes3DAndPresent) {
  ir::TensorType q{DataType::kFloat32, Shape{2, 4, 72}}, k{DataType::kFloat32, Shape{2, 6, 24}},
      v{DataType::kFloat32, Shape{2, 6, 30}};
  auto r = infer_op("Attention", 23, {q, k, v}, {{"q_num_heads", attr_i(9)}, {"kv_num_heads", attr_i(3)}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].shape, (Shape{2, 4, 90}));
}

TEST(AttentionTest, Errors) {
  Tensor q = iota_f({1, 3, 2, 4}), k = iota_f({1, 2, 2, 4}), v = iota_f({1, 2, 2, 4});
  // 3 query heads are not a multiple of 2 kv heads.
  EXPECT_NE(run_error("Attention", 23, {q, k, v}), "");
  // Head size of K differs from Q.
  EXPECT_NE(run_error("Attention", 23, {iota_f({1, 2, 2, 4}), iota_f({1, 2, 2, 3}), v}), "");
  // 3-D inputs need the head counts.
  EXPECT_NE(run_error("Attention", 23, {iota_f({1, 2, 8}), iota_f({1, 2, 8}), iota_f({1, 2, 8})}), "");
  // A mask wider than the keys.
  Tensor q2 = iota_f({1, 2, 2, 4});
  EXPECT_NE(run_error("Attention", 23, {q2, k, v, iota_f({2, 3})}), "");
}

TEST(AttentionTest, NonpadKvSeqlenMasksTail) {
  // One query, keys [0, 1, 2]; nonpad 1 keeps only key 0, so Y equals V[0].
  Tensor q = make<float>({1, 1, 1, 2}, {1, 0});
  Tensor k = make<float>({1, 1, 3, 2}, {1, 0, 5, 0, 9, 0});
  Tensor v = make<float>({1, 1, 3, 1}, {7, 8, 9});
  Tensor n = make<int64_t>({1}, {1});
  auto r = run_op("Attention", 24, {q, k, v, Tensor(), Tensor(), Tensor(), n});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 1, 1, 1}, {7});
}

TEST(RotaryEmbeddingTest, Errors) {
  Tensor x = iota_f({1, 2, 2, 4});
  // Position id 5 is past the 3 cache rows.
  EXPECT_NE(run_error("RotaryEmbedding", 23, {x, iota_f({3, 2}), iota_f({3, 2}), make<int64_t>({1, 2}, {0, 5})}), "");
  // Odd rotary dim.
  EXPECT_NE(run_error("RotaryEmbedding", 23, {x, iota_f({3, 2}), iota_f({3, 2}), make<int64_t>({1, 2}, {0, 1})},
                      {{"rotary_embedding_dim", attr_i(3)}}),
            "");
}

TEST(TensorScatterTest, LinearAndCircular) {
  // Cache [2 batches, 4 slots, 1]; update writes 2 slots per batch at write_indices.
  Tensor cache = make<float>({2, 4, 1}, {0, 0, 0, 0, 0, 0, 0, 0});
  Tensor update = make<float>({2, 2, 1}, {1, 2, 3, 4});
  Tensor w = make<int64_t>({2}, {1, 2});
  Tensor y = run1("TensorScatter", 24, {cache, update, w});
  expect_tensor(y, {2, 4, 1}, {0, 1, 2, 0, 0, 0, 3, 4});
  Tensor w2 = make<int64_t>({2}, {3, 0});
  Tensor c = run1("TensorScatter", 24, {cache, update, w2}, {{"mode", attr_s("circular")}});
  expect_tensor(c, {2, 4, 1}, {2, 0, 0, 1, 3, 4, 0, 0});
  // Linear mode may not run past the end of the cache.
  EXPECT_NE(run_error("TensorScatter", 24, {cache, update, w2}), "");
  // No write_indices: writes at 0.
  Tensor z = run1("TensorScatter", 24, {cache, update});
  expect_tensor(z, {2, 4, 1}, {1, 2, 0, 0, 3, 4, 0, 0});
}

}  // namespace
}  // namespace kiln::ops::testing
