// kiln._kiln._dsl, the native half of kiln.dsl (python/kiln/dsl.py, docs/dsl.md): the
// compute/schedule DSL of src/dsl for Python. Expressions take Python's operators, tensors
// are indexed with [], schedules raise at the primitive that is illegal, lowering returns
// the printable loop IR, and built kernels run on NumPy arrays in place (no copies). The
// Python module adds TVM te's spellings on top (max/min as reductions, tile, custom_op).
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "dsl/auto_schedule.h"
#include "dsl/build_cache.h"
#include "dsl/lower.h"
#include "dsl/printer.h"
#include "dsl/schedule.h"
#include "python/src/binders.h"
#include "python/src/errors.h"

namespace kiln::python {
namespace {

using dsl::Axis;
using dsl::AxisNode;
using dsl::DType;
using dsl::Expr;
using dsl::ExprKind;
using dsl::Tensor;

[[noreturn]] void invalid(const std::string& message) { throw_error(KILN_ERROR_INVALID_PARAM, message); }

std::string type_name(py::handle h) { return py::str(py::type::of(h).attr("__name__")); }

// A Python value as an expression: an Expr, an IterVar (its loop variable), an int (an index
// constant) or a float (a float32 constant); NumPy scalars count as their Python kind.
Expr to_expr(py::handle h) {
  if (py::isinstance<Expr>(h)) return py::cast<Expr>(h);
  if (py::isinstance<AxisNode>(h)) return py::cast<Axis>(h)->var;
  if (PyBool_Check(h.ptr())) invalid("a bool is not an expression (use 1 or 0, or a comparison)");
  if (PyIndex_Check(h.ptr())) return Expr(py::cast<int64_t>(py::reinterpret_borrow<py::object>(h)));
  if (PyFloat_Check(h.ptr()) || py::hasattr(h, "__float__")) return Expr(py::cast<double>(h));
  invalid("cannot use a " + type_name(h) + " in a DSL expression (expected an Expr, an IterVar, an int or a float)");
}

std::vector<Expr> to_exprs(py::handle seq, const char* what) {
  if (!py::isinstance<py::sequence>(seq) || py::isinstance<py::str>(seq))
    invalid(std::string(what) + " must be a list or tuple, got a " + type_name(seq));
  std::vector<Expr> out;
  for (py::handle item : seq) out.push_back(to_expr(item));
  return out;
}

DType dtype_from_name(const std::string& name) {
  if (name == "float32") return DType::kF32;
  if (name == "int64") return DType::kI64;
  if (name == "bool") return DType::kBool;
  invalid("dtype '" + name + "': the DSL has float32, int64 and bool");
}

Expr as_f32(const Expr& e, const char* what) {
  if (e.dtype() == DType::kBool) invalid(std::string(what) + " is a condition (bool); use select(cond, a, b)");
  return e.dtype() == DType::kF32 ? e : dsl::cast(DType::kF32, e);
}

// Python's operators on a class whose value is an expression (Expr, and IterVar through its
// variable). `==` and `!=` build comparisons only on Expr: an IterVar keeps identity equality
// (and its hash), so axes can be kept in lists and dicts.
template <typename Class, typename ToExpr>
void bind_operators(Class& cls, ToExpr self_expr, bool equality) {
  using T = typename Class::type;
  auto bin = [&](const char* name, Expr (*op)(Expr, Expr), bool reflected) {
    if (reflected)
      cls.def(name, [self_expr, op](const T& a, py::object b) { return op(to_expr(b), self_expr(a)); });
    else
      cls.def(name, [self_expr, op](const T& a, py::object b) { return op(self_expr(a), to_expr(b)); });
  };
  using E = Expr;
  bin("__add__", [](E a, E b) { return a + b; }, false);
  bin("__radd__", [](E a, E b) { return a + b; }, true);
  bin("__sub__", [](E a, E b) { return a - b; }, false);
  bin("__rsub__", [](E a, E b) { return a - b; }, true);
  bin("__mul__", [](E a, E b) { return a * b; }, false);
  bin("__rmul__", [](E a, E b) { return a * b; }, true);
  // `/` divides (floor division when both sides are integers, as the DSL's index arithmetic);
  // `//` is the same on integers.
  bin("__truediv__", [](E a, E b) { return a / b; }, false);
  bin("__rtruediv__", [](E a, E b) { return a / b; }, true);
  bin("__floordiv__", [](E a, E b) { return a / b; }, false);
  bin("__rfloordiv__", [](E a, E b) { return a / b; }, true);
  bin("__mod__", [](E a, E b) { return a % b; }, false);
  bin("__rmod__", [](E a, E b) { return a % b; }, true);
  bin("__lt__", [](E a, E b) { return a < b; }, false);
  bin("__le__", [](E a, E b) { return a <= b; }, false);
  bin("__gt__", [](E a, E b) { return a > b; }, false);
  bin("__ge__", [](E a, E b) { return a >= b; }, false);
  if (equality) {
    bin("__eq__", [](E a, E b) { return a == b; }, false);
    bin("__ne__", [](E a, E b) { return a != b; }, false);
  }
  cls.def("__neg__", [self_expr](const T& a) { return -self_expr(a); });
  cls.def("__pos__", [self_expr](const T& a) { return self_expr(a); });
  // `if x > 0:` or `a < b < c` inside a compute would test the Python object, not the data.
  cls.def("__bool__", [](const T&) -> bool {
    throw py::type_error("a DSL expression has no truth value: use select(cond, a, b), logical_and/or/not");
  });
}

std::string repr_expr(const Expr& e) { return "Expr(" + dsl::to_string(e) + ")"; }

// ---- tensors -----------------------------------------------------------------------------

py::object dim_object(const Expr& e) {
  int64_t v;
  if (dsl::as_int(e, &v)) return py::int_(v);
  return py::cast(e);
}

std::vector<Expr> shape_arg(py::handle shape, const char* what) {
  std::vector<Expr> dims = to_exprs(shape, what);
  for (size_t d = 0; d < dims.size(); ++d) {
    int64_t v;
    if (dims[d].dtype() != DType::kI64)
      invalid(std::string(what) + "[" + std::to_string(d) + "] is " + dsl::dtype_name(dims[d].dtype()) +
              ", a dim must be an integer (an int or a var)");
    if (dsl::as_int(dims[d], &v) && v < 1)
      invalid(std::string(what) + "[" + std::to_string(d) + "] is " + std::to_string(v) + ", a dim must be >= 1");
  }
  return dims;
}

Expr load(const Tensor& t, py::object index) {
  std::vector<Expr> idx = py::isinstance<py::tuple>(index) || py::isinstance<py::list>(index)
                              ? to_exprs(index, "an index")
                              : std::vector<Expr>{to_expr(index)};
  if (idx.size() != t.ndim())
    invalid("'" + t->name + "' has " + std::to_string(t.ndim()) + " dim(s), indexed with " +
            std::to_string(idx.size()) + " index(es)");
  for (size_t d = 0; d < idx.size(); ++d)
    if (idx[d].dtype() != DType::kI64)
      invalid("'" + t->name + "' indexed with a " + dsl::dtype_name(idx[d].dtype()) + " at dim " + std::to_string(d) +
              ": indices are integer expressions");
  return t(idx);
}

// The reduction axes of a compute (its body's, when the body is a reduction).
std::vector<Axis> reduce_axes_of(const Tensor& t) {
  if (t->placeholder || !t->body.defined() || t->body->kind != ExprKind::kReduce) return {};
  return t->body->axes;
}

Tensor make_compute(py::handle shape, const py::function& fcompute, const std::string& name) {
  std::vector<Expr> dims = shape_arg(shape, "compute's shape");
  std::exception_ptr raised;
  Tensor t = dsl::compute(name, dims, [&](const std::vector<Expr>& vars) -> Expr {
    // Exceptions do not cross kiln's C++ (it does not throw): keep the Python one, raise after.
    try {
      py::tuple args(vars.size());
      for (size_t i = 0; i < vars.size(); ++i) args[i] = py::cast(vars[i]);
      return as_f32(to_expr(fcompute(*args)), ("the body of compute '" + name + "'").c_str());
    } catch (...) {
      raised = std::current_exception();
      return Expr(0.0);
    }
  });
  if (raised) std::rethrow_exception(raised);
  return t;
}

Axis make_reduce_axis(py::handle dom, const std::string& name) {
  Expr extent;
  if (py::isinstance<py::tuple>(dom) || py::isinstance<py::list>(dom)) {
    std::vector<Expr> range = to_exprs(dom, "reduce_axis's range");
    int64_t start;
    if (range.size() != 2 || !dsl::as_int(range[0], &start) || start != 0)
      invalid("reduce_axis '" + name + "': a range is (0, extent); the DSL's loops start at 0");
    extent = range[1];
  } else {
    extent = to_expr(dom);
  }
  int64_t v;
  if (extent.dtype() != DType::kI64) invalid("reduce_axis '" + name + "': its extent must be an integer");
  if (dsl::as_int(extent, &v) && v < 1) invalid("reduce_axis '" + name + "': extent " + std::to_string(v) + " < 1");
  return dsl::reduce_axis(extent, name);
}

Expr reduce(dsl::ReduceOp op, py::handle source, py::handle axis) {
  std::vector<Axis> axes;
  if (py::isinstance<AxisNode>(axis)) {
    axes.push_back(py::cast<Axis>(axis));
  } else if (py::isinstance<py::sequence>(axis)) {
    for (py::handle a : axis) {
      if (!py::isinstance<AxisNode>(a)) invalid("a reduction's axis must be IterVars from reduce_axis");
      axes.push_back(py::cast<Axis>(a));
    }
  } else {
    invalid("a reduction's axis must be an IterVar from reduce_axis or a list of them, got a " + type_name(axis));
  }
  if (axes.empty()) invalid("a reduction needs at least one axis");
  for (const Axis& a : axes)
    if (!a->reduce) invalid("axis '" + a->name + "' is a data-parallel axis; reduce over axes from reduce_axis");
  Expr e = as_f32(to_expr(source), "a reduction's source");
  switch (op) {
    case dsl::ReduceOp::kSum: return dsl::sum(e, axes);
    case dsl::ReduceOp::kMax: return dsl::max(e, axes);
    case dsl::ReduceOp::kMin: return dsl::min(e, axes);
  }
  return e;
}

// ---- schedules ---------------------------------------------------------------------------

// A stage as Python holds it: its schedule (kept alive) and its tensor, looked up per call.
struct StageRef {
  std::shared_ptr<dsl::Schedule> schedule;
  Tensor tensor;

