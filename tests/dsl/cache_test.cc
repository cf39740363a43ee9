// cache_read / cache_write: local buffers sized by bounds inference where they are computed, the
// results equal to double-precision loops with and without the caches, and misuse refused.
#include <gtest/gtest.h>

#include <cmath>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/printer.h"
#include "dsl_test_util.h"

namespace kiln::dsl {
namespace {

using testing::pattern;

class CacheTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::use_temp_cache(); }
};

using Matmul = testing::MatmulDef;

void check_matmul(const LoweredFunc& f, int64_t n) {
  auto k = build(f);
  ASSERT_TRUE(k.ok()) << k.status().to_string() << "\n" << to_string(f);
  auto a = pattern(n * 24, 3), b = pattern(24 * 19, 4);
  std::vector<float> c(n * 19, NAN);
  ASSERT_TRUE((*k)->run({a.data(), b.data(), c.data()}, {n}).ok());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < 19; ++j) {
      double want = 0;
      for (int64_t kk = 0; kk < 24; ++kk) want += static_cast<double>(a[i * 24 + kk]) * b[kk * 19 + j];
      ASSERT_NEAR(c[i * 19 + j], want, 1e-4) << "n " << n << " at " << i << "," << j << "\n" << to_string(f);
    }
}

// The register tile of a matmul: C.local accumulates a 4x8 tile of C (k outermost, the tile's
// columns vectorized) and C copies it out once.
TEST_F(CacheTest, CacheWriteAccumulatesAMatmulTileInALocalBuffer) {
  Matmul m;
  Schedule s({m.c});
  Tensor cl = s.cache_write(m.c);
  Stage& c = s[m.c];
  auto [io, ii] = c.split(c.axes()[0], 4);  // n rows: a tail when n % 4 != 0
  auto [jo, ji] = c.split(c.axes()[1], 8);  // 19 = 2 * 8 + 3: a tail
  c.reorder({io, jo, ii, ji});
  c.parallel(io);
  c.vectorize(ji);
  Stage& local = s[cl];
  local.compute_at(s[m.c], jo);
  local.reorder({m.k, local.axes()[0], local.axes()[1]});
  local.vectorize(local.axes()[1]);
  auto f = lower(s, {m.a, m.b, m.c}, "matmul_tile");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::string ir = to_string(*f);
  // 4 x 8 by bounds inference (the tails' min(4, n - io * 4) and min(8, 19 - jo * 8) are at most that).
  EXPECT_NE(ir.find("    for (j.outer, 0, 3) {\n      allocate local C.local[float32 * 32]  // [4, 8]\n"),
            std::string::npos) << ir;
  EXPECT_EQ(ir.find("allocate C"), std::string::npos) << ir;  // no whole buffer
  EXPECT_NE(ir.find("C.local[ax0, ax1] = (C.local[ax0, ax1] + (A[(ax0 + (i.outer * 4)), k] * B[k, (ax1 + (j.outer * 8))]))"),
            std::string::npos) << ir;
  EXPECT_NE(ir.find("C[(i.inner + (i.outer * 4)), (j.inner + (j.outer * 8))] = C.local[i.inner, j.inner]"),
            std::string::npos) << ir;
  EXPECT_NE(ir.find("for (ax0, 0, min(4, (n - (i.outer * 4))))"), std::string::npos) << ir;
  for (int64_t n : {1, 4, 7, 13}) check_matmul(*f, n);

  // The same computation without the cache: the same numbers.
  Matmul plain;
  Schedule p({plain.c});
  auto_schedule(p);
  auto g = lower(p, {plain.a, plain.b, plain.c}, "matmul_plain");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(to_string(*g).find("local"), std::string::npos);
  for (int64_t n : {1, 7}) check_matmul(*g, n);
}

// A 3x3 stencil (a convolution of one channel): Y[i, j] = sum X[i + di, j + dj] * W[di, dj].
struct Stencil {
  Expr n = var("n"), m = var("m");
  Tensor x = placeholder("X", {n + 2, m + 2});
  Tensor w = placeholder("W", {Expr(3), Expr(3)});
  Axis di = reduce_axis(Expr(3), "di"), dj = reduce_axis(Expr(3), "dj");
  Tensor y = compute("Y", {n, m}, [&](const std::vector<Expr>& i) {
    return sum(x(i[0] + di->var, i[1] + dj->var) * w(di->var, dj->var), {di, dj});
  });
};

void check_stencil(const LoweredFunc& f, int64_t n, int64_t m) {
  auto k = build(f);
  ASSERT_TRUE(k.ok()) << k.status().to_string() << "\n" << to_string(f);
  auto x = pattern((n + 2) * (m + 2), 5), w = pattern(9, 6);
  std::vector<float> y(n * m, NAN);
  ASSERT_TRUE((*k)->run({x.data(), w.data(), y.data()}, {n, m}).ok());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double want = 0;
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t b = 0; b < 3; ++b) want += static_cast<double>(x[(i + a) * (m + 2) + j + b]) * w[a * 3 + b];
      ASSERT_NEAR(y[i * m + j], want, 1e-5) << n << "x" << m << " at " << i << "," << j << "\n" << to_string(f);
    }
}

