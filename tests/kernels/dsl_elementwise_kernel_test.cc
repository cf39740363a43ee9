// Custom ops' compute expressions (ops/custom_expr.h) and their DSL kernels
// (kernels/cpu/dsl_elementwise.h): the parser's refusals, the activation match that lets a
// convolution epilogue take a custom op, and the generated kernels against formulas written
// here in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "../dsl/dsl_test_util.h"
#include "kernels/cpu/dsl_elementwise.h"
#include "ops/custom_expr.h"

namespace kiln {
namespace {

ops::CustomExpr parse(const std::string& text) {
  auto e = ops::parse_custom_expr(text);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? *e : ops::CustomExpr{};
}

std::string parse_error(const std::string& text) {
  auto e = ops::parse_custom_expr(text);
  EXPECT_FALSE(e.ok()) << text;
  return e.ok() ? "" : e.status().to_string();
}

TEST(CustomExprTest, ParsesAndPrintsBack) {
  const std::string text = "(select (lt x0 0) (mul 0.5 x1) (sub (softplus x0) beta))";
  ops::CustomExpr e = parse(text);
  EXPECT_EQ(ops::custom_expr_text(e), text);
  EXPECT_EQ(ops::custom_expr_inputs(e), 2);
  EXPECT_TRUE(ops::check_custom_expr_attrs(e, {"beta"}).ok());
  EXPECT_FALSE(ops::check_custom_expr_attrs(e, {}).ok());
  EXPECT_EQ(ops::custom_expr_text(ops::bind_custom_expr(e, {{"beta", 2.5}})),
            "(select (lt x0 0) (mul 0.5 x1) (sub (softplus x0) 2.5))");
}

TEST(CustomExprTest, RefusesMalformedText) {
  EXPECT_NE(parse_error("(frobnicate x0)").find("unknown function 'frobnicate'"), std::string::npos);
  EXPECT_NE(parse_error("(add x0)").find("takes 2 operand(s)"), std::string::npos);
  EXPECT_NE(parse_error("(add x0 x1 x2)").find("expected ')'"), std::string::npos);
  EXPECT_NE(parse_error("(lt x0 1)").find("only as select's condition"), std::string::npos);
  EXPECT_NE(parse_error("(select x0 1 2)").find("must be a comparison"), std::string::npos);
  EXPECT_NE(parse_error("x8").find("at most 8 inputs"), std::string::npos);
  EXPECT_NE(parse_error("x0 x1").find("after the expression"), std::string::npos);
  EXPECT_NE(parse_error("").find("ends early"), std::string::npos);
  EXPECT_NE(parse_error("(exp 1e999)").find("not a finite number"), std::string::npos);
  EXPECT_NE(parse_error("(exp x0;)").find("not an identifier"), std::string::npos);
  EXPECT_NE(parse_error("sigmoid").find("is a function"), std::string::npos);
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += "(neg ";
  deep += "x0" + std::string(100, ')');
  EXPECT_NE(parse_error(deep).find("nested deeper than 64"), std::string::npos);
}

TEST(CustomExprTest, RecognisesEpilogueActivations) {
  std::string name;
  std::vector<float> params;
  EXPECT_TRUE(ops::custom_expr_activation(parse("(mul x0 (sigmoid (mul 1.5 x0)))"), &name, &params));
  EXPECT_EQ(name, "Swish");
  EXPECT_EQ(params, std::vector<float>{1.5f});
  EXPECT_TRUE(ops::custom_expr_activation(parse("(mul (sigmoid (mul x0 2)) x0)"), &name, &params));
  EXPECT_EQ(params, std::vector<float>{2.0f});
  EXPECT_TRUE(ops::custom_expr_activation(parse("(mul x0 (sigmoid x0))"), &name, &params));
  EXPECT_EQ(params, std::vector<float>{1.0f});
  EXPECT_TRUE(ops::custom_expr_activation(parse("(relu x0)"), &name, &params));
  EXPECT_EQ(name, "Relu");
  // Not an activation of x0 alone, or not one the epilogue has.
  EXPECT_FALSE(ops::custom_expr_activation(parse("(mul x0 (sigmoid (mul 1.5 x1)))"), &name, &params));
  EXPECT_FALSE(ops::custom_expr_activation(parse("(mul x0 (tanh (softplus x0)))"), &name, &params));
  EXPECT_FALSE(ops::custom_expr_activation(parse("(relu x1)"), &name, &params));
}

struct Case {
  const char* text;
  int inputs;
  std::function<double(const double*)> formula;
};

TEST(DslElementwiseKernelTest, GeneratedKernelsMatchFormulas) {
  dsl::testing::use_temp_cache();
  const Case cases[] = {
      {"(mul x0 (sigmoid (mul 1.5 x0)))", 1, [](const double* x) { return x[0] / (1 + std::exp(-1.5 * x[0])); }},
      {"(mul x0 (tanh (softplus x0)))", 1, [](const double* x) { return x[0] * std::tanh(std::log1p(std::exp(x[0]))); }},
      {"(add x0 (mul 0.25 (sigmoid x1)))", 2, [](const double* x) { return x[0] + 0.25 / (1 + std::exp(-x[1])); }},
      {"(select (gt x0 x1) (sqrt (abs x0)) (neg (erf x1)))", 2,
       [](const double* x) { return x[0] > x[1] ? std::sqrt(std::fabs(x[0])) : -std::erf(x[1]); }},
      {"(div (max x0 x1) (add 2 (min (relu x0) (exp x1))))", 2,
       [](const double* x) { return std::max(x[0], x[1]) / (2 + std::min(std::max(x[0], 0.0), std::exp(x[1]))); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    auto k = kernels::dsl_tile_kernel(parse(c.text), c.inputs);
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    // Lengths around the vector width, and a tile.
    for (int64_t n : {1, 7, 16, 33, 1024}) {
      std::vector<std::vector<float>> in;
      for (int i = 0; i < c.inputs; ++i) {
        in.push_back(dsl::testing::pattern(static_cast<size_t>(n), static_cast<unsigned>(i + 7)));
        for (float& v : in.back()) v *= 6.0f;  // [-6, 6]
      }
      std::vector<float> y(static_cast<size_t>(n), -1.0f);
      std::vector<float*> bufs;
      for (auto& v : in) bufs.push_back(v.data());
      bufs.push_back(y.data());
      EXPECT_EQ(k->fn(bufs.data(), &n), 0);
      for (int64_t j = 0; j < n; ++j) {
        double x[2] = {in[0][static_cast<size_t>(j)], c.inputs > 1 ? in[1][static_cast<size_t>(j)] : 0.0};
        const double want = c.formula(x);
        ASSERT_NEAR(y[static_cast<size_t>(j)], want, 2e-6 + 2e-6 * std::fabs(want)) << "n " << n << " at " << j;
      }
    }
    // Built once per process: a second request is the same kernel.
    auto again = kernels::dsl_tile_kernel(parse(c.text), c.inputs);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->fn, k->fn);
  }
}

TEST(DslElementwiseKernelTest, RefusesUnboundAttributes) {
  auto k = kernels::dsl_tile_kernel(parse("(mul x0 beta)"), 1);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().to_string().find("not bound"), std::string::npos);
}

}  // namespace
}  // namespace kiln
