// Tests of LinearAttention and CausalConvWithState: reference kernels, inference and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor_ops_test_util.h"

namespace kiln::ops::testing {
namespace {

// Expected values were computed with NumPy (float64) from the ONNX operator definitions;
// the generator is kept outside the tree.

TEST(LinearAttentionTest, GatedDeltaGqaWithPast) {
  auto r = run_op("LinearAttention", 27, {make<float>({1, 3, 4}, {0.25, 0.790000021, 0.550000012, -0.550000012, -0.400000006, 0.75, -0.99000001, 0.639999986, 0.589999974, -0.0599999987, -0.389999986, -0.439999998}), make<float>({1, 3, 2}, {-0.49000001, -0.109999999, 0.00999999978, 0.109999999, 0.99000001, 0.589999974}), make<float>({1, 3, 2}, {0.239999995, 0.980000019, -0.569999993, -0.680000007, 0.230000004, -0.910000026}), make<float>({1, 1, 2, 2}, {-0.00999999978, -0.5, -0.980000019, -0.620000005}), make<float>({1, 3, 1}, {-0.465000004, 0.0149999997, -0.0350000001}), make<float>({1, 3, 1}, {0.829999983, 0.25999999, 0.0299999993})}, {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(1)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 3, 4}, {-0.365773201, -0.369329661, 0.216203108, -0.0667626187, -0.325343341, -0.0754947662, -0.242064878, 0.230874285, 0.00347562623, -0.239660606, 0.20809561, 0.317601323});
  expect_tensor((*r)[1], {1, 1, 2, 2}, {-0.0547518618, -0.622187734, -0.620314598, -0.469324738});
}

TEST(LinearAttentionTest, GatedPerKeyDimScale) {
  auto r = run_op("LinearAttention", 27, {make<float>({1, 2, 4}, {0.379999995, -0.600000024, -0.25999999, -0.99000001, 0.660000026, -0.689999998, -0.460000008, 0.75999999}), make<float>({1, 2, 4}, {0.0199999996, 0.689999998, 0.280000001, 0.479999989, -0.819999993, 0.0799999982, 0.0199999996, 0.74000001}), make<float>({1, 2, 2}, {-0.280000001, 0.200000003, -0.879999995, -0.219999999}), Tensor(), make<float>({1, 2, 4}, {-0.174999997, -0.349999994, 0.314999998, -0.119999997, 0.479999989, 0.0900000036, 0.104999997, 0.140000001})}, {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(2)}, {"update_rule", attr_s("gated")}, {"scale", attr_f(0.75f)}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 2, 2}, {0.0853440017, -0.0821999982, 0.498540908, -0.0497939512});
  expect_tensor((*r)[1], {1, 2, 2, 1}, {0.712549984, -0.281794488, 0.0577998012, -0.0523737185});
}

TEST(LinearAttentionTest, Linear) {
  auto r = run_op("LinearAttention", 27, {make<float>({1, 2, 4}, {0.379999995, -0.600000024, -0.25999999, -0.99000001, 0.660000026, -0.689999998, -0.460000008, 0.75999999}), make<float>({1, 2, 4}, {0.0199999996, 0.689999998, 0.280000001, 0.479999989, -0.819999993, 0.0799999982, 0.0199999996, 0.74000001}), make<float>({1, 2, 2}, {-0.280000001, 0.200000003, -0.879999995, -0.219999999})}, {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(2)}, {"update_rule", attr_s("linear")}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 2, 2}, {0.0804630965, -0.0774989054, 0.46276179, -0.0526822843});
  expect_tensor((*r)[1], {1, 2, 2, 1}, {0.715999961, -0.263599992, 0.0516000018, -0.0667999983});
}

TEST(CausalConvWithStateTest, SiluBiasPast) {
  auto r = run_op("CausalConvWithState", 27, {make<float>({2, 2, 3}, {0.349999994, -0.699999988, -0.119999997, -0.519999981, -0.200000003, -0.810000002, 0.939999998, -0.569999993, 0.340000004, -0.400000006, 0.75, 0.319999993}), make<float>({2, 1, 3}, {-0.74000001, 0.689999998, 0.889999986, 0.810000002, 0.140000001, -0.709999979}), make<float>({2}, {-0.620000005, 0.860000014}), make<float>({2, 2, 2}, {0.100000001, -0.639999986, 0.769999981, 0.280000001, 0.140000001, -0.25, -0.180000007, -0.519999981})}, {{"activation", attr_s("silu")}}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {2, 2, 3}, {-0.251263171, -0.1958545, -0.274849325, 1.644225, 0.879259527, 0.718008637, -0.0288652088, -0.125438765, -0.276785582, 0.662716985, -0.0692579001, 0.249107078});
  expect_tensor((*r)[1], {2, 2, 2}, {-0.699999988, -0.119999997, -0.200000003, -0.810000002, -0.569999993, 0.340000004, 0.75, 0.319999993});
}

TEST(CausalConvWithStateTest, ShortInputNoState) {
  auto r = run_op("CausalConvWithState", 27, {make<float>({1, 2, 1}, {-0.920000017, 0.75}), make<float>({2, 1, 4}, {-0.0599999987, 0.100000001, -0.360000014, 0.5, -0.949999988, -0.25999999, -0.939999998, -0.75})}, {}, 2);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_tensor((*r)[0], {1, 2, 1}, {-0.460000008, -0.5625});
  expect_tensor((*r)[1], {1, 2, 3}, {0, 0, -0.920000017, 0, 0, 0.75});
}


TEST(LinearAttentionTest, Errors) {
  Tensor q = iota_f({1, 2, 4}), k = iota_f({1, 2, 4}), v = iota_f({1, 2, 4});
  ir::AttributeMap heads = {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(2)}};
  // The default rule gated_delta needs decay and beta.
  EXPECT_NE(run_error("LinearAttention", 27, {q, k, v}, heads, 2), "");
  // linear forbids decay.
  ir::AttributeMap lin = heads;
  lin["update_rule"] = attr_s("linear");
  EXPECT_NE(run_error("LinearAttention", 27, {q, k, v, Tensor(), iota_f({1, 2, 2})}, lin, 2), "");
  // q heads must be a multiple of kv heads.
  EXPECT_NE(run_error("LinearAttention", 27, {q, k, v}, {{"q_num_heads", attr_i(2)}, {"kv_num_heads", attr_i(4)},
                                                        {"update_rule", attr_s("linear")}}, 2), "");
  // past_state of the wrong shape.
  EXPECT_NE(run_error("LinearAttention", 27, {q, k, v, iota_f({1, 2, 2, 3})}, lin, 2), "");
}

TEST(CausalConvWithStateTest, Errors) {
  // weight channels differ from the input channels.
  EXPECT_NE(run_error("CausalConvWithState", 27, {iota_f({1, 2, 3}), iota_f({3, 1, 2})}, {}, 2), "");
  EXPECT_NE(run_error("CausalConvWithState", 27, {iota_f({1, 2, 3}), iota_f({2, 1, 2})},
                      {{"activation", attr_s("relu")}}, 2), "");
}

}  // namespace
}  // namespace kiln::ops::testing
