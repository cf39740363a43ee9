// The SIMD FusedQLinearAdd kernel (src/kernels/cpu/qlinear_add.cc) against the reference
// kernel (src/ops/fused_qlinear_add.cc): uint8 and int8, every pair of 8-bit values, sizes
// around the vector width, saturation at both ends, exact .5 ties, Relu and Clip, a single-
// element A or B; what the kernel refuses; fed constants; and (disabled, run by hand) the
// time per element at one thread.
//
// The kernel computes the reference's float32 steps (two products, their sum, a division)
// with the same roundings and applies Relu / Clip as bounds on the quantised value (exact,
// quantisation being monotonic), so the comparison is byte for byte. The checks also count
// outputs one step away, which a looser kernel shows (an FMA of a product into the sum moves
// ~1% of them, a multiply by 1 / C_scale a few): none are expected.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant_test_util.h"

namespace kiln::kernels {
namespace {

using namespace kiln::kernels::testing;

struct QAddCase {
  std::string name;
  DataType type = DataType::kUInt8;
  Dims a{}, b{};
  float sa = 0.05f, sb = 0.07f, sc = 0.1f;
  int za = 128, zb = 120, zc = 125;
  bool zero_points = true;
  std::string activation{};
  std::vector<float> params{};
};

Built qadd_graph(const QAddCase& c, const Tensor& a, const Tensor& b) {
  auto zp = [&](int v) { return c.zero_points ? scalar_x8(c.type, v) : Tensor(); };
  ir::AttributeMap attrs;
  if (!c.activation.empty()) attrs["activation"] = ir::Attribute::from_string(c.activation);
  if (!c.params.empty()) attrs["activation_params"] = ir::Attribute::from_floats(c.params);
  return make_quant_graph("FusedQLinearAdd", ops::kKilnDomain, ops::kKilnOpset,
                          {a, scalar_f32(c.sa), zp(c.za), b, scalar_f32(c.sb), zp(c.zb), scalar_f32(c.sc), zp(c.zc)},
                          {0, 3}, attrs);
}

double element(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kUInt8 ? t.data<uint8_t>()[i] : t.data<int8_t>()[i];
}

// Runs the case on random (or given) A and B; expects the kernel's bytes to be the
// reference's, and the output to reach both ends of the range when `saturates`.
void check_case(const QAddCase& c, Tensor a, Tensor b, bool saturates = false) {
  SCOPED_TRACE(c.name);
  Built g = qadd_graph(c, a, b);
  const KernelFactory* f = simd_factory(*g.node);
  ASSERT_NE(f, nullptr);
  ASSERT_TRUE(f->applicable(*g.node).ok());
  auto k = f->prepare(*g.node);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  auto want = run_reference(*g.node, g.inputs);
  auto got = run_kernel(**k, *g.node, g.inputs);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->dims(), want->dims());
  ASSERT_EQ(got->dtype(), want->dtype());
  int64_t one_step = 0, worse = 0;
  double lo = 1e9, hi = -1e9;
  for (int64_t i = 0; i < want->num_elements(); ++i) {
    const double d = std::fabs(element(*got, i) - element(*want, i));
    one_step += d == 1;
    worse += d > 1;
    lo = std::min(lo, element(*want, i));
    hi = std::max(hi, element(*want, i));
  }
  EXPECT_EQ(worse, 0);
  EXPECT_EQ(one_step, 0);
  if (saturates) {
    const bool u8 = c.type == DataType::kUInt8;
    EXPECT_EQ(lo, u8 ? 0 : -128);
    EXPECT_EQ(hi, u8 ? 255 : 127);
  }
}

void check_random(const QAddCase& c, uint32_t seed, bool saturates = false) {
  std::mt19937 rng(seed);
  check_case(c, random_bytes(c.type, c.a, rng), random_bytes(c.type, c.b, rng), saturates);
}

// A and B holding every pair of 8-bit values (65536 elements).
void check_all_pairs(const QAddCase& c, bool saturates = false) {
  Tensor a = Tensor::make(c.type, {256, 256});
  Tensor b = Tensor::make(c.type, {256, 256});
  for (int i = 0; i < 256 * 256; ++i) {
    static_cast<uint8_t*>(a.raw_data())[i] = static_cast<uint8_t>(i >> 8);
    static_cast<uint8_t*>(b.raw_data())[i] = static_cast<uint8_t>(i);
  }
  QAddCase full = c;
  full.a = full.b = {256, 256};
  check_case(full, a, b, saturates);
}

TEST(QLinearAddKernelTest, EveryPairOfValues) {
  QAddCase c{"u8"};
  check_all_pairs(c, true);
  c = {"s8", DataType::kInt8};
  c.za = -3;
  c.zb = 10;
  c.zc = 0;
  check_all_pairs(c, true);
  c = {"s8 no zero points", DataType::kInt8};
  c.zero_points = false;
  check_all_pairs(c, true);
  // Scales of a calibrated ResNet residual (C's range about A's plus B's).
  c = {"u8 calibrated", DataType::kUInt8};
  c.sa = 0.0213f;
  c.sb = 0.0387f;
  c.sc = 0.0561f;
  c.zc = 110;
  check_all_pairs(c);
}

TEST(QLinearAddKernelTest, ExactTiesRoundToEven) {
  // (a + b) * 0.25 / 0.5 = (a + b) / 2: every odd a + b is an exact .5 tie.
  QAddCase c{"ties u8"};
  c.sa = c.sb = 0.25f;
  c.sc = 0.5f;
  c.za = c.zb = 0;
  c.zc = 0;
  check_all_pairs(c);
  Tensor a = Tensor::from_vector<uint8_t>({1, 3, 5, 2}, {4});
  Tensor b = Tensor::from_vector<uint8_t>({0, 0, 0, 1}, {4});
  c.a = c.b = {4};
  Built g = qadd_graph(c, a, b);
  auto k = simd_factory(*g.node)->prepare(*g.node);
  ASSERT_TRUE(k.ok());
  auto y = run_kernel(**k, *g.node, g.inputs);
  ASSERT_TRUE(y.ok());
  // 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 1.5 -> 2.
  const std::vector<int> want = {0, 2, 2, 2};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y->data<uint8_t>()[i], want[i]) << i;
  c.name = "ties s8";
  c.type = DataType::kInt8;
  check_all_pairs(c);
}