  dsl::Stage& stage() const {
    for (dsl::Stage& s : schedule->stages())
      if (s.tensor() == tensor.node()) return s;
    invalid("'" + tensor->name + "' is not a compute of this schedule");
  }
  // Raises the stage's error, if a primitive (this one or an earlier) was illegal.
  void check(const char* primitive) const {
    const std::string& error = stage().error();
    if (!error.empty()) invalid(std::string(primitive) + " on '" + tensor->name + "': " + error);
  }
};

// An axis argument: an IterVar of the stage (its leaf loops are checked by the primitive).
Axis axis_arg(py::handle h, const char* primitive) {
  if (!py::isinstance<AxisNode>(h))
    invalid(std::string(primitive) + ": expected an IterVar (an axis of the stage), got a " + type_name(h));
  return py::cast<Axis>(h);
}

py::tuple split(const StageRef& s, py::handle axis, std::optional<int64_t> factor, std::optional<int64_t> nparts) {
  Axis a = axis_arg(axis, "split");
  if (factor.has_value() == nparts.has_value()) invalid("split: give one of factor= and nparts=");
  int64_t f = factor.value_or(0);
  if (nparts) {
    // The DSL splits by a factor; nparts outer iterations is a factor of ceil(extent / nparts).
    int64_t extent;
    if (!dsl::as_int(a->extent, &extent))
      invalid("split(nparts=...) of '" + a->name + "' needs a constant extent; use factor= with a symbolic one");
    if (*nparts < 1) invalid("split: nparts " + std::to_string(*nparts) + " < 1");
    f = (extent + *nparts - 1) / *nparts;
  }
  auto [outer, inner] = s.stage().split(a, f);
  s.check("split");
  return py::make_tuple(outer, inner);
}

Axis fuse(const StageRef& s, py::args axes) {
  if (axes.size() < 2) invalid("fuse: give two or more adjacent axes, outermost first");
  Axis fused = axis_arg(axes[0], "fuse");
  for (size_t i = 1; i < axes.size(); ++i) {
    fused = s.stage().fuse(fused, axis_arg(axes[i], "fuse"));
    s.check("fuse");
  }
  return fused;
}

void reorder(const StageRef& s, py::args axes) {
  std::vector<Axis> order;
  for (py::handle a : axes) order.push_back(axis_arg(a, "reorder"));
  s.stage().reorder(order);
  s.check("reorder");
}

StageRef schedule_item(const std::shared_ptr<dsl::Schedule>& sched, const Tensor& t) {
  StageRef ref{sched, t};
  ref.stage();  // raises for a tensor the schedule does not compute
  return ref;
}

// te's cache_read(tensor, scope, readers) / cache_write(tensor, scope): scope "local" only.
void check_scope(const char* primitive, const std::string& scope) {
  if (scope != "local")
    invalid(std::string(primitive) + ": scope '" + scope + "': Kiln's caches are 'local' (a buffer where the cache is computed)");
}

Tensor cache_read(const std::shared_ptr<dsl::Schedule>& sched, const Tensor& t, const std::string& scope,
                  py::handle readers) {
  check_scope("cache_read", scope);
  std::vector<Tensor> rs;
  if (py::isinstance<Tensor>(readers)) {
    rs.push_back(py::cast<Tensor>(readers));
  } else {
    if (!py::isinstance<py::sequence>(readers) || py::isinstance<py::str>(readers))
      invalid("cache_read: readers must be a Tensor or a list of them, got a " + type_name(readers));
    for (py::handle r : readers) {
      if (!py::isinstance<Tensor>(r)) invalid("cache_read: readers must be Tensors, got a " + type_name(r));
      rs.push_back(py::cast<Tensor>(r));
    }
  }
  Tensor cache = sched->cache_read(t, rs);
  if (!sched->error().empty()) invalid(sched->error());
  return cache;
}

Tensor cache_write(const std::shared_ptr<dsl::Schedule>& sched, const Tensor& t, const std::string& scope) {
  check_scope("cache_write", scope);
  Tensor cache = sched->cache_write(t);
  if (!sched->error().empty()) invalid(sched->error());
  return cache;
}

std::shared_ptr<dsl::Schedule> create_schedule(py::handle outputs) {
  std::vector<Tensor> outs;
  if (py::isinstance<Tensor>(outputs)) {
    outs.push_back(py::cast<Tensor>(outputs));
  } else {
    for (py::handle o : outputs) {
      if (!py::isinstance<Tensor>(o)) invalid("create_schedule: expected Tensors, got a " + type_name(o));
      outs.push_back(py::cast<Tensor>(o));
    }
  }
  if (outs.empty()) invalid("create_schedule: no output tensor");
  for (const Tensor& t : outs)
    if (t->placeholder) invalid("create_schedule: '" + t->name + "' is a placeholder, not a compute");
  return std::make_shared<dsl::Schedule>(outs);
}

// ---- lowering and kernels ----------------------------------------------------------------

std::vector<Tensor> tensor_list(py::handle args) {
  std::vector<Tensor> out;
  for (py::handle a : args) {
    if (!py::isinstance<Tensor>(a)) invalid("lower: args must be Tensors, got a " + type_name(a));
    out.push_back(py::cast<Tensor>(a));
  }
  return out;
}

dsl::LoweredFunc lower(const std::shared_ptr<dsl::Schedule>& s, py::handle args, const std::string& name) {
  Expected<dsl::LoweredFunc> f = dsl::lower(*s, tensor_list(args), name);
  if (!f.ok()) throw_status(f.status());
  return std::move(*f);
}

// The value of an index expression once the symbolic dims are bound; nullopt when it reads a
// dim that is not bound.
std::optional<int64_t> evaluate(const Expr& e, const std::map<const dsl::ExprNode*, int64_t>& dims) {
  switch (e->kind) {
    case ExprKind::kInt: return e->ival;
    case ExprKind::kVar: {
      auto it = dims.find(e.get());
      return it == dims.end() ? std::nullopt : std::optional<int64_t>(it->second);
    }
    case ExprKind::kBinary: {
      auto a = evaluate(e->args[0], dims), b = evaluate(e->args[1], dims);
      if (!a || !b) return std::nullopt;
      switch (static_cast<dsl::BinOp>(e->op)) {
        case dsl::BinOp::kAdd: return *a + *b;
        case dsl::BinOp::kSub: return *a - *b;
        case dsl::BinOp::kMul: return *a * *b;
        case dsl::BinOp::kDiv:
        case dsl::BinOp::kMod: {
          // The DSL's constant folding is the floor division the kernel computes.
          if (*b == 0) return std::nullopt;
          Expr folded = dsl::make_binary(static_cast<dsl::BinOp>(e->op), Expr(*a), Expr(*b));
          return folded->ival;
        }
        case dsl::BinOp::kMin: return std::min(*a, *b);
        case dsl::BinOp::kMax: return std::max(*a, *b);
      }
      return std::nullopt;
    }
    default: return std::nullopt;
  }
}

std::string shape_text(const std::vector<Expr>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + dsl::to_string(shape[d]);
  return s + "]";
}

// A built kernel with the lowered function it came from (for binding dims from arrays).
struct PyKernel {
  std::shared_ptr<dsl::Kernel> kernel;
  dsl::LoweredFunc func;

