// Printing of expressions and loop IR.
// GCC 12 reports a false -Wrestrict on "literal" + std::string, which this file builds its
// text with (GCC bug 105329); warnings are errors in CI.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
#include "dsl/printer.h"

#include <cmath>
#include <cstdio>

#include "dsl/tensor.h"

namespace kiln::dsl {
namespace {

const char* bin_op(int op) {
  static const char* k[] = {"+", "-", "*", "/", "%", "min", "max"};
  return k[op];
}
const char* cmp_op(int op) {
  static const char* k[] = {"<", "<=", ">", ">=", "==", "!="};
  return k[op];
}
const char* reduce_name(int op) {
  static const char* k[] = {"sum", "max", "min"};
  return k[op];
}
const char* for_kind(ForKind k) {
  switch (k) {
    case ForKind::kSerial: return "for";
    case ForKind::kParallel: return "parallel for";
    case ForKind::kVectorized: return "vectorized for";
    case ForKind::kUnrolled: return "unrolled for";
  }
  return "for";
}

std::string indices(const std::vector<Expr>& idx) {
  std::string s;
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + to_string(idx[i]);
  return s;
}

}  // namespace

std::string to_string(const Expr& e) {
  if (!e.defined()) return "<undefined>";
  switch (e->kind) {
    case ExprKind::kInt: return std::to_string(e->ival);
    case ExprKind::kFloat: {
      if (std::isinf(e->fval)) return e->fval > 0 ? "inf" : "-inf";
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.9gf", e->fval);
      return buf;
    }
    case ExprKind::kVar: return e->name;
    case ExprKind::kBinary:
      if (e->op == static_cast<int>(BinOp::kMin) || e->op == static_cast<int>(BinOp::kMax))
        return std::string(bin_op(e->op)) + "(" + to_string(e->args[0]) + ", " + to_string(e->args[1]) + ")";
      return "(" + to_string(e->args[0]) + " " + bin_op(e->op) + " " + to_string(e->args[1]) + ")";
    case ExprKind::kCompare:
      return "(" + to_string(e->args[0]) + " " + cmp_op(e->op) + " " + to_string(e->args[1]) + ")";
    case ExprKind::kLogical:
      if (e->op == static_cast<int>(LogicOp::kNot)) return "!" + to_string(e->args[0]);
      return "(" + to_string(e->args[0]) + (e->op == static_cast<int>(LogicOp::kAnd) ? " && " : " || ") +
             to_string(e->args[1]) + ")";
    case ExprKind::kSelect:
      return "select(" + to_string(e->args[0]) + ", " + to_string(e->args[1]) + ", " +
             to_string(e->args[2]) + ")";
    case ExprKind::kCast: return std::string(dtype_name(e->dtype)) + "(" + to_string(e->args[0]) + ")";
    case ExprKind::kCall: return e->name + "(" + to_string(e->args[0]) + ")";
    case ExprKind::kLoad: return e->tensor->name + "[" + indices(e->args) + "]";
    case ExprKind::kReduce: {
      std::string axes;
      for (size_t i = 0; i < e->axes.size(); ++i) axes += (i ? ", " : "") + e->axes[i]->name;
      return std::string(reduce_name(e->op)) + "(" + to_string(e->args[0]) + ", axis=[" + axes + "])";
    }
  }
  return "?";
}

std::string to_string(const StmtPtr& s, int indent) {
  std::string pad(indent * 2, ' ');
  std::string out;
  switch (s->kind) {
    case StmtKind::kFor:
      out = pad + for_kind(s->for_kind) + " (" + s->name + ", 0, " + to_string(s->a) + ") {" +
            (s->reduce_loop ? "  // reduction" : "") +
             (s->reduce_lanes > 1 ? ", " + std::to_string(s->reduce_lanes) + " lanes" : "") +
            (s->simd_width > 0 ? "  // " + std::to_string(s->simd_width) + "-element vectors" : "") + "\n";
      for (const StmtPtr& b : s->body) out += to_string(b, indent + 1);
      return out + pad + "}\n";
    case StmtKind::kSeq:
      for (const StmtPtr& b : s->body) out += to_string(b, indent);
      return out;
    case StmtKind::kStore:
      return pad + s->tensor->name + "[" + indices(s->indices) + "] = " + to_string(s->value) + "\n";
    case StmtKind::kLetFloat: return pad + "float32 " + s->name + " = " + to_string(s->value) + "\n";
    case StmtKind::kAssign: return pad + s->name + " = " + to_string(s->value) + "\n";
    case StmtKind::kIf:
      out = pad + "if " + to_string(s->a) + " {\n";
      for (const StmtPtr& b : s->body) out += to_string(b, indent + 1);
      return out + pad + "}\n";
    case StmtKind::kAllocate:
      if (s->local) return pad + "allocate local " + s->name + "[float32 * " + to_string(s->a) + "]  // [" +
                           indices(s->tensor->shape) + "]\n";
      return pad + "allocate " + s->name + "[float32 * " + to_string(s->a) + "]\n";
    case StmtKind::kCheck:
      return pad + "assert " + to_string(s->a) + ", \"" + s->name + "\"\n";
  }
  return out;
}

}  // namespace kiln::dsl