TEST(QLinearAddKernelTest, SizesAroundTheVectorWidth) {
  for (int64_t n : {1, 7, 15, 16, 17, 31, 33, 63, 64, 65, 1001, 100003}) {
    QAddCase c{"u8 n " + std::to_string(n)};
    c.a = c.b = {n};
    check_random(c, static_cast<uint32_t>(n));
    c.name = "s8 n " + std::to_string(n);
    c.type = DataType::kInt8;
    c.za = 5;
    c.zb = -9;
    c.zc = 1;
    check_random(c, static_cast<uint32_t>(n) + 1);
  }
  QAddCase c4{"4-D residual", DataType::kUInt8, {2, 16, 7, 9}, {2, 16, 7, 9}};
  check_random(c4, 9);
}

TEST(QLinearAddKernelTest, ReluAndClip) {
  for (DataType t : {DataType::kUInt8, DataType::kInt8}) {
    QAddCase c{"Relu", t};
    c.activation = "Relu";
    if (t == DataType::kInt8) c.za = c.zb = c.zc = -20;
    check_all_pairs(c);
    c.name = "Clip(0, 6)";
    c.activation = "Clip";
    c.params = {0.0f, 6.0f};
    c.sc = 0.03f;
    check_all_pairs(c);
    c.name = "Clip narrow";
    c.params = {-1.0f, 0.55f};
    check_all_pairs(c);
    c.name = "Clip lo > hi";
    c.params = {2.0f, 1.0f};
    check_all_pairs(c);
  }
}