  // Runs on one float32 C-contiguous array per argument, in place: the symbolic dims are
  // read from the arrays' shapes, and every shape is checked against its tensor's.
  void call(py::args arrays) const {
    if (arrays.size() != func.args.size())
      invalid(func.name + ": expected " + std::to_string(func.args.size()) + " arrays (one per argument), got " +
              std::to_string(arrays.size()));
    std::vector<py::array> held;
    std::map<const dsl::ExprNode*, int64_t> dims;
    for (size_t i = 0; i < arrays.size(); ++i) {
      const Tensor& t = func.args[i];
      const std::string what = func.name + ": argument " + std::to_string(i) + " ('" + t->name + "')";
      if (!py::isinstance<py::array>(arrays[i])) invalid(what + " must be a numpy array, got a " + type_name(arrays[i]));
      py::array a = py::reinterpret_borrow<py::array>(arrays[i]);
      if (!a.dtype().is(py::dtype::of<float>()))
        invalid(what + " must be float32, got " + std::string(py::str(a.dtype())) + " (no conversion: the kernel works in place)");
      if (!(a.flags() & py::array::c_style)) invalid(what + " must be C-contiguous (np.ascontiguousarray)");
      if (!t->placeholder && !a.writeable()) invalid(what + " is an output and the array is read-only");
      if (static_cast<size_t>(a.ndim()) != t->shape.size())
        invalid(what + " has shape " + shape_text(t->shape) + ", the array has " + std::to_string(a.ndim()) + " dim(s)");
      for (size_t d = 0; d < t->shape.size(); ++d) {
        const Expr& dim = t->shape[d];
        if (dim->kind == ExprKind::kVar && !dims.count(dim.get())) dims[dim.get()] = a.shape(static_cast<ssize_t>(d));
      }
      held.push_back(a);
    }
    // Every extent checked once all dims are bound (a dim may be an expression of them).
    for (size_t i = 0; i < held.size(); ++i) {
      const Tensor& t = func.args[i];
      for (size_t d = 0; d < t->shape.size(); ++d) {
        std::optional<int64_t> want = evaluate(t->shape[d], dims);
        int64_t got = held[i].shape(static_cast<ssize_t>(d));
        if (!want) invalid(func.name + ": cannot bind '" + dsl::to_string(t->shape[d]) + "' from the arrays' shapes");
        if (*want != got || got < 1)
          invalid(func.name + ": shape mismatch: argument " + std::to_string(i) + " ('" + t->name + "') is " +
                  shape_text(t->shape) + ", dim " + std::to_string(d) + " (" + dsl::to_string(t->shape[d]) +
                  ") must be " + std::to_string(*want) + ", the array has " + std::to_string(got));
      }
    }
    std::vector<float*> buffers;
    for (py::array& a : held) buffers.push_back(static_cast<float*>(a.mutable_data()));
    std::vector<int64_t> values;
    for (const Expr& d : func.dims) {
      auto it = dims.find(d.get());
      if (it == dims.end()) invalid(func.name + ": dim '" + d->name + "' is not the extent of any argument's dim");
      values.push_back(it->second);
    }
    Status s;
    {
      py::gil_scoped_release unlocked;
      s = kernel->run(buffers, values);
    }
    if (!s.ok()) throw_status(s);
  }
};

PyKernel build(const dsl::LoweredFunc& f) {
  Expected<std::shared_ptr<dsl::Kernel>> k = [&] {
    py::gil_scoped_release unlocked;  // a compiler run takes a second
    return dsl::build(f);
  }();
  if (!k.ok()) throw_status(k.status());
  return PyKernel{*k, f};
}

// ---- custom ops: a compute as the custom-op text form (include/kiln/custom_op.h) ----------

// An attribute of a custom op while its compute is exported: a named float variable. It has
// no value, so a compute that reads it can be exported, never lowered.
Expr attr_var(const std::string& name) {
  auto n = std::make_shared<dsl::ExprNode>();
  n->kind = ExprKind::kVar;
  n->dtype = DType::kF32;
  n->name = name;
  return Expr(n);
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

bool is_float(const Expr& e, double v) { return e->kind == ExprKind::kFloat && e->fval == v; }

// An element-wise compute over `inputs` (each read at the output element's index `vars`) as
// the text a plugin registers; anything else is refused, naming what.
struct CustomTextWriter {
  const std::string& op;
  const std::vector<Tensor>& inputs;
  const std::vector<Expr>& vars;

  [[noreturn]] void refuse(const Expr& e, const std::string& why) const {
    invalid("custom op " + op + ": " + why + " (in " + dsl::to_string(e) + ")");
  }

  std::string load(const Expr& e) const {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (e->tensor != inputs[k].node()) continue;
      bool at_output_index = e->args.size() == vars.size();
      for (size_t d = 0; at_output_index && d < vars.size(); ++d) at_output_index = e->args[d].get() == vars[d].get();
      if (!at_output_index)
        refuse(e, "a custom op in a model is element-wise: it must read each input at the output's index");
      return "x" + std::to_string(k);
    }
    refuse(e, "it reads '" + e->tensor->name + "', which is not one of the op's inputs");
  }

  std::string text(const Expr& e) const {
    static const char* kBinary[] = {"add", "sub", "mul", "div", nullptr, "min", "max"};
    static const char* kCompare[] = {"lt", "le", "gt", "ge", "eq", "ne"};
    switch (e->kind) {
      case ExprKind::kFloat: return number_text(e->fval);
      case ExprKind::kInt: return number_text(static_cast<double>(e->ival));
      case ExprKind::kLoad: return load(e);
      case ExprKind::kVar:
        if (e.dtype() == DType::kF32) return e->name;  // an attribute
        refuse(e, "it uses the index '" + e->name + "' as a value; a model's custom op computes from its inputs");
      case ExprKind::kBinary: {
        const char* name = kBinary[e->op];
        if (!name) refuse(e, "'%' is not available in a model's custom op");
        // 1 / (1 + exp(0 - a)), kiln.dsl.sigmoid, is the text form's sigmoid: the compiler then
        // recognises activations such as x * sigmoid(beta * x) and fuses them into epilogues.
        const Expr& a = e->args[0];
        const Expr& b = e->args[1];
        if (static_cast<dsl::BinOp>(e->op) == dsl::BinOp::kDiv && is_float(a, 1) && b->kind == ExprKind::kBinary &&
            static_cast<dsl::BinOp>(b->op) == dsl::BinOp::kAdd && is_float(b->args[0], 1) &&
            b->args[1]->kind == ExprKind::kCall && b->args[1]->name == "exp") {
          const Expr& neg = b->args[1]->args[0];
          if (neg->kind == ExprKind::kBinary && static_cast<dsl::BinOp>(neg->op) == dsl::BinOp::kSub &&
              is_float(neg->args[0], 0))
            return "(sigmoid " + text(neg->args[1]) + ")";
        }
        if (static_cast<dsl::BinOp>(e->op) == dsl::BinOp::kSub && is_float(a, 0)) return "(neg " + text(b) + ")";
        return std::string("(") + name + " " + text(a) + " " + text(b) + ")";
      }
      case ExprKind::kCall: return "(" + e->name + " " + text(e->args[0]) + ")";
      case ExprKind::kSelect: {
        const Expr& c = e->args[0];
        if (c->kind != ExprKind::kCompare)
          refuse(e, "a select's condition in a model's custom op must be one comparison");
        return std::string("(select (") + kCompare[c->op] + " " + text(c->args[0]) + " " + text(c->args[1]) + ") " +
               text(e->args[1]) + " " + text(e->args[2]) + ")";
      }
      case ExprKind::kCast:
        if (e->args[0].dtype() == DType::kI64) refuse(e, "it casts index arithmetic to a value");
        return text(e->args[0]);
      case ExprKind::kReduce:
        refuse(e, "reductions are not available in a model's custom ops yet (only element-wise computes)");
      case ExprKind::kCompare:
      case ExprKind::kLogical:
        refuse(e, "a condition may only be a select's, and only one comparison");
    }
    refuse(e, "unsupported expression");
  }
};

std::string custom_expr_text(const std::string& op, const Tensor& out, py::handle inputs) {
  if (out->placeholder) invalid("custom op " + op + ": it returned the placeholder '" + out->name + "', not a compute");
  std::vector<Tensor> ins = tensor_list(inputs);
  for (const Tensor& in : ins) {
    bool same = in->shape.size() == out->shape.size();
    for (size_t d = 0; same && d < out->shape.size(); ++d) same = in->shape[d].get() == out->shape[d].get();
    if (!same)
      invalid("custom op " + op + ": its output '" + out->name + "' has shape " + shape_text(out->shape) +
              ", its input '" + in->name + "' " + shape_text(in->shape) +
              ": a model's custom op is element-wise (compute over x.shape)");
  }
  std::vector<Expr> vars;
  for (const Axis& a : out->axes) vars.push_back(a->var);
  return CustomTextWriter{op, ins, vars}.text(out->body);
}

}  // namespace

void bind_dsl(py::module_& parent) {
  py::module_ m = parent.def_submodule("_dsl", "The DSL's native half; import kiln.dsl instead.");

  py::class_<Expr> expr(m, "Expr", "An expression of the DSL (immutable): index arithmetic, float math, reads.");
  bind_operators(expr, [](const Expr& e) { return e; }, true);
  expr.def_property_readonly("dtype", [](const Expr& e) { return std::string(dsl::dtype_name(e.dtype())); })
      .def("astype", [](const Expr& e, const std::string& t) { return dsl::cast(dtype_from_name(t), e); },
           py::arg("dtype"), "The expression cast to dtype ('float32', 'int64').")
      .def("__repr__", repr_expr)
      .def("__str__", [](const Expr& e) { return dsl::to_string(e); });

  py::class_<AxisNode, Axis> iter_var(m, "IterVar", "A loop axis: a compute's dim, a reduce_axis, or a split/fuse result.");
  bind_operators(iter_var, [](const AxisNode& a) { return a.var; }, false);
  iter_var.def_property_readonly("var", [](const AxisNode& a) { return a.var; })
      .def_property_readonly("name", [](const AxisNode& a) { return a.name; })
      .def_property_readonly("extent", [](const AxisNode& a) { return dim_object(a.extent); })
      .def_property_readonly("dom", [](const AxisNode& a) { return py::make_tuple(0, dim_object(a.extent)); })
      .def_property_readonly("is_reduce", [](const AxisNode& a) { return a.reduce; })
      .def("__repr__", [](const AxisNode& a) {
        return "IterVar(" + a.name + ", 0.." + dsl::to_string(a.extent) + (a.reduce ? ", reduce)" : ")");
      });

  py::class_<Tensor>(m, "Tensor", "A placeholder (an input) or a compute (an expression per element); t[i, j] reads it.")
      .def("__getitem__", load)
      .def_property_readonly("name", [](const Tensor& t) { return t->name; })
      .def_property_readonly("shape", [](const Tensor& t) {
        py::list s;
        for (const Expr& d : t->shape) s.append(dim_object(d));
        return py::tuple(s);
      })
      .def_property_readonly("ndim", &Tensor::ndim)
      .def_property_readonly("dtype", [](const Tensor&) { return "float32"; })
      .def_property_readonly("is_placeholder", [](const Tensor& t) { return t->placeholder; })
      .def_property_readonly("op", [](const Tensor& t) { return t; }, "The tensor itself (TVM's t.op.axis reads).")
      .def_property_readonly("axis", [](const Tensor& t) { return t->axes; })
      .def_property_readonly("reduce_axis", reduce_axes_of)
      .def_property_readonly("body", [](const Tensor& t) -> py::object {
        return t->placeholder ? py::none() : py::cast(t->body);
      })
      .def("__repr__", [](const Tensor& t) {
        return std::string(t->placeholder ? "placeholder " : "compute ") + t->name + shape_text(t->shape);
      });

  m.def("var", [](const std::string& name) { return dsl::var(name); }, py::arg("name") = "n");
  m.def("_attr_var", attr_var, py::arg("name"));
  m.def("placeholder", [](py::handle shape, const std::string& name) {
    return dsl::placeholder(name, shape_arg(shape, "placeholder's shape"));
  }, py::arg("shape"), py::arg("name"));
  m.def("compute", make_compute, py::arg("shape"), py::arg("fcompute"), py::arg("name"));
  m.def("reduce_axis", make_reduce_axis, py::arg("dom"), py::arg("name"));
  m.def("sum", [](py::handle s, py::handle a) { return reduce(dsl::ReduceOp::kSum, s, a); });
  m.def("reduce_max", [](py::handle s, py::handle a) { return reduce(dsl::ReduceOp::kMax, s, a); });
  m.def("reduce_min", [](py::handle s, py::handle a) { return reduce(dsl::ReduceOp::kMin, s, a); });
  m.def("max", [](py::handle a, py::handle b) { return dsl::max(to_expr(a), to_expr(b)); });
  m.def("min", [](py::handle a, py::handle b) { return dsl::min(to_expr(a), to_expr(b)); });
  for (const char* fn : {"exp", "log", "sqrt", "tanh", "erf", "abs"})
    m.def(fn, [name = std::string(fn)](py::handle a) {
      return dsl::make_call(name, as_f32(to_expr(a), (name + "'s argument").c_str()));
    }, py::arg("x"));
  m.def("select", [](py::handle cond, py::handle t, py::handle f) {
    Expr c = to_expr(cond);
    if (c.dtype() != DType::kBool) invalid("select: the condition must be a comparison, got a " +
                                           std::string(dsl::dtype_name(c.dtype())) + " expression");
    return dsl::select(c, to_expr(t), to_expr(f));
  }, py::arg("cond"), py::arg("true_value"), py::arg("false_value"));
  m.def("cast", [](py::handle e, const std::string& t) { return dsl::cast(dtype_from_name(t), to_expr(e)); },
        py::arg("x"), py::arg("dtype"));
  m.def("logical_and", [](py::handle a, py::handle b) { return to_expr(a) && to_expr(b); });
  m.def("logical_or", [](py::handle a, py::handle b) { return to_expr(a) || to_expr(b); });
  m.def("logical_not", [](py::handle a) { return !to_expr(a); });

  py::class_<StageRef>(m, "Stage", "The loops of one compute in a schedule; each primitive raises if illegal.")
      .def("split", split, py::arg("axis"), py::arg("factor") = py::none(), py::arg("nparts") = py::none())
      .def("fuse", fuse)
      .def("reorder", reorder)
      .def("vectorize", [](const StageRef& s, py::handle a, std::optional<int64_t> width) {
        if (width) s.stage().vectorize(axis_arg(a, "vectorize"), *width);
        else s.stage().vectorize(axis_arg(a, "vectorize"));
        s.check("vectorize");
      }, py::arg("axis"), py::arg("width") = py::none())
      .def("unroll", [](const StageRef& s, py::handle a) { s.stage().unroll(axis_arg(a, "unroll")); s.check("unroll"); })
      .def("parallel", [](const StageRef& s, py::handle a) {
        s.stage().parallel(axis_arg(a, "parallel"));
        s.check("parallel");
      })
      .def("reduce_lanes", [](const StageRef& s, int64_t lanes) { s.stage().reduce_lanes(lanes); s.check("reduce_lanes"); },
           py::arg("lanes"))
      .def("compute_inline", [](const StageRef& s) { s.stage().compute_inline(); s.check("compute_inline"); })
      .def("compute_at", [](const StageRef& s, const StageRef& parent, py::handle a) {
        if (parent.schedule != s.schedule) invalid("compute_at: the consumer's stage is of another schedule");
        s.stage().compute_at(parent.stage(), axis_arg(a, "compute_at"));
        s.check("compute_at");
      }, py::arg("parent"), py::arg("axis"))
      .def_property_readonly("op", [](const StageRef& s) { return s.tensor; })
      .def_property_readonly("leaf_iter_vars", [](const StageRef& s) { return s.stage().leaf_axes(); })
      .def_property_readonly("trace", [](const StageRef& s) { return s.stage().trace(); });

  py::class_<dsl::Schedule, std::shared_ptr<dsl::Schedule>>(m, "Schedule", "How each compute is looped; s[t] is t's Stage.")
      .def("__getitem__", schedule_item)
      .def("cache_read", cache_read, py::arg("tensor"), py::arg("scope"), py::arg("readers"))
      .def("cache_write", cache_write, py::arg("tensor"), py::arg("scope"))
      .def_property_readonly("outputs", &dsl::Schedule::outputs)
      .def("__str__", &dsl::Schedule::trace);
  m.def("create_schedule", create_schedule, py::arg("outputs"));
  m.def("auto_schedule", [](const std::shared_ptr<dsl::Schedule>& s) { dsl::auto_schedule(*s); }, py::arg("schedule"));

  py::class_<dsl::LoweredFunc>(m, "LoweredFunc", "A lowered kernel: str() is its loop IR.")
      .def_readonly("name", &dsl::LoweredFunc::name)
      .def_readonly("args", &dsl::LoweredFunc::args)
      .def_property_readonly("dims", [](const dsl::LoweredFunc& f) {
        std::vector<std::string> names;
        for (const Expr& d : f.dims) names.push_back(d->name);
        return names;
      })
      .def("__str__", [](const dsl::LoweredFunc& f) { return dsl::to_string(f); });
  m.def("lower", lower, py::arg("schedule"), py::arg("args"), py::arg("name"));

  py::class_<PyKernel>(m, "Kernel", "A compiled kernel; call it with one float32 array per argument (in place).")
      .def("__call__", &PyKernel::call)
      .def_property_readonly("lowered", [](const PyKernel& k) { return k.func; })
      .def_property_readonly("source", [](const PyKernel& k) { return k.kernel->source(); })
      .def_property_readonly("library_path", [](const PyKernel& k) { return k.kernel->library_path(); })
      .def_property_readonly("from_cache", [](const PyKernel& k) { return k.kernel->from_cache(); })
      .def_property_readonly("dims", [](const PyKernel& k) { return k.kernel->dim_names(); });
  m.def("build", build, py::arg("lowered"));

  m.def("_custom_expr_text", custom_expr_text, py::arg("op"), py::arg("output"), py::arg("inputs"));
}

}  // namespace kiln::python
