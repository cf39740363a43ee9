// Must-fail: illegal schedules and out-of-bounds reads are rejected with a message.
#include <gtest/gtest.h>

#include "dsl/build_cache.h"
#include "dsl/printer.h"
#include "dsl_test_util.h"

namespace kiln::dsl {
namespace {

struct RowSum {
  Expr n = var("n");
  Tensor a = placeholder("A", {n, Expr(16)});
  Axis k = reduce_axis(Expr(16), "k");
  Tensor s = compute("S", {n}, [&](const std::vector<Expr>& i) { return sum(a(i[0], k->var), {k}); });
};

std::string lower_error(const Schedule& s, const std::vector<Tensor>& args) {
  auto f = lower(s, args, "f");
  if (f.ok()) return "lowered:\n" + to_string(*f);
  return f.status().to_string();
}

// Lowering must fail with a message containing `text`.
void expect_rejected(const Schedule& s, const std::vector<Tensor>& args, const std::string& text) {
  std::string msg = lower_error(s, args);
  EXPECT_NE(msg.find(text), std::string::npos) << msg;
  EXPECT_EQ(msg.find("lowered:"), std::string::npos) << msg;
}

// One primitive applied to a row sum, and what lowering must say about it.
struct RowSumCase {
  const char* what;
  void (*apply)(RowSum& r, Schedule& s);
  const char* message;
};

const RowSumCase kRowSumCases[] = {
    {"parallel reduction", [](RowSum& r, Schedule& s) { s[r.s].parallel(r.k); },
     "parallel(k) on 'S': k is a reduction loop; its iterations all update the same elements of 'S', "
     "so running them in parallel would race"},
    {"parallel split reduction",
     [](RowSum& r, Schedule& s) { s[r.s].parallel(s[r.s].split(r.k, 4).first); },
     "parallel(k.outer) on 'S': k.outer is a reduction loop"},
    {"vectorized reduction", [](RowSum& r, Schedule& s) { s[r.s].vectorize(r.k); },
     "vectorize(k) on 'S': k is a reduction loop"},
    {"vectorized outer loop", [](RowSum& r, Schedule& s) { s[r.s].vectorize(s[r.s].axes()[0]); },
     "only the innermost loop (k) can be vectorized"},
    {"unknown axis", [](RowSum& r, Schedule& s) { s[r.s].split(RowSum().k, 4); },
     "split(k) on 'S': not one of its loops (i, k)"},
    {"split by zero", [](RowSum& r, Schedule& s) { s[r.s].split(r.k, 0); }, "the factor must be >= 1"},
    {"fused reduction and data-parallel loops",
     [](RowSum& r, Schedule& s) { s[r.s].fuse(s[r.s].axes()[0], r.k); },
     "mixes a reduction loop and a data-parallel loop"},
    {"scheduled placeholder", [](RowSum& r, Schedule& s) { s[r.a].parallel(r.k); },
     "'A' is not a compute of this schedule"},
    {"one reduction lane", [](RowSum& r, Schedule& s) { s[r.s].reduce_lanes(1); },
     "reduce_lanes: 1 partial results for 'S', expected 2 to 1024"},
    {"vector width not a power of two", [](RowSum& r, Schedule& s) { s[r.s].vectorize(s[r.s].axes()[0], 3); },
     "vectorize: a vector of 3 elements on 'S', expected a power of two from 1 to 64"},
};

TEST(DslErrorTest, ReduceLanesOnANonReductionIsRejected) {
  Tensor a = placeholder("A", {Expr(8)});
  Tensor b = compute("B", {Expr(8)}, [&](const std::vector<Expr>& i) { return a(i[0]) * Expr(2.0); });
  Schedule s({b});
  s[b].reduce_lanes(16);
  expect_rejected(s, {a, b}, "reduce_lanes: 'B' is not a reduction");
}

TEST(DslErrorTest, IllegalPrimitivesAreRejectedWithAMessage) {
  for (const RowSumCase& c : kRowSumCases) {
    SCOPED_TRACE(c.what);
    RowSum r;
    Schedule s({r.s});
    c.apply(r, s);
    expect_rejected(s, {r.a, r.s}, c.message);
  }
}

TEST(DslErrorTest, NestedParallelLoopsAreRejected) {
  Tensor a = placeholder("A", {Expr(8), Expr(8)});
  Tensor b = compute("B", {Expr(8), Expr(8)}, [&](const std::vector<Expr>& i) { return a(i[0], i[1]); });
  Schedule s({b});
  s[b].parallel(b->axes[0]);
  s[b].parallel(b->axes[1]);
  expect_rejected(s, {a, b}, "nested inside parallel loop i");
}

TEST(DslErrorTest, FuseNeedsAdjacentLoops) {
  Tensor a = placeholder("A", {Expr(2), Expr(3), Expr(4)});
  Tensor b = compute("B", {Expr(2), Expr(3), Expr(4)}, [&](const std::vector<Expr>& i) { return a(i[0], i[1], i[2]); });
  Schedule s({b});
  s[b].fuse(b->axes[0], b->axes[2]);
  expect_rejected(s, {a, b}, "the loops must be adjacent");
}

TEST(DslErrorTest, InliningAReductionIsRejected) {
  RowSum r;
  Tensor t = compute("T", {r.n}, [&](const std::vector<Expr>& i) { return r.s(i[0]) * Expr(2.0); });
  Schedule s({t});
  s[r.s].compute_inline();
  expect_rejected(s, {r.a, t}, "compute_inline('S'): a reduction cannot be inlined");
}

TEST(DslErrorTest, MissingArgumentIsNamed) {
  RowSum r;
  Schedule s({r.s});
  expect_rejected(s, {r.s}, "placeholder 'A' is read by 'S' but is not an argument");
}

TEST(DslErrorTest, ReadPastTheEndIsFoundAtLowering) {
  Expr n = var("n");
  Tensor a = placeholder("A", {n});
  Tensor b = compute("B", {n}, [&](const std::vector<Expr>& i) { return a(i[0] + Expr(1)); });
  Schedule s({b});
  expect_rejected(s, {a, b}, "out of bounds (past the end): 'B' reads A[(i + 1)]: index 0 spans [1, n], dim 0 of 'A' is n");
}

TEST(DslErrorTest, ReadBelowZeroIsFoundAtLowering) {
  Tensor a = placeholder("A", {Expr(10)});
  Axis k = reduce_axis(Expr(3), "k");
  Tensor b = compute("B", {Expr(8)}, [&](const std::vector<Expr>& i) { return sum(a(i[0] + k->var - Expr(1)), {k}); });
  Schedule s({b});
  expect_rejected(s, {a, b}, "out of bounds (below 0)");
}

TEST(DslErrorTest, UndecidedBoundBecomesARunTimeCheck) {
  testing::use_temp_cache();
  Expr m = var("m"), n = var("n");
  Tensor a = placeholder("A", {m});
  Tensor b = compute("B", {n}, [&](const std::vector<Expr>& i) { return a(i[0]) * Expr(2.0); });
  Schedule s({b});
  auto f = lower(s, {a, b}, "copy");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_NE(to_string(*f).find("assert ((m - n) >= 0)"), std::string::npos) << to_string(*f);
  auto k = build(*f);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  std::vector<float> x(8, 1.0f), y(8);
  EXPECT_TRUE((*k)->run({x.data(), y.data()}, {8, 8}).ok());
  Status st = (*k)->run({x.data(), y.data()}, {4, 8});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("out of bounds: 'B' reads A[i]"), std::string::npos) << st.to_string();
  EXPECT_FALSE((*k)->run({x.data()}, {8, 8}).ok());
}

}  // namespace
}  // namespace kiln::dsl