TEST_F(CacheTest, CacheReadStagesAStencilsInputTileWithItsHalo) {
  Stencil st;
  Schedule s({st.y});
  Tensor xl = s.cache_read(st.x, {st.y});
  Tensor wl = s.cache_read(st.w, {st.y});
  Stage& y = s[st.y];
  auto [io, ii] = y.split(y.axes()[0], 4);
  auto [jo, ji] = y.split(y.axes()[1], 8);
  y.reorder({io, jo, ii, ji});
  y.parallel(io);
  s[xl].compute_at(s[st.y], jo);
  s[xl].vectorize(s[xl].axes()[1]);
  s[wl].compute_at(s[st.y], io);
  auto f = lower(s, {st.x, st.w, st.y}, "stencil");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::string ir = to_string(*f);
  // A tile of 4 x 8 outputs reads 6 x 10 inputs; the weights whole, once per row block.
  EXPECT_NE(ir.find("allocate local X.local[float32 * 60]  // [6, 10]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("allocate local W.local[float32 * 9]  // [3, 3]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("vectorized for (ax1, 0, (min(8, (m - (j.outer * 8))) + 2)) {\n"
                    "          X.local[ax0, ax1] = X[(ax0 + (i.outer * 4)), (ax1 + (j.outer * 8))]"),
            std::string::npos) << ir;
  EXPECT_NE(ir.find("X.local[(di + i.inner), (dj + j.inner)] * W.local[di, dj]"), std::string::npos) << ir;
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {4, 8}, {5, 11}, {9, 30}}) check_stencil(*f, n, m);

  // Without the caches, and with a cache left to the default schedule (inlined: no buffer).
  Stencil plain;
  Schedule p({plain.y});
  Tensor unused = p.cache_read(plain.x, {plain.y});
  auto_schedule(p);
  auto g = lower(p, {plain.x, plain.w, plain.y}, "stencil_plain");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_EQ(to_string(*g).find("allocate"), std::string::npos) << to_string(*g);
  for (auto [n, m] : {std::pair<int64_t, int64_t>{1, 1}, {5, 11}}) check_stencil(*g, n, m);
}

// A cache computed at the root is a whole copy, in a buffer of the tensor's size.
TEST_F(CacheTest, ACacheNotComputedAtALoopIsAWholeCopy) {
  Stencil st;
  Schedule s({st.y});
  Tensor xl = s.cache_read(st.x, {st.y});
  s[xl].parallel(s[xl].axes()[0]);
  s[st.y].parallel(s[st.y].axes()[0]);
  auto f = lower(s, {st.x, st.w, st.y}, "stencil_copy");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::string ir = to_string(*f);
  EXPECT_NE(ir.find("allocate X.local[float32 * ((n + 2) * (m + 2))]"), std::string::npos) << ir;
  check_stencil(*f, 6, 7);
}

