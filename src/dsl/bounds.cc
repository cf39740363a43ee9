// Linear-form simplification and interval bounds of index expressions.
#include "dsl/bounds.h"

#include <vector>

#include "dsl/printer.h"

namespace kiln::dsl {
namespace {

// sum(coef * atom) + constant; atoms keyed by their printed form.
struct Linear {
  std::map<std::string, std::pair<Expr, int64_t>> terms;
  int64_t constant = 0;

  void add(const Linear& o, int64_t scale) {
    constant += o.constant * scale;
    for (const auto& [k, t] : o.terms) {
      auto& slot = terms[k];
      if (!slot.first.defined()) slot.first = t.first;
      slot.second += t.second * scale;
    }
  }
};

Linear linear(const Expr& e);

Linear atom(const Expr& e) {
  Linear l;
  l.terms[to_string(e)] = {e, 1};
  return l;
}

Linear linear(const Expr& e) {
  Linear l;
  if (e->kind == ExprKind::kInt) {
    l.constant = e->ival;
    return l;
  }
  if (e->kind == ExprKind::kBinary && e.dtype() == DType::kI64) {
    BinOp op = static_cast<BinOp>(e->op);
    if (op == BinOp::kAdd || op == BinOp::kSub) {
      l = linear(e->args[0]);
      l.add(linear(e->args[1]), op == BinOp::kAdd ? 1 : -1);
      return l;
    }
    int64_t c;
    if (op == BinOp::kMul && (as_int(e->args[0], &c) || as_int(e->args[1], &c))) {
      const Expr& other = e->args[0]->kind == ExprKind::kInt ? e->args[1] : e->args[0];
      l.add(linear(other), c);
      return l;
    }
    // min/max of operands whose difference is constant are decided here.
    if (op == BinOp::kMin || op == BinOp::kMax) {
      Expr d = simplify(e->args[0] - e->args[1]);
      int64_t v;
      if (as_int(d, &v)) return linear((op == BinOp::kMin) == (v <= 0) ? e->args[0] : e->args[1]);
      return atom(make_binary(op, simplify(e->args[0]), simplify(e->args[1])));
    }
    if (op == BinOp::kDiv || op == BinOp::kMod)
      return atom(make_binary(op, simplify(e->args[0]), simplify(e->args[1])));
  }
  return atom(e);
}

// Positive terms first, then the negative ones subtracted: (n - 1), not (n + -1).
Expr from_linear(const Linear& l) {
  Expr out;
  for (int sign : {1, -1})
    for (const auto& [k, t] : l.terms) {
      if (t.second * sign <= 0) continue;
      int64_t c = t.second * sign;
      Expr term = c == 1 ? t.first : t.first * Expr(c);
      out = out.defined() ? (sign > 0 ? out + term : out - term) : (sign > 0 ? term : Expr(int64_t{0}) - term);
    }
  if (!out.defined()) return Expr(l.constant);
  if (l.constant > 0) return out + Expr(l.constant);
  if (l.constant < 0) return out - Expr(-l.constant);
  return out;
}

}  // namespace

Expr simplify(const Expr& e) {
  if (e.dtype() != DType::kI64) return e;
  return from_linear(linear(e));
}

Proof prove_nonnegative(const Expr& e) {
  Linear l = linear(e);
  bool all_pos = true, all_neg = true, has_terms = false;
  int64_t low = l.constant, high = l.constant;
  for (const auto& [k, t] : l.terms) {
    if (t.second == 0) continue;
    has_terms = true;
    // Only bare symbolic dims are known to be >= 1.
    if (t.first->kind != ExprKind::kVar) return Proof::kUnknown;
    if (t.second > 0) {
      all_neg = false;
      low += t.second;
    } else {
      all_pos = false;
      high += t.second;
    }
  }
  if (!has_terms) return l.constant >= 0 ? Proof::kTrue : Proof::kFalse;
  if (all_pos && low >= 0) return Proof::kTrue;
  if (all_neg && high < 0) return Proof::kFalse;
  return Proof::kUnknown;
}

Status bound(const Expr& e, const Ranges& ranges, Expr* lo, Expr* hi) {
  switch (e->kind) {
    case ExprKind::kInt:
      *lo = *hi = e;
      return ok_status();
    case ExprKind::kVar: {
      auto it = ranges.find(e.get());
      if (it == ranges.end()) {
        *lo = *hi = e;
      } else {
        *lo = it->second.first;
        *hi = it->second.second;
      }
      return ok_status();
    }
    case ExprKind::kBinary: {
      Expr alo, ahi, blo, bhi;
      KILN_RETURN_IF_ERROR(bound(e->args[0], ranges, &alo, &ahi));
      KILN_RETURN_IF_ERROR(bound(e->args[1], ranges, &blo, &bhi));
      int64_t c;
      switch (static_cast<BinOp>(e->op)) {
        case BinOp::kAdd: *lo = alo + blo; *hi = ahi + bhi; break;
        case BinOp::kSub: *lo = alo - bhi; *hi = ahi - blo; break;
        case BinOp::kMul:
          if (as_int(e->args[1], &c) || as_int(e->args[0], &c)) {
            const bool first_const = e->args[0]->kind == ExprKind::kInt;
            Expr l = first_const ? blo : alo, h = first_const ? bhi : ahi;
            *lo = c >= 0 ? l * Expr(c) : h * Expr(c);
            *hi = c >= 0 ? h * Expr(c) : l * Expr(c);
            break;
          }
          return unsupported("cannot bound the product %s", to_string(e).c_str());
        case BinOp::kDiv:
          if (as_int(e->args[1], &c) && c > 0) { *lo = alo / Expr(c); *hi = ahi / Expr(c); break; }
          return unsupported("cannot bound the division %s", to_string(e).c_str());
        case BinOp::kMod:
          if (as_int(e->args[1], &c) && c > 0) { *lo = Expr(int64_t{0}); *hi = Expr(c - 1); break; }
          return unsupported("cannot bound the remainder %s", to_string(e).c_str());
        case BinOp::kMin: *lo = min(alo, blo); *hi = min(ahi, bhi); break;
        case BinOp::kMax: *lo = max(alo, blo); *hi = max(ahi, bhi); break;
      }
      *lo = simplify(*lo);
      *hi = simplify(*hi);
      return ok_status();
    }
    case ExprKind::kSelect: {
      Expr tlo, thi, flo, fhi;
      KILN_RETURN_IF_ERROR(bound(e->args[1], ranges, &tlo, &thi));
      KILN_RETURN_IF_ERROR(bound(e->args[2], ranges, &flo, &fhi));
      *lo = simplify(min(tlo, flo));
      *hi = simplify(max(thi, fhi));
      return ok_status();
    }
    default:
      return unsupported("cannot bound the index %s", to_string(e).c_str());
  }
}

}  // namespace kiln::dsl