TEST(QLinearAddKernelTest, SingleElementOperand) {
  std::mt19937 rng(4);
  QAddCase c{"B single", DataType::kUInt8, {3, 5, 11}, {1}};
  for (int v : {0, 77, 255}) {
    Tensor b = Tensor::make(c.type, {1});
    b.data<uint8_t>()[0] = static_cast<uint8_t>(v);
    check_case(c, random_bytes(c.type, c.a, rng), b);
  }
  QAddCase s{"A scalar", DataType::kInt8, {}, {4, 33}};
  s.activation = "Relu";
  s.za = 3;
  check_case(s, scalar_x8(DataType::kInt8, -100), random_bytes(s.type, s.b, rng));
}

TEST(QLinearAddKernelTest, RefusesWhatTheReferenceRuns) {
  std::mt19937 rng(6);
  auto refused = [](const Built& g) { return !simd_factory(*g.node)->applicable(*g.node).ok(); };
  QAddCase c{"base", DataType::kUInt8, {2, 8}, {2, 8}};
  Tensor a = random_bytes(c.type, c.a, rng);
  EXPECT_FALSE(refused(qadd_graph(c, a, random_bytes(c.type, c.b, rng))));
  // A broadcast other than a single element.
  QAddCase bc = c;
  bc.b = {8};
  EXPECT_TRUE(refused(qadd_graph(bc, a, random_bytes(c.type, bc.b, rng))));
  // A scale that is not positive.
  QAddCase neg = c;
  neg.sc = -0.1f;
  EXPECT_TRUE(refused(qadd_graph(neg, a, random_bytes(c.type, c.b, rng))));
  // A per-channel scale, and a scale fed at run time (a graph input).
  Tensor b = random_bytes(c.type, c.b, rng);
  Tensor s2 = Tensor::from_vector<float>({0.1f, 0.2f}, {2});
  std::vector<Tensor> in = {a, s2, scalar_x8(c.type, 1), b, scalar_f32(0.1f), scalar_x8(c.type, 1), scalar_f32(0.1f),
                            scalar_x8(c.type, 1)};
  EXPECT_TRUE(refused(make_quant_graph("FusedQLinearAdd", ops::kKilnDomain, ops::kKilnOpset, in, {0, 3})));
  in[1] = scalar_f32(0.1f);
  EXPECT_TRUE(refused(make_quant_graph("FusedQLinearAdd", ops::kKilnDomain, ops::kKilnOpset, in, {0, 1, 3})));
}

TEST(QLinearAddKernelTest, OnlyReluAndClipAreActivations) {
  // The op refuses a Sigmoid (not a float32 step the QDQ Add pattern has), naming the node.
  Built g;
  g.graph = std::make_shared<ir::Graph>();
  std::vector<ir::Value*> ins;
  for (int i = 0; i < 8; ++i) {
    ir::Value* v = g.graph->get_or_add_value("in" + std::to_string(i));
    const bool scale = i == 1 || i == 4 || i == 6;
    v->type() = i == 0 || i == 3 ? ir::TensorType{DataType::kUInt8, Shape({4})}
                                 : ir::TensorType{scale ? DataType::kFloat32 : DataType::kUInt8, Shape({})};
    ins.push_back(v);
  }
  g.node = g.graph->add_node("sig", "FusedQLinearAdd", ops::kKilnDomain, ops::kKilnOpset, ins,
                             {g.graph->get_or_add_value("y")});
  g.node->attrs()["activation"] = ir::Attribute::from_string("Sigmoid");
  Status st = ops::infer_node(*g.node);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("node 'sig'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Relu or Clip"), std::string::npos) << st.message();
  EXPECT_FALSE(simd_factory(*g.node)->applicable(*g.node).ok());
}

