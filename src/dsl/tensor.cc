// Placeholders, computes and reductions.
#include "dsl/tensor.h"

namespace kiln::dsl {
namespace {

Expr make_reduce(ReduceOp op, Expr source, std::vector<Axis> axes) {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::kReduce;
  n->dtype = DType::kF32;
  n->op = static_cast<int>(op);
  n->args = {source.dtype() == DType::kF32 ? source : cast(DType::kF32, source)};
  n->axes = std::move(axes);
  return Expr(n);
}

}  // namespace

Expr Tensor::operator()(std::vector<Expr> indices) const {
  auto n = std::make_shared<ExprNode>();
  n->kind = ExprKind::kLoad;
  n->dtype = DType::kF32;
  n->tensor = n_;
  n->args = std::move(indices);
  return Expr(n);
}

Tensor placeholder(const std::string& name, std::vector<Expr> shape) {
  auto t = std::make_shared<TensorNode>();
  t->name = name;
  t->shape = std::move(shape);
  return Tensor(t);
}

Tensor compute(const std::string& name, std::vector<Expr> shape,
               const std::function<Expr(const std::vector<Expr>&)>& fn) {
  auto t = std::make_shared<TensorNode>();
  t->name = name;
  t->shape = shape;
  t->placeholder = false;
  static const char* kNames[] = {"i", "j", "k", "l", "m", "n"};
  std::vector<Expr> vars;
  for (size_t d = 0; d < shape.size(); ++d) {
    std::string name = d < 6 ? kNames[d] : "i";
    if (d >= 6) name += std::to_string(d);
    Axis a = make_axis(name, shape[d], false);
    t->axes.push_back(a);
    vars.push_back(a->var);
  }
  t->body = fn(vars);
  return Tensor(t);
}

Axis make_axis(const std::string& name, Expr extent, bool reduce) {
  auto a = std::make_shared<AxisNode>();
  a->name = name;
  a->var = var(name);
  a->extent = extent;
  a->reduce = reduce;
  return a;
}

Axis reduce_axis(Expr extent, const std::string& name) { return make_axis(name, extent, true); }

Expr sum(Expr source, std::vector<Axis> axes) { return make_reduce(ReduceOp::kSum, source, axes); }
Expr max(Expr source, std::vector<Axis> axes) { return make_reduce(ReduceOp::kMax, source, axes); }
Expr min(Expr source, std::vector<Axis> axes) { return make_reduce(ReduceOp::kMin, source, axes); }

}  // namespace kiln::dsl
