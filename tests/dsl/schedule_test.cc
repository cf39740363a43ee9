// Schedule primitives: each changes the printed loops and keeps the results right.
#include <gtest/gtest.h>

#include <cmath>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/printer.h"
#include "dsl_test_util.h"

namespace kiln::dsl {
namespace {

using testing::pattern;

// D = C + 1, C a small matmul with a reduction to schedule.
struct Matmul : testing::MatmulDef {
  Tensor d = compute("D", {n, Expr(19)}, [&](const std::vector<Expr>& i) { return c(i[0], i[1]) + Expr(1.0); });
};

void check_matmul(Matmul& m, Schedule& s, int64_t n) {
  auto f = lower(s, {m.a, m.b, m.d}, "matmul");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  auto k = build(*f);
  ASSERT_TRUE(k.ok()) << k.status().to_string() << "\n" << to_string(*f);
  auto a = pattern(n * 24, 7), b = pattern(24 * 19, 8);
  std::vector<float> d(n * 19, NAN);
  ASSERT_TRUE((*k)->run({a.data(), b.data(), d.data()}, {n}).ok());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 19; ++j) {
      double want = 1;
      for (int64_t kk = 0; kk < 24; ++kk) want += static_cast<double>(a[i * 24 + kk]) * b[kk * 19 + j];
      ASSERT_NEAR(d[i * 19 + j], want, 1e-4) << i << "," << j << "\n" << to_string(*f);
    }
}

class ScheduleTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::use_temp_cache(); }
};

TEST_F(ScheduleTest, SplitWithATailReorderFuseUnrollStayCorrect) {
  Matmul m;
  Schedule s({m.d});
  Stage& c = s[m.c];
  auto [jo, ji] = c.split(c.axes()[1], 8);  // 19 = 2 * 8 + 3: a tail
  auto [ko, ki] = c.split(m.k, 5);          // 24 = 4 * 5 + 4: a tail on the reduction
  c.reorder({c.axes()[0], jo, ko, ki, ji});  // a reduction loop outside a data-parallel one
  c.unroll(ki);
  c.vectorize(ji);
  Stage& d = s[m.d];
  Axis f = d.fuse(d.axes()[0], d.axes()[1]);
  auto [fo, fi] = d.split(f, 16);
  d.parallel(fo);
  d.vectorize(fi);
  auto lowered = lower(s, {m.a, m.b, m.d}, "matmul");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  std::string ir = to_string(*lowered);
  EXPECT_NE(ir.find("unrolled for (k.inner"), std::string::npos) << ir;
  EXPECT_NE(ir.find("vectorized for (j.inner, 0, min(8, "), std::string::npos) << ir;
  EXPECT_NE(ir.find("parallel for (i.j.fused.outer"), std::string::npos) << ir;
  EXPECT_NE(ir.find("allocate C[float32 * (n * 19)]"), std::string::npos) << ir;
  check_matmul(m, s, 5);
  check_matmul(m, s, 1);
}

TEST_F(ScheduleTest, TileBlocksTwoLoopsAndStaysCorrect) {
  Matmul m;
  Schedule s({m.d});
  Stage& c = s[m.c];
  auto t = c.tile(c.axes()[0], c.axes()[1], 2, 8);  // n = 5 and 19: tails on both
  auto lowered = lower(s, {m.a, m.b, m.d}, "matmul");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  std::string ir = to_string(*lowered);
  // The four loops nest x outer, y outer, x inner, y inner, with the reduction inside.
  size_t io = ir.find("for (i.outer"), jo = ir.find("for (j.outer"), ii = ir.find("for (i.inner"),
         ji = ir.find("for (j.inner"), k = ir.find("for (k");
  ASSERT_NE(io, std::string::npos) << ir;
  EXPECT_LT(io, jo) << ir;
  EXPECT_LT(jo, ii) << ir;
  EXPECT_LT(ii, ji) << ir;
  EXPECT_LT(ji, k) << ir;
  check_matmul(m, s, 5);
  check_matmul(m, s, 1);
  // A bad factor is the split's error, reported at lowering.
  Matmul bad;
  Schedule sb({bad.d});
  Stage& cb = sb[bad.c];
  cb.tile(cb.axes()[0], cb.axes()[1], 2, 0);
  auto refused = lower(sb, {bad.a, bad.b, bad.d}, "matmul");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().to_string().find("the factor must be >= 1"), std::string::npos)
      << refused.status().to_string();
}

TEST_F(ScheduleTest, DefaultScheduleParallelisesOuterAndVectorisesInner) {
  Matmul m;
  Schedule s({m.d});
  auto_schedule(s);
  auto lowered = lower(s, {m.a, m.b, m.d}, "matmul");
  ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
  std::string ir = to_string(*lowered);
  EXPECT_NE(ir.find("parallel for (i.j.fused, 0, (n * 19))"), std::string::npos) << ir;
  EXPECT_NE(ir.find("parallel for (i, 0, n)"), std::string::npos) << ir;
  EXPECT_NE(ir.find("vectorized for (j, 0, 19)"), std::string::npos) << ir;
  check_matmul(m, s, 3);
}

TEST_F(ScheduleTest, ComputeInlineRemovesTheBuffer) {
  Expr n = var("n");
  Tensor a = placeholder("A", {n});
  Tensor t = compute("T", {n}, [&](const std::vector<Expr>& i) { return tanh(a(i[0])) * Expr(2.0); });
  Tensor u = compute("U", {n}, [&](const std::vector<Expr>& i) {
    return select(t(i[0]) > Expr(0.5), exp(t(i[0])), max(t(i[0]), Expr(-0.25)));
  });
  Schedule s({u});
  s[t].compute_inline();
  auto f = lower(s, {a, u}, "chain");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::string ir = to_string(*f);
  EXPECT_EQ(ir.find("allocate"), std::string::npos) << ir;
  EXPECT_NE(ir.find("U[i] = select(((tanh(A[i]) * 2f) > 0.5f)"), std::string::npos) << ir;
  auto k = build(*f);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  auto x = pattern(37, 9);
  std::vector<float> y(37);
  ASSERT_TRUE((*k)->run({x.data(), y.data()}, {37}).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    double tv = std::tanh(static_cast<double>(x[i])) * 2;
    double want = tv > 0.5 ? std::exp(tv) : std::max(tv, -0.25);
    ASSERT_NEAR(y[i], want, 1e-5 * (1 + std::fabs(want))) << i;
  }
}

TEST_F(ScheduleTest, SecondBuildComesFromTheDiskCache) {
  Expr n = var("n");
  Tensor a = placeholder("A", {n});
  Tensor b = compute("B", {n}, [&](const std::vector<Expr>& i) { return sqrt(abs(a(i[0]))) + log(Expr(2.0)); });
  Schedule s({b});
  auto_schedule(s);
  auto f = lower(s, {a, b}, "cached");
  ASSERT_TRUE(f.ok());
  auto k1 = build(*f);
  ASSERT_TRUE(k1.ok()) << k1.status().to_string();
  auto k2 = build(*f);
  ASSERT_TRUE(k2.ok());
  EXPECT_TRUE((*k2)->from_cache());
  EXPECT_EQ((*k1)->library_path(), (*k2)->library_path());
}

}  // namespace
}  // namespace kiln::dsl
