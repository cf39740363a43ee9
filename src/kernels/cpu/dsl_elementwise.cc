// Custom element-wise ops as DSL kernels: expression -> dsl compute -> lower -> build (cached).
#include "kernels/cpu/dsl_elementwise.h"

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dsl/expr.h"
#include "dsl/lower.h"
#include "dsl/schedule.h"
#include "dsl/tensor.h"

namespace kiln::kernels {
namespace {

// `i`: the output element's index, which every input is read at (inputs of the output's shape).
dsl::Expr to_dsl(const ops::CustomExpr& e, const std::vector<dsl::Tensor>& xs, const std::vector<dsl::Expr>& i) {
  using K = ops::CustomExpr::Kind;
  switch (e.kind) {
    case K::kInput: return xs[static_cast<size_t>(e.input)](i);
    case K::kConst: return dsl::Expr(e.value);
    case K::kAttr: return dsl::Expr(0.0);  // bound before: checked by the caller
    case K::kCall: break;
  }
  const std::string& f = e.name;
  std::vector<dsl::Expr> a;
  for (const ops::CustomExpr& x : e.args) a.push_back(to_dsl(x, xs, i));
  const dsl::Expr zero(0.0), one(1.0);
  if (f == "neg") return zero - a[0];
  if (f == "exp") return dsl::exp(a[0]);
  if (f == "log") return dsl::log(a[0]);
  if (f == "sqrt") return dsl::sqrt(a[0]);
  if (f == "tanh") return dsl::tanh(a[0]);
  if (f == "erf") return dsl::erf(a[0]);
  if (f == "abs") return dsl::abs(a[0]);
  if (f == "relu") return dsl::max(a[0], zero);
  if (f == "sigmoid") return one / (one + dsl::exp(zero - a[0]));
  if (f == "softplus") return dsl::max(a[0], zero) + dsl::log(one + dsl::exp(zero - dsl::abs(a[0])));
  if (f == "add") return a[0] + a[1];
  if (f == "sub") return a[0] - a[1];
  if (f == "mul") return a[0] * a[1];
  if (f == "div") return a[0] / a[1];
  if (f == "min") return dsl::min(a[0], a[1]);
  if (f == "max") return dsl::max(a[0], a[1]);
  if (f == "lt") return a[0] < a[1];
  if (f == "le") return a[0] <= a[1];
  if (f == "gt") return a[0] > a[1];
  if (f == "ge") return a[0] >= a[1];
  if (f == "eq") return a[0] == a[1];
  if (f == "ne") return a[0] != a[1];
  if (f == "select") return dsl::select(a[0], a[1], a[2]);
  return zero;
}

bool has_attr(const ops::CustomExpr& e) {
  if (e.kind == ops::CustomExpr::Kind::kAttr) return true;
  for (const ops::CustomExpr& a : e.args)
    if (has_attr(a)) return true;
  return false;
}

Status check_expr(const ops::CustomExpr& e, int num_inputs) {
  if (has_attr(e)) return invalid_argument("custom op compute %s: attributes are not bound", ops::custom_expr_text(e).c_str());
  if (ops::custom_expr_inputs(e) > num_inputs || num_inputs < 1)
    return invalid_argument("custom op compute %s reads more than its %d inputs", ops::custom_expr_text(e).c_str(),
                            num_inputs);
  return ok_status();
}

// Inputs X0.. and the output Y, all of `shape`.
std::pair<std::vector<dsl::Tensor>, dsl::Tensor> compute_expr(const ops::CustomExpr& e, int num_inputs,
                                                              const std::vector<dsl::Expr>& shape) {
  std::vector<dsl::Tensor> xs;
  for (int k = 0; k < num_inputs; ++k) xs.push_back(dsl::placeholder("X" + std::to_string(k), shape));
  dsl::Tensor y = dsl::compute("Y", shape, [&](const std::vector<dsl::Expr>& idx) { return to_dsl(e, xs, idx); });
  return {xs, y};
}

Expected<dsl::LoweredFunc> lower_expr(const ops::CustomExpr& e, int num_inputs, int64_t split) {
  KILN_RETURN_IF_ERROR(check_expr(e, num_inputs));
  auto [xs, y] = compute_expr(e, num_inputs, {dsl::var("n")});
  // One vectorised loop (the caller runs tiles in parallel), or split with its inner part
  // vectorised when tuned.
  dsl::Schedule s({y});
  const dsl::Axis loop = s[y].leaf_axes()[0];
  if (split > 1) {
    s[y].vectorize(s[y].split(loop, split).second);
  } else {
    s[y].vectorize(loop);
  }
  std::vector<dsl::Tensor> args = xs;
  args.push_back(y);
  return dsl::lower(s, args, "custom_elementwise");
}

}  // namespace

Expected<dsl::Example> dsl_elementwise_example(const ops::CustomExpr& e, int num_inputs, dsl::Expr rows,
                                                dsl::Expr cols) {
  KILN_RETURN_IF_ERROR(check_expr(e, num_inputs));
  auto [xs, y] = compute_expr(e, num_inputs, {rows, cols});
  dsl::Example ex{dsl_tile_signature(e, num_inputs), xs, y, nullptr};
  ex.args.push_back(y);
  // Its hand schedule is the default's loops: rows parallel, columns vectorized.
  ex.tuned_schedule = [](dsl::Schedule&, const dsl::Example&) {};
  return ex;
}

std::string dsl_tile_signature(const ops::CustomExpr& e, int num_inputs) {
  return "elementwise/" + std::to_string(num_inputs) + " " + ops::custom_expr_text(e);
}

Expected<DslTileKernel> dsl_tile_kernel(const ops::CustomExpr& e, int num_inputs, int64_t split) {
  static std::mutex mu;
  static std::map<std::string, DslTileKernel> built;
  if (split < 0 || split > kDslTileElements) return invalid_argument("dsl_split %lld: expected 0 to %lld",
                                                                     static_cast<long long>(split),
                                                                     static_cast<long long>(kDslTileElements));
  const std::string key = dsl_tile_signature(e, num_inputs) + " split " + std::to_string(split);
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = built.find(key); it != built.end()) return it->second;
  KILN_ASSIGN_OR_RETURN(dsl::LoweredFunc f, lower_expr(e, num_inputs, split), "custom op compute %s", key.c_str());
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<dsl::Kernel> k, dsl::build(f), "custom op compute %s", key.c_str());
  DslTileKernel t;
  t.fn = k->entry();
  t.kernel = std::move(k);
  built[key] = t;
  return t;
}

Expected<std::string> dsl_tile_kernel_ir(const ops::CustomExpr& e, int num_inputs, int64_t split) {
  KILN_ASSIGN_OR_RETURN(dsl::LoweredFunc f, lower_expr(e, num_inputs, split));
  return dsl::to_string(f);
}

}  // namespace kiln::kernels
