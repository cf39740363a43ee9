// The DSL examples (LayerNorm, Softmax, GELU-bias-add) against plain double-precision loops,
// with the default and the hand-written schedules, at static and run-time-bound shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/examples.h"
#include "dsl/printer.h"
#include "dsl/tuning.h"
#include "dsl_test_util.h"

namespace kiln::dsl {
namespace {

using testing::pattern;

std::vector<double> ref_layernorm(const std::vector<float>& x, const std::vector<float>& g,
                                  const std::vector<float>& b, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mean += x[r * cols + c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mean) * (x[r * cols + c] - mean);
    var /= cols;
    for (int64_t c = 0; c < cols; ++c)
      y[r * cols + c] = (x[r * cols + c] - mean) / std::sqrt(var + 1e-5) * g[c] + b[c];
  }
  return y;
}

std::vector<double> ref_softmax(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, static_cast<double>(x[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - m) / s;
  }
  return y;
}

std::vector<double> ref_gelu_bias(const std::vector<float>& x, const std::vector<float>& b, int64_t rows,
                                  int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double v = static_cast<double>(x[r * cols + c]) * 3 + b[c];
      y[r * cols + c] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    }
  return y;
}

enum class Sched { kDefault, kTuned };

std::shared_ptr<Kernel> build_example(const Example& e, Sched sched) {
  Schedule s({e.output});
  if (sched == Sched::kTuned) e.tuned_schedule(s, e);
  auto_schedule(s);
  auto f = lower(s, e.args, e.name);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return nullptr;
  auto k = build(*f);
  EXPECT_TRUE(k.ok()) << k.status().to_string();
  return k.ok() ? *k : nullptr;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
}

class ExamplesTest : public ::testing::TestWithParam<Sched> {
 protected:
  void SetUp() override { testing::use_temp_cache(); }
};

TEST_P(ExamplesTest, LayerNormMatchesReferenceAtSymbolicShapes) {
  Expr rows = var("rows"), cols = var("cols");
  auto k = build_example(layernorm_example(rows, cols), GetParam());
  ASSERT_TRUE(k);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 33}, {4, 768}}) {
    auto x = pattern(r * c, 1), g = pattern(c, 2), b = pattern(c, 3);
    std::vector<float> y(r * c, NAN);
    ASSERT_TRUE(k->run({x.data(), g.data(), b.data(), y.data()}, {r, c}).ok());
    expect_near(y, ref_layernorm(x, g, b, r, c), 2e-5);
  }
}

TEST_P(ExamplesTest, SoftmaxMatchesReferenceAtSymbolicShapes) {
  Expr rows = var("rows"), cols = var("cols");
  auto k = build_example(softmax_example(rows, cols), GetParam());
  ASSERT_TRUE(k);
  for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {2, 5}, {7, 128}, {3, 1000}}) {
    auto x = pattern(r * c, 4);
    for (float& v : x) v *= 20;  // logits far apart: the max subtraction matters
    std::vector<float> y(r * c, NAN);
    ASSERT_TRUE(k->run({x.data(), y.data()}, {r, c}).ok());
    expect_near(y, ref_softmax(x, r, c), 1e-5);
  }
}

TEST_P(ExamplesTest, GeluBiasAddMatchesReferenceAtAStaticShape) {
  auto k = build_example(gelu_bias_add_example(Expr(6), Expr(100)), GetParam());
  ASSERT_TRUE(k);
  auto x = pattern(600, 5), b = pattern(100, 6);
  std::vector<float> x3(x);
  for (float& v : x3) v *= 3;  // the reference scales the same way: v in [-4, 4]
  std::vector<float> y(600, NAN);
  ASSERT_TRUE(k->run({x3.data(), b.data(), y.data()}, {}).ok());
  expect_near(y, ref_gelu_bias(x, b, 6, 100), 2e-6);
}