TEST(QLinearAddKernelTest, FedConstantsRunTheReference) {
  QAddCase c{"fed", DataType::kUInt8, {100}, {100}};
  std::mt19937 rng(8);
  Built g = qadd_graph(c, random_bytes(c.type, c.a, rng), random_bytes(c.type, c.b, rng));
  auto k = simd_factory(*g.node)->prepare(*g.node);
  ASSERT_TRUE(k.ok());
  std::vector<Tensor> in = g.inputs;
  in[6] = scalar_f32(0.3f);  // another C_scale
  auto want = run_reference(*g.node, in);
  auto got = run_kernel(**k, *g.node, in);
  ASSERT_TRUE(want.ok() && got.ok());
  for (int64_t i = 0; i < want->num_elements(); ++i) ASSERT_EQ(element(*got, i), element(*want, i)) << i;
}

// The reference kernel itself on hand values, against NumPy's float32 evaluation of the QDQ
// graph (C is A's dtype):
//   fa = (A.astype(int32) - za).astype(float32) * float32(sa)   (fb likewise)
//   s  = act(fa + fb);  v = s / float32(sc)
//   C  = clip(rint(v) + zc, dtype min, dtype max)
std::vector<int> reference_values(const QAddCase& c, const Tensor& a, const Tensor& b, Dims* dims) {
  Built g = qadd_graph(c, a, b);
  auto y = run_reference(*g.node, g.inputs);
  EXPECT_TRUE(y.ok()) << y.status().to_string();
  if (!y.ok()) return {};
  EXPECT_EQ(g.node->output(0)->dtype(), y->dtype());
  EXPECT_EQ(g.node->output(0)->shape().static_dims(), y->dims());
  *dims = y->dims();
  std::vector<int> v;
  for (int64_t i = 0; i < y->num_elements(); ++i) v.push_back(static_cast<int>(element(*y, i)));
  return v;
}

TEST(FusedQLinearAddReferenceTest, MatchesNumPyOnHandValues) {
  // uint8, B [3] broadcast over A [2, 3]: sa 0.05 za 128, sb 0.1 zb 128, sc 0.2 zc 100.
  // v = [[-46, 0, 92.74999237], [-43.5, 18, 61.5]]: -43.5 and 61.5 are ties (to -44, 62);
  // 92.75 is below the tie in float32 (fa + fb = 18.549999).
  QAddCase c{"u8 broadcast"};
  c.sa = 0.05f;
  c.za = 128;
  c.sb = 0.1f;
  c.zb = 128;
  c.sc = 0.2f;
  c.zc = 100;
  Tensor a = Tensor::from_vector<uint8_t>({0, 128, 255, 10, 200, 130}, {2, 3});
  Tensor b = Tensor::from_vector<uint8_t>({100, 128, 250}, {3});
  Dims dims;
  EXPECT_EQ(reference_values(c, a, b, &dims), (std::vector<int>{54, 100, 193, 56, 118, 162}));
  EXPECT_EQ(dims, (Dims{2, 3}));
  // The same with Relu: negative sums become 0, i.e. zc.
  c.activation = "Relu";
  EXPECT_EQ(reference_values(c, a, b, &dims), (std::vector<int>{100, 100, 193, 100, 118, 162}));
  // int8, zero points 0 and zc -10, sa = sb = 0.25, sc = 0.5: v = (A + B) / 2 =
  // [-62.5, -2, 3.5, -61.5, 127, 30.5] -> [-62, -2, 4, -62, 127, 30] - 10, saturating at 127.
  QAddCase s{"s8 ties", DataType::kInt8};
  s.sa = s.sb = 0.25f;
  s.sc = 0.5f;
  s.za = s.zb = 0;
  s.zc = -10;
  Tensor sa8 = Tensor::from_vector<int8_t>({-128, -1, 0, 5, 127, 60}, {6});
  Tensor sb8 = Tensor::from_vector<int8_t>({3, -3, 7, -128, 127, 1}, {6});
  EXPECT_EQ(reference_values(s, sa8, sb8, &dims), (std::vector<int>{-72, -12, -6, -72, 117, 20}));
  // Clip(-2, 6): v = [-4, -2, 3.5, -4, 12, 12].
  s.activation = "Clip";
  s.params = {-2.0f, 6.0f};
  EXPECT_EQ(reference_values(s, sa8, sb8, &dims), (std::vector<int>{-14, -12, -6, -14, 2, 2}));
}

