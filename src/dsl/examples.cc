// LayerNorm, Softmax and GELU-bias-add in the DSL, with their hand-written schedules.
#include "dsl/examples.h"

#include <functional>
#include <set>

namespace kiln::dsl {
namespace {

// Hand schedule shared by the examples: reductions parallel over rows, element-wise outputs
// parallel over rows and vectorized along the row, and the intermediates named `keep`
// computed once into buffers instead of being inlined (recomputed) where they are read.
void rows_schedule(Schedule& s, const std::set<std::string>& keep) {
  for (Stage& st : s.stages()) {
    const bool reduction = !st.reduce_axes().empty();
    if (!reduction && !s.is_output(st.tensor().get()) && !keep.count(st.tensor()->name)) {
      st.compute_inline();
      continue;
    }
    const auto& ax = st.axes();
    st.parallel(ax[0]);
    if (!reduction && ax.size() == 2) st.vectorize(ax[1]);
  }
}

// Hand schedule for row-wise operators: every other stage is computed inside the output's
// parallel row loop (compute_at), so a row is read while it is still in cache and there is one
// parallel region; the column loops of the output and of 2-D intermediates are vectorized.
void fused_rows_schedule(Schedule& s, const Tensor& out) {
  Stage& o = s[out];
  const Axis row = o.axes()[0];
  for (Stage& st : s.stages()) {
    if (st.tensor() == out.node()) continue;
    st.compute_at(o, row);
    if (!st.reduce_axes().empty()) st.reduce_lanes(64);  // four AVX-512 accumulators
    if (st.reduce_axes().empty() && st.axes().size() == 2) st.vectorize(st.axes()[1]);
  }
  o.parallel(row);
  if (o.axes().size() == 2) o.vectorize(o.axes()[1]);
}

}  // namespace

Example layernorm_example(Expr rows, Expr cols, float eps) {
  Tensor x = placeholder("X", {rows, cols});
  Tensor gamma = placeholder("gamma", {cols});
  Tensor beta = placeholder("beta", {cols});
  Expr n = cast(DType::kF32, cols);
  Axis k1 = reduce_axis(cols, "k");
  Tensor total = compute("total", {rows}, [&](const std::vector<Expr>& i) { return sum(x(i[0], k1->var), {k1}); });
  Tensor mean = compute("mean", {rows}, [&](const std::vector<Expr>& i) { return total(i[0]) / n; });
  Axis k2 = reduce_axis(cols, "k");
  Tensor sq = compute("sqdev", {rows}, [&](const std::vector<Expr>& i) {
    Expr d = x(i[0], k2->var) - mean(i[0]);
    return sum(d * d, {k2});
  });
  Tensor rstd = compute("rstd", {rows}, [&](const std::vector<Expr>& i) {
    return Expr(1.0) / sqrt(sq(i[0]) / n + Expr(static_cast<double>(eps)));
  });
  Tensor y = compute("Y", {rows, cols}, [&](const std::vector<Expr>& i) {
    return (x(i[0], i[1]) - mean(i[0])) * rstd(i[0]) * gamma(i[1]) + beta(i[1]);
  });
  Example e{"layernorm", {x, gamma, beta, y}, y, nullptr};
  e.tuned_schedule = [](Schedule& s, const Example& ex) { fused_rows_schedule(s, ex.output); };
  return e;
}

Example softmax_example(Expr rows, Expr cols) {
  Tensor x = placeholder("X", {rows, cols});
  Axis k1 = reduce_axis(cols, "k");
  Tensor mx = compute("rowmax", {rows}, [&](const std::vector<Expr>& i) { return max(x(i[0], k1->var), {k1}); });
  Tensor ex = compute("expd", {rows, cols}, [&](const std::vector<Expr>& i) { return exp(x(i[0], i[1]) - mx(i[0])); });
  Axis k2 = reduce_axis(cols, "k");
  Tensor total = compute("total", {rows}, [&](const std::vector<Expr>& i) { return sum(ex(i[0], k2->var), {k2}); });
  Tensor inv = compute("inv", {rows}, [&](const std::vector<Expr>& i) { return Expr(1.0) / total(i[0]); });
  Tensor y = compute("Y", {rows, cols}, [&](const std::vector<Expr>& i) { return ex(i[0], i[1]) * inv(i[0]); });
  Example e{"softmax", {x, y}, y, nullptr};
  // A region per stage, written when fused_rows_schedule left the exp loop scalar in GCC 12
  // (a load of rowmax[i] in the vector loop, now hoisted by codegen_c); kiln tune compares both.
  e.tuned_schedule = [](Schedule& s, const Example&) { rows_schedule(s, {"expd", "inv"}); };
  return e;
}

Example gelu_bias_add_example(Expr rows, Expr cols) {
  Tensor x = placeholder("X", {rows, cols});
  Tensor b = placeholder("B", {cols});
  Tensor y = compute("Y", {rows, cols}, [&](const std::vector<Expr>& i) {
    Expr v = x(i[0], i[1]) + b(i[1]);
    return Expr(0.5) * v * (Expr(1.0) + erf(v * Expr(0.7071067811865476)));
  });
  Example e{"gelu_bias_add", {x, b, y}, y, nullptr};
  // Rows fused with nothing: the row loop is parallel and the column loop vectorized.
  e.tuned_schedule = [](Schedule& s, const Example&) { rows_schedule(s, {}); };
  return e;
}

Expected<Example> make_example(const std::string& name, Expr rows, Expr cols) {
  if (name == "layernorm") return layernorm_example(rows, cols);
  if (name == "softmax") return softmax_example(rows, cols);
  if (name == "gelu_bias_add") return gelu_bias_add_example(rows, cols);
  return not_found("DSL example '%s': there are layernorm, softmax, gelu_bias_add", name.c_str());
}

}  // namespace kiln::dsl