// Points of the tuning space (dsl/tuning.h) that use reduction lanes (with tails: 33 and 1000
// columns against 32 to 128 lanes; partials combined by the halving tree, or, for 48 lanes, a
// loop), rows fused into one loop (its loads of per-row values hoisted out of the vector loops),
// split loops and 8-element vectors, row tiles (the reductions' caches at the tile loop, with
// tails: 5 and 3 rows against tiles of 2 and 4), against the same references.
TEST(TuningKnobsTest, LanesAndFusedRowsMatchTheReference) {
  testing::use_temp_cache();
  // Four points (each a compiler run per operator): every knob value class at least once.
  const ScheduleKnobs points[] = {{true, true, 0, 0, 64, 0}, {true, false, 0, 16, 32, 8}, {false, true, 4, 64, 128, 0},
                                  {false, false, 2, 0, 48, 8}, {true, false, 0, 0, 64, 0, 4}, {true, false, 0, 32, 0, 0, 2}};
  for (const ScheduleKnobs& k : points) {
    SCOPED_TRACE(knobs_text(k));
    for (const char* op : {"layernorm", "softmax"}) {
      SCOPED_TRACE(op);
      auto e = make_example(op, var("rows"), var("cols"));
      ASSERT_TRUE(e.ok());
      Schedule s({e->output});
      apply_knobs(s, *e, k);
      auto f = lower(s, e->args, e->name);
      ASSERT_TRUE(f.ok()) << f.status().to_string();
      if (k.lanes > 1) {
        EXPECT_NE(to_string(*f).find(std::to_string(k.lanes) + " lanes"), std::string::npos);
      }
      if (k.vec > 0) {
        EXPECT_NE(to_string(*f).find(std::to_string(k.vec) + "-element vectors"), std::string::npos);
      }
      if (k.row_tile > 1) {  // braces: an EXPECT is an if/else, and a bare one here warns
        EXPECT_NE(to_string(*f).find("allocate local " + std::string(op == std::string("layernorm") ? "sqdev" : "total") +
                                     ".local[float32 * " + std::to_string(k.row_tile) + "]"),
                  std::string::npos) << to_string(*f);
      }
      auto kernel = build(*f);
      ASSERT_TRUE(kernel.ok()) << kernel.status().to_string();
      for (auto [r, c] : {std::pair<int64_t, int64_t>{1, 1}, {5, 33}, {3, 1000}, {4, 768}}) {
        auto x = pattern(r * c, 7);
        std::vector<float> y(r * c, NAN);
        if (std::string(op) == "layernorm") {
          auto g = pattern(c, 8), b = pattern(c, 9);
          ASSERT_TRUE((*kernel)->run({x.data(), g.data(), b.data(), y.data()}, {r, c}).ok());
          expect_near(y, ref_layernorm(x, g, b, r, c), 2e-5);
        } else {
          for (float& v : x) v *= 20;
          ASSERT_TRUE((*kernel)->run({x.data(), y.data()}, {r, c}).ok());
          expect_near(y, ref_softmax(x, r, c), 1e-5);
        }
      }
    }
  }
}

// kiln tune records default_knobs when no point beats the default when raced: that point must
// be the default schedule itself, loop for loop, for each example (and an operator of one compute).
TEST(TuningKnobsTest, DefaultKnobsLowerToTheDefaultSchedule) {
  for (const char* op : {"layernorm", "softmax", "gelu_bias_add"}) {
    SCOPED_TRACE(op);
    auto e = make_example(op, var("rows"), var("cols"));
    ASSERT_TRUE(e.ok());
    Schedule by_knobs({e->output}), by_default({e->output});
    apply_knobs(by_knobs, *e, default_knobs(by_knobs.stages().size() > 1));
    auto_schedule(by_knobs);
    auto_schedule(by_default);
    auto a = lower(by_knobs, e->args, e->name), b = lower(by_default, e->args, e->name);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ(to_string(*a), to_string(*b));
  }
  // The point is in the space the search walks (so the database can hold it).
  const auto space = knob_space(true);
  EXPECT_NE(std::find(space.begin(), space.end(), default_knobs(true)), space.end());
  const auto one = knob_space(false);
  EXPECT_NE(std::find(one.begin(), one.end(), default_knobs(false)), one.end());
}

// The local phase's moves: one knob changed, or a row tile set with keep cleared (a tile needs
// keep off, so LayerNorm's hand point, fused with keep, reaches the tiles in one move).
TEST(TuningKnobsTest, NeighboursChangeOneKnobOrSetARowTileWithKeep) {
  const auto space = knob_space(true);
  const ScheduleKnobs hand = hand_knobs("layernorm");
  const auto n = knob_neighbours(hand, space);
  auto has = [&](const ScheduleKnobs& k) { return std::find(n.begin(), n.end(), k) != n.end(); };
  ScheduleKnobs lanes128 = hand, tile4 = hand, unkept = hand, two_knobs = hand;
  lanes128.lanes = 128;
  tile4.keep = false, tile4.row_tile = 4;
  unkept.keep = false;
  two_knobs.lanes = 128, two_knobs.col_split = 64;
  EXPECT_TRUE(has(lanes128));
  EXPECT_TRUE(has(tile4));
  EXPECT_TRUE(has(unkept));
  EXPECT_FALSE(has(two_knobs));
  EXPECT_FALSE(has(hand));
  for (const ScheduleKnobs& k : n) EXPECT_NE(std::find(space.begin(), space.end(), k), space.end()) << knobs_text(k);
}

INSTANTIATE_TEST_SUITE_P(Schedules, ExamplesTest, ::testing::Values(Sched::kDefault, Sched::kTuned),
                         [](const auto& info) { return info.param == Sched::kDefault ? "Default" : "Tuned"; });

}  // namespace
}  // namespace kiln::dsl
