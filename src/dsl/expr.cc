// Expression constructors and operators, with constant folding of integer arithmetic.
#include "dsl/expr.h"

#include <algorithm>

namespace kiln::dsl {
namespace {

std::shared_ptr<ExprNode> new_node(ExprKind k, DType t) {
  auto n = std::make_shared<ExprNode>();
  n->kind = k;
  n->dtype = t;
  return n;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Float wins over integers: `x * 2` with x a float keeps float.
DType promote(const Expr& a, const Expr& b) {
  if (a.dtype() == DType::kF32 || b.dtype() == DType::kF32) return DType::kF32;
  return DType::kI64;
}

Expr as_type(DType t, Expr a) {
  if (a.dtype() == t) return a;
  if (t == DType::kF32 && a->kind == ExprKind::kInt) return Expr(static_cast<double>(a->ival));
  return cast(t, a);
}

Expr make_cmp(CmpOp op, Expr a, Expr b) {
  DType t = promote(a, b);
  auto n = new_node(ExprKind::kCompare, DType::kBool);
  n->op = static_cast<int>(op);
  n->args = {as_type(t, a), as_type(t, b)};
  return Expr(n);
}

Expr make_logic(LogicOp op, std::vector<Expr> args) {
  auto n = new_node(ExprKind::kLogical, DType::kBool);
  n->op = static_cast<int>(op);
  n->args = std::move(args);
  return Expr(n);
}

}  // namespace

Expr::Expr(int v) : Expr(static_cast<int64_t>(v)) {}
Expr::Expr(int64_t v) {
  auto n = new_node(ExprKind::kInt, DType::kI64);
  n->ival = v;
  n_ = n;
}
Expr::Expr(double v) {
  auto n = new_node(ExprKind::kFloat, DType::kF32);
  n->fval = v;
  n_ = n;
}

DType Expr::dtype() const { return n_->dtype; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kI64: return "int64";
    case DType::kBool: return "bool";
  }
  return "?";
}

bool as_int(const Expr& e, int64_t* v) {
  if (!e.defined() || e->kind != ExprKind::kInt) return false;
  *v = e->ival;
  return true;
}

Expr var(const std::string& name) {
  auto n = new_node(ExprKind::kVar, DType::kI64);
  n->name = name;
  return Expr(n);
}

Expr make_binary(BinOp op, Expr a, Expr b) {
  DType t = promote(a, b);
  a = as_type(t, a);
  b = as_type(t, b);
  int64_t x, y;
  bool ca = as_int(a, &x), cb = as_int(b, &y);
  if (ca && cb) {
    switch (op) {
      case BinOp::kAdd: return Expr(x + y);
      case BinOp::kSub: return Expr(x - y);
      case BinOp::kMul: return Expr(x * y);
      case BinOp::kDiv: if (y != 0) return Expr(floor_div(x, y)); break;
      case BinOp::kMod: if (y != 0) return Expr(x - floor_div(x, y) * y); break;
      case BinOp::kMin: return Expr(std::min(x, y));
      case BinOp::kMax: return Expr(std::max(x, y));
    }
  }
  // Identities that keep printed index arithmetic short.
  if (op == BinOp::kAdd && ca && x == 0) return b;
  if ((op == BinOp::kAdd || op == BinOp::kSub) && cb && y == 0) return a;
  if (op == BinOp::kMul && ((ca && x == 0) || (cb && y == 0))) return Expr(int64_t{0});
  if (op == BinOp::kMul && ca && x == 1) return b;
  if ((op == BinOp::kMul || op == BinOp::kDiv) && cb && y == 1) return a;
  if (op == BinOp::kMod && cb && y == 1) return Expr(int64_t{0});
  auto n = new_node(ExprKind::kBinary, t);
  n->op = static_cast<int>(op);
  n->args = {a, b};
  return Expr(n);
}

Expr operator+(Expr a, Expr b) { return make_binary(BinOp::kAdd, a, b); }
Expr operator-(Expr a, Expr b) { return make_binary(BinOp::kSub, a, b); }
Expr operator*(Expr a, Expr b) { return make_binary(BinOp::kMul, a, b); }
Expr operator/(Expr a, Expr b) { return make_binary(BinOp::kDiv, a, b); }
Expr operator%(Expr a, Expr b) { return make_binary(BinOp::kMod, a, b); }
Expr operator-(Expr a) {
  return a.dtype() == DType::kF32 ? make_binary(BinOp::kSub, Expr(0.0), a)
                                  : make_binary(BinOp::kSub, Expr(int64_t{0}), a);
}
Expr operator<(Expr a, Expr b) { return make_cmp(CmpOp::kLt, a, b); }
Expr operator<=(Expr a, Expr b) { return make_cmp(CmpOp::kLe, a, b); }
Expr operator>(Expr a, Expr b) { return make_cmp(CmpOp::kGt, a, b); }
Expr operator>=(Expr a, Expr b) { return make_cmp(CmpOp::kGe, a, b); }
Expr operator==(Expr a, Expr b) { return make_cmp(CmpOp::kEq, a, b); }
Expr operator!=(Expr a, Expr b) { return make_cmp(CmpOp::kNe, a, b); }
Expr operator&&(Expr a, Expr b) { return make_logic(LogicOp::kAnd, {a, b}); }
Expr operator||(Expr a, Expr b) { return make_logic(LogicOp::kOr, {a, b}); }
Expr operator!(Expr a) { return make_logic(LogicOp::kNot, {a}); }

Expr min(Expr a, Expr b) { return make_binary(BinOp::kMin, a, b); }
Expr max(Expr a, Expr b) { return make_binary(BinOp::kMax, a, b); }

Expr select(Expr cond, Expr then_value, Expr else_value) {
  DType t = promote(then_value, else_value);
  auto n = new_node(ExprKind::kSelect, t);
  n->args = {cond, as_type(t, then_value), as_type(t, else_value)};
  return Expr(n);
}

Expr cast(DType t, Expr a) {
  if (a.dtype() == t) return a;
  auto n = new_node(ExprKind::kCast, t);
  n->args = {a};
  return Expr(n);
}

Expr make_call(const std::string& name, Expr a) {
  auto n = new_node(ExprKind::kCall, DType::kF32);
  n->name = name;
  n->args = {as_type(DType::kF32, a)};
  return Expr(n);
}

Expr exp(Expr a) { return make_call("exp", a); }
Expr log(Expr a) { return make_call("log", a); }
Expr sqrt(Expr a) { return make_call("sqrt", a); }
Expr tanh(Expr a) { return make_call("tanh", a); }
Expr erf(Expr a) { return make_call("erf", a); }
Expr abs(Expr a) { return make_call("abs", a); }

}  // namespace kiln::dsl