// LayerNorm's row sums accumulated in a local buffer of one element, at the output's row loop
// (`total`, now a copy of it, inlined into its reader).
TEST_F(CacheTest, CacheWriteOfARowReductionAtTheRowLoop) {
  Expr rows = var("rows");
  Tensor x = placeholder("X", {rows, Expr(40)});
  Axis k = reduce_axis(Expr(40), "k");
  Tensor total = compute("total", {rows}, [&](const std::vector<Expr>& i) { return sum(x(i[0], k->var), {k}); });
  Tensor y = compute("Y", {rows, Expr(40)}, [&](const std::vector<Expr>& i) { return x(i[0], i[1]) - total(i[0]); });
  Schedule s({y});
  Tensor tl = s.cache_write(total);
  s[tl].reduce_lanes(16);
  s[tl].compute_at(s[y], s[y].axes()[0]);
  s[total].compute_inline();
  s[y].parallel(s[y].axes()[0]);
  s[y].vectorize(s[y].axes()[1]);
  auto f = lower(s, {x, y}, "row_center");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::string ir = to_string(*f);
  EXPECT_NE(ir.find("allocate local total.local[float32 * 1]  // [1]"), std::string::npos) << ir;
  EXPECT_NE(ir.find("Y[i, j] = (X[i, j] - total.local[0])"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("allocate total"), std::string::npos) << ir;
  auto kern = build(*f);
  ASSERT_TRUE(kern.ok()) << kern.status().to_string();
  const int64_t r = 9;
  auto xv = pattern(r * 40, 8);
  std::vector<float> yv(r * 40, NAN);
  ASSERT_TRUE((*kern)->run({xv.data(), yv.data()}, {r}).ok());
  for (int64_t i = 0; i < r; ++i) {
    double t = 0;
    for (int64_t j = 0; j < 40; ++j) t += xv[i * 40 + j];
    for (int64_t j = 0; j < 40; ++j) ASSERT_NEAR(yv[i * 40 + j], xv[i * 40 + j] - t, 1e-5) << i << "," << j;
  }
}

std::string lower_error(const Schedule& s, const std::vector<Tensor>& args) {
  auto f = lower(s, args, "f");
  return f.ok() ? "lowered:\n" + to_string(*f) : f.status().to_string();
}

TEST_F(CacheTest, MisuseIsRefusedWithAMessage) {
  struct Case {
    const char* what;
    void (*apply)(Stencil& st, Schedule& s);
    const char* message;
  };
  const Case cases[] = {
      {"no readers", [](Stencil& st, Schedule& s) { s.cache_read(st.x, {}); },
       "cache_read('X'): no readers given"},
      {"a reader that does not read it",
       [](Stencil& st, Schedule& s) {
         Tensor xl = s.cache_read(st.x, {st.y});
         s.cache_read(st.w, {xl});
       },
       "cache_read('W'): 'X.local' does not read 'W'"},
      {"a tensor nothing reads", [](Stencil& st, Schedule& s) { s.cache_read(placeholder("Z", {Expr(3)}), {st.y}); },
       "cache_read('Z'): no stage of this schedule reads 'Z'"},
      {"a reader of another schedule", [](Stencil& st, Schedule& s) { s.cache_read(st.x, {Stencil().y}); },
       "cache_read('X'): reader 'Y' is not a compute of this schedule"},
      {"cache_write of a placeholder", [](Stencil& st, Schedule& s) { s.cache_write(st.x); },
       "cache_write('X'): a placeholder is an input; nothing in this schedule writes it"},
      {"cache_write after a primitive",
       [](Stencil& st, Schedule& s) {
         s[st.y].parallel(s[st.y].axes()[0]);
         s.cache_write(st.y);
       },
       "cache_write('Y'): 'Y' is scheduled already (Y.parallel(i)); call cache_write before other primitives"},
      {"a split region cache",
       [](Stencil& st, Schedule& s) {
         Tensor xl = s.cache_read(st.x, {st.y});
         s[xl].split(s[xl].axes()[1], 4);
         s[xl].compute_at(s[st.y], s[st.y].axes()[0]);
       },
       "compute_at('X.local', 'Y', i): a cache computed at a loop runs over its region; split and fuse of its "
       "loops are not supported"},
      {"a region without a constant bound",
       [](Stencil& st, Schedule& s) {
         Tensor xl = s.cache_read(st.x, {st.y});
         s[xl].compute_at(s[st.y], s[st.y].axes()[0]);  // the row loop: a whole row of m + 2 elements
       },
       "compute_at('X.local', 'Y', i): dim 1 of the region read per iteration spans (m + 2) elements, with no "
       "constant bound for a local buffer"},
      {"a region too large",
       [](Stencil& st, Schedule& s) {
         Tensor wl = s.cache_read(st.w, {st.y});
         Stage& y = s[st.y];
         auto [jo, ji] = y.split(y.axes()[1], 100000);
         s[wl].compute_at(s[st.y], jo);
         Tensor xl = s.cache_read(st.x, {st.y});
         s[xl].compute_at(s[st.y], jo);
       },
       "compute_at('X.local', 'Y', j.outer): the region read per iteration holds up to"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Stencil st;
    Schedule s({st.y});
    c.apply(st, s);
    const std::string msg = lower_error(s, {st.x, st.w, st.y});
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_EQ(msg.find("lowered:"), std::string::npos) << msg;
  }
}

// Another stage reading a cache computed at a loop would see only the region of one iteration.
TEST_F(CacheTest, ARegionCacheServesOneStageAlone) {
  Expr n = var("n");
  Tensor a = placeholder("A", {n});
  Tensor b = compute("B", {n}, [&](const std::vector<Expr>& i) { return a(i[0]) * Expr(2.0); });
  Tensor c = compute("C", {n}, [&](const std::vector<Expr>& i) { return b(i[0]) + Expr(1.0); });
  Tensor d = compute("D", {n}, [&](const std::vector<Expr>& i) { return b(i[0]) - c(i[0]); });
  Schedule s({d});
  Tensor bl = s.cache_read(b, {c, d});
  s[bl].compute_at(s[d], s[d].axes()[0]);
  const std::string msg = lower_error(s, {a, d});
  EXPECT_NE(msg.find("compute_at('B.local', 'D', i): 'C' reads the cache too"), std::string::npos) << msg;
}

}  // namespace
}  // namespace kiln::dsl