namespace kiln::dsl {
namespace {

// P[i] = 2 A[i]; C[i, j] = P[i] + A[j]: P can be computed at C's row loop.
struct RowProducer {
  Tensor a = placeholder("A", {Expr(8)});
  Tensor p = compute("P", {Expr(8)}, [&](const std::vector<Expr>& i) { return a(i[0]) * Expr(2.0); });
  Tensor c = compute("C", {Expr(8), Expr(8)}, [&](const std::vector<Expr>& i) { return p(i[0]) + a(i[1]); });
};

TEST(DslErrorTest, ComputeAtIntoANonEnclosingLoopIsRejected) {
  RowProducer r, other;
  Schedule s({r.c});
  s[r.p].compute_at(s[r.c], other.c->axes[0]);  // a loop of another compute
  expect_rejected(s, {r.a, r.c}, "compute_at('P', 'C', i): i is not a loop of 'C' (its loops: i, j), so it does not enclose the reads of 'P'");
}

TEST(DslErrorTest, ComputeAtUnderAParallelLoopItDoesNotIndexIsARace) {
  RowProducer r;
  Schedule s({r.c});
  s[r.c].reorder({r.c->axes[1], r.c->axes[0]});  // j outside i
  s[r.c].parallel(r.c->axes[1]);
  s[r.p].compute_at(s[r.c], r.c->axes[0]);  // P[i] is not indexed by the parallel j
  expect_rejected(s, {r.a, r.c}, "inside parallel loop j every thread would write all of 'P'");
}

TEST(DslErrorTest, ComputeAtWithAnotherReaderOutsideIsRejected) {
  RowProducer r;
  Tensor d = compute("D", {Expr(8)}, [&](const std::vector<Expr>& i) { return r.p(i[0]) + r.c(i[0], i[0]); });
  Schedule s({d});
  s[r.p].compute_at(s[r.c], r.c->axes[0]);
  expect_rejected(s, {r.a, d}, "'D' also reads 'P' and is not computed at the same loop");
}

TEST(ComputeAtTest, FixesTheRowAndStaysCorrect) {
  testing::use_temp_cache();
  RowProducer r;
  Schedule s({r.c});
  s[r.c].parallel(r.c->axes[0]);
  s[r.p].compute_at(s[r.c], r.c->axes[0]);
  auto f = lower(s, {r.a, r.c}, "at");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::string ir = to_string(*f);
  EXPECT_NE(ir.find("parallel for (i, 0, 8) {\n    P[i] = (A[i] * 2f)\n    for (j, 0, 8)"), std::string::npos) << ir;
  auto k = build(*f);
  ASSERT_TRUE(k.ok()) << k.status().to_string();
  std::vector<float> a = {1, 2, 3, 4, 5, 6, 7, 8}, c(64);
  ASSERT_TRUE((*k)->run({a.data(), c.data()}, {}).ok());
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) ASSERT_EQ(c[i * 8 + j], 2 * a[i] + a[j]);
}

}  // namespace
}  // namespace kiln::dsl
