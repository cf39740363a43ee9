// DSL tensors: placeholders (kernel inputs) and computes (an expression per output element).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dsl/expr.h"

namespace kiln::dsl {

// An iteration axis: a loop variable over [0, extent). Data-parallel axes come from a
// compute's shape; reduction axes from reduce_axis(). Split and fuse make new axes.
struct AxisNode {
  std::string name;
  Expr var;      // a kVar node
  Expr extent;   // an index expression (constant or symbolic)
  bool reduce = false;
};
using Axis = std::shared_ptr<AxisNode>;

struct TensorNode {
  std::string name;
  std::vector<Expr> shape;
  bool placeholder = true;
  std::vector<Axis> axes;  // compute: one data-parallel axis per dim
  Expr body;               // compute: the value at `axes` (may be a top-level kReduce)
};

// A handle to a tensor; t(i, j) reads element (i, j) in an expression.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorNode> n) : n_(std::move(n)) {}
  const TensorNode* operator->() const { return n_.get(); }
  const std::shared_ptr<TensorNode>& node() const { return n_; }
  size_t ndim() const { return n_->shape.size(); }
  Expr operator()(std::vector<Expr> indices) const;
  template <typename... I>
  Expr operator()(I... i) const { return (*this)(std::vector<Expr>{Expr(i)...}); }

 private:
  std::shared_ptr<TensorNode> n_;
};

// An input of `shape` (float32, dense, row-major).
Tensor placeholder(const std::string& name, std::vector<Expr> shape);

// An output: element `idx` is fn(idx). A reduction (sum/max/min) may only be the whole body.
Tensor compute(const std::string& name, std::vector<Expr> shape,
               const std::function<Expr(const std::vector<Expr>&)>& fn);

// An axis named `name` over [0, extent) with a fresh loop variable.
Axis make_axis(const std::string& name, Expr extent, bool reduce);

// A reduction axis over [0, extent).
Axis reduce_axis(Expr extent, const std::string& name);

Expr sum(Expr source, std::vector<Axis> axes);
Expr max(Expr source, std::vector<Axis> axes);
Expr min(Expr source, std::vector<Axis> axes);

}  // namespace kiln::dsl