// Output 0 of one ONNX op on its reference kernel, every input a graph input.
Tensor onnx_op(const std::string& op, int64_t opset, const std::vector<Tensor>& in) {
  std::vector<size_t> all;
  for (size_t i = 0; i < in.size(); ++i) all.push_back(i);
  Built g = make_quant_graph(op, ops::kOnnxDomain, opset, in, all);
  auto y = run_reference(*g.node, in);
  EXPECT_TRUE(y.ok()) << op << ": " << y.status().to_string();
  return y.ok() ? *y : Tensor();
}

// The reference FusedQLinearAdd is the QDQ graph it replaces, run node by node on the ONNX
// reference kernels: DequantizeLinear(A), DequantizeLinear(B) -> Add -> [Relu | Clip] ->
// QuantizeLinear, on every pair of 8-bit values.
TEST(FusedQLinearAddReferenceTest, EqualsTheUnfusedQdqGraph) {
  for (DataType t : {DataType::kUInt8, DataType::kInt8})
    for (const char* act : {"", "Relu", "Clip"}) {
      QAddCase c{std::string(dtype_name(t)) + " " + act, t, {256, 256}, {256, 256}};
      c.sa = 0.0213f;
      c.sb = 0.0387f;
      c.sc = 0.0461f;
      if (t == DataType::kInt8) c.za = c.zb = c.zc = -7;
      c.activation = act;
      if (c.activation == "Clip") c.params = {-0.7f, 2.9f};
      SCOPED_TRACE(c.name);
      Tensor a = Tensor::make(t, c.a), b = Tensor::make(t, c.b);
      for (int i = 0; i < 256 * 256; ++i) {
        static_cast<uint8_t*>(a.raw_data())[i] = static_cast<uint8_t>(i >> 8);
        static_cast<uint8_t*>(b.raw_data())[i] = static_cast<uint8_t>(i);
      }
      Built g = qadd_graph(c, a, b);
      auto fused = run_reference(*g.node, g.inputs);
      ASSERT_TRUE(fused.ok()) << fused.status().to_string();
      Tensor s = onnx_op("Add", 14, {onnx_op("DequantizeLinear", 21, {a, scalar_f32(c.sa), scalar_x8(t, c.za)}),
                                     onnx_op("DequantizeLinear", 21, {b, scalar_f32(c.sb), scalar_x8(t, c.zb)})});
      if (c.activation == "Relu") s = onnx_op("Relu", 14, {s});
      if (c.activation == "Clip") s = onnx_op("Clip", 13, {s, scalar_f32(c.params[0]), scalar_f32(c.params[1])});
      Tensor q = onnx_op("QuantizeLinear", 21, {s, scalar_f32(c.sc), scalar_x8(t, c.zc)});
      ASSERT_EQ(q.dims(), fused->dims());
      ASSERT_EQ(q.dtype(), fused->dtype());
      EXPECT_EQ(std::memcmp(q.raw_data(), fused->raw_data(), q.size_bytes()), 0);
    }
}

TEST(QLinearAddKernelTest, DISABLED_Timing) {
  QAddCase c{"resnet residual", DataType::kUInt8, {1, 256, 56, 56}, {1, 256, 56, 56}};
  c.activation = "Relu";
  std::mt19937 rng(9);
  Built g = qadd_graph(c, random_bytes(c.type, c.a, rng), random_bytes(c.type, c.b, rng));
  auto k = simd_factory(*g.node)->prepare(*g.node);
  ASSERT_TRUE(k.ok());
  print_timing("FusedQLinearAdd u8 Relu [1,256,56,56]", **k, g);
}

}  // namespace
}  // namespace kiln::kernels
