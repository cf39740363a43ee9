// DSL expressions: immutable nodes shared by pointer (index arithmetic, float math, loads, reductions).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::dsl {

// Element types. Indices and symbolic dims are kI64; tensor data is kF32.
enum class DType { kF32, kI64, kBool };

enum class ExprKind {
  kInt,      // ival
  kFloat,    // fval
  kVar,      // name: a loop variable or a symbolic dim (identity is the node)
  kBinary,   // op, args[0], args[1]
  kCompare,  // op, args[0], args[1]; dtype kBool
  kLogical,  // op (kAnd, kOr, kNot), args
  kSelect,   // args: cond, then, else
  kCast,     // dtype, args[0]
  kCall,     // name (exp, log, sqrt, tanh, erf, abs), args[0]
  kLoad,     // tensor, args = indices
  kReduce,   // reduce_op, args[0] = source, reduce_axes
};

enum class BinOp { kAdd, kSub, kMul, kDiv, kMod, kMin, kMax };
enum class CmpOp { kLt, kLe, kGt, kGe, kEq, kNe };
enum class LogicOp { kAnd, kOr, kNot };
enum class ReduceOp { kSum, kMax, kMin };

struct TensorNode;
struct AxisNode;
struct ExprNode;

// A handle to an immutable expression node; arithmetic builds new nodes.
class Expr {
 public:
  Expr() = default;
  explicit Expr(std::shared_ptr<const ExprNode> n) : n_(std::move(n)) {}
  Expr(int v);                                                     // NOLINT: an index constant
  Expr(int64_t v);                                                 // NOLINT: an index constant
  Expr(double v);                                                  // NOLINT: a float constant
  Expr(float v) : Expr(static_cast<double>(v)) {}                 // NOLINT: a float constant

  const ExprNode* get() const { return n_.get(); }
  const ExprNode* operator->() const { return n_.get(); }
  const std::shared_ptr<const ExprNode>& node() const { return n_; }
  bool defined() const { return n_ != nullptr; }
  DType dtype() const;

 private:
  std::shared_ptr<const ExprNode> n_;
};

struct ExprNode {
  ExprKind kind;
  DType dtype = DType::kF32;
  int op = 0;  // BinOp, CmpOp, LogicOp or ReduceOp by kind
  int64_t ival = 0;
  double fval = 0;
  std::string name;
  std::vector<Expr> args;
  std::shared_ptr<TensorNode> tensor;            // kLoad
  std::vector<std::shared_ptr<AxisNode>> axes;  // kReduce: the reduction axes
};

// A named integer variable: a symbolic dim (bound when the kernel runs) or a loop variable.
Expr var(const std::string& name);

Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator/(Expr a, Expr b);  // integers: floor division (operands are non-negative in loops)
Expr operator%(Expr a, Expr b);
Expr operator-(Expr a);
Expr operator<(Expr a, Expr b);
Expr operator<=(Expr a, Expr b);
Expr operator>(Expr a, Expr b);
Expr operator>=(Expr a, Expr b);
Expr operator==(Expr a, Expr b);
Expr operator!=(Expr a, Expr b);
Expr operator&&(Expr a, Expr b);
Expr operator||(Expr a, Expr b);
Expr operator!(Expr a);

Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
Expr select(Expr cond, Expr then_value, Expr else_value);
Expr cast(DType t, Expr a);
Expr exp(Expr a);
Expr log(Expr a);
Expr sqrt(Expr a);
Expr tanh(Expr a);
Expr erf(Expr a);
Expr abs(Expr a);

// Constructors used by the library itself.
Expr make_binary(BinOp op, Expr a, Expr b);
Expr make_call(const std::string& name, Expr a);
const char* dtype_name(DType t);

// The integer value of a constant, if `e` is one.
bool as_int(const Expr& e, int64_t* v);

}  // namespace kiln::dsl
