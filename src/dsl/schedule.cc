// Schedule primitives and the stage graph.
#include "dsl/schedule.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "dsl/printer.h"

namespace kiln::dsl {
namespace {

void collect_loads(const Expr& e, const std::function<void(const ExprNode*)>& f) {
  if (!e.defined()) return;
  if (e->kind == ExprKind::kLoad) f(e.get());
  for (const Expr& a : e->args) collect_loads(a, f);
}

bool reads(const Expr& e, const TensorNode* t) {
  bool found = false;
  collect_loads(e, [&](const ExprNode* load) { found |= load->tensor.get() == t; });
  return found;
}

// `e` with its variables in `vars` replaced and its reads of `from` made reads of `to`.
Expr rebuild(const Expr& e, const std::map<const ExprNode*, Expr>& vars, const TensorNode* from,
             const std::shared_ptr<TensorNode>& to) {
  if (e->kind == ExprKind::kVar) {
    auto it = vars.find(e.get());
    return it == vars.end() ? e : it->second;
  }
  if (e->args.empty() && e->kind != ExprKind::kLoad) return e;
  auto n = std::make_shared<ExprNode>(*e.get());
  for (Expr& a : n->args) a = rebuild(a, vars, from, to);
  if (n->kind == ExprKind::kLoad && n->tensor.get() == from) n->tensor = to;
  return Expr(n);
}

// A cache's compute: its loops are named ax0, ax1, ... (as TVM's), apart from the i, j, ... of the
// stage it is computed in (the generated C++ names a loop's variable after it).
Tensor cache_tensor(const std::string& name, const std::vector<Expr>& shape,
                    const std::function<Expr(const std::vector<Expr>&)>& fn) {
  auto t = std::make_shared<TensorNode>();
  t->name = name;
  t->shape = shape;
  t->placeholder = false;
  std::vector<Expr> vars;
  for (size_t d = 0; d < shape.size(); ++d) {
    t->axes.push_back(make_axis("ax" + std::to_string(d), shape[d], false));
    vars.push_back(t->axes.back()->var);
  }
  t->body = fn(vars);
  return Tensor(t);
}

}  // namespace

Stage::Stage(std::shared_ptr<TensorNode> t) : tensor_(std::move(t)) {
  if (!tensor_) return;
  body_ = tensor_->body;
  leaf_ = tensor_->axes;
  if (tensor_->body.defined() && tensor_->body->kind == ExprKind::kReduce) {
    reduce_axes_ = tensor_->body->axes;
    leaf_.insert(leaf_.end(), reduce_axes_.begin(), reduce_axes_.end());
  }
}

void Stage::fail(const std::string& message) {
  if (error_.empty()) error_ = message;
}

bool Stage::check_leaf(const Axis& a, const char* primitive) {
  if (!tensor_) {
    fail(std::string(primitive) + ": the tensor is not part of this schedule");
    return false;
  }
  if (!a || std::find(leaf_.begin(), leaf_.end(), a) == leaf_.end()) {
    std::string names;
    for (const Axis& l : leaf_) names += (names.empty() ? "" : ", ") + l->name;
    fail(std::string(primitive) + "(" + (a ? a->name : "null") + ") on '" + tensor_->name +
         "': not one of its loops (" + names + ")");
    return false;
  }
  return true;
}

std::pair<Axis, Axis> Stage::split(const Axis& a, int64_t factor) {
  if (!check_leaf(a, "split")) return {make_axis("bad", 1, false), make_axis("bad", 1, false)};
  if (factor <= 0) {
    fail("split(" + a->name + ", " + std::to_string(factor) + ") on '" + tensor_->name +
         "': the factor must be >= 1");
    return {make_axis("bad", 1, false), make_axis("bad", 1, false)};
  }
  Axis outer = make_axis(a->name + ".outer", (a->extent + Expr(factor - 1)) / Expr(factor), a->reduce);
  Axis inner = make_axis(a->name + ".inner", Expr(factor), a->reduce);
  relations_.push_back({RelationKind::kSplit, a, outer, inner, factor});
  auto it = std::find(leaf_.begin(), leaf_.end(), a);
  it = leaf_.erase(it);
  leaf_.insert(it, {outer, inner});
  trace_.push_back(tensor_->name + ".split(" + a->name + ", " + std::to_string(factor) + ")");
  return {outer, inner};
}

Axis Stage::fuse(const Axis& outer, const Axis& inner) {
  if (!check_leaf(outer, "fuse") || !check_leaf(inner, "fuse")) return make_axis("bad", 1, false);
  auto io = std::find(leaf_.begin(), leaf_.end(), outer);
  if (io + 1 == leaf_.end() || *(io + 1) != inner) {
    fail("fuse(" + outer->name + ", " + inner->name + ") on '" + tensor_->name +
         "': the loops must be adjacent, outer first");
    return make_axis("bad", 1, false);
  }
  if (outer->reduce != inner->reduce) {
    fail("fuse(" + outer->name + ", " + inner->name + ") on '" + tensor_->name +
         "': mixes a reduction loop and a data-parallel loop");
    return make_axis("bad", 1, false);
  }
  Axis fused = make_axis(outer->name + "." + inner->name + ".fused", outer->extent * inner->extent,
                         outer->reduce);
  relations_.push_back({RelationKind::kFuse, fused, outer, inner, 0});
  io = leaf_.erase(io, io + 2);
  leaf_.insert(io, fused);
  trace_.push_back(tensor_->name + ".fuse(" + outer->name + ", " + inner->name + ")");
  return fused;
}

Stage::Tiled Stage::tile(const Axis& x, const Axis& y, int64_t x_factor, int64_t y_factor) {
  auto [xo, xi] = split(x, x_factor);
  auto [yo, yi] = split(y, y_factor);
  // After a failed split the stage holds its first error already; the reorder adds none.
  if (error_.empty()) reorder({xo, yo, xi, yi});
  return {xo, yo, xi, yi};
}

void Stage::reorder(const std::vector<Axis>& order) {
  std::vector<size_t> pos;
  std::set<const AxisNode*> seen;
  for (const Axis& a : order) {
    if (!check_leaf(a, "reorder")) return;
    if (!seen.insert(a.get()).second) {
      fail("reorder on '" + tensor_->name + "': loop " + a->name + " given twice");
      return;
    }
    pos.push_back(std::find(leaf_.begin(), leaf_.end(), a) - leaf_.begin());
  }
  std::sort(pos.begin(), pos.end());
  std::string names;
  for (size_t i = 0; i < order.size(); ++i) {
    leaf_[pos[i]] = order[i];
    names += (i ? ", " : "") + order[i]->name;
  }
  trace_.push_back(tensor_->name + ".reorder(" + names + ")");
}

void Stage::annotate(const Axis& a, ForKind k, const char* primitive) {
  if (!check_leaf(a, primitive)) return;
  kinds_[a.get()] = k;
  trace_.push_back(tensor_->name + "." + primitive + "(" + a->name + ")");
}

void Stage::vectorize(const Axis& a) { annotate(a, ForKind::kVectorized, "vectorize"); }
void Stage::vectorize(const Axis& a, int64_t width) {
  if (width < 1 || width > 64 || (width & (width - 1)) != 0)
    return fail("vectorize: a vector of " + std::to_string(width) + " elements on '" + (tensor_ ? tensor_->name : "") +
                "', expected a power of two from 1 to 64");
  annotate(a, ForKind::kVectorized, "vectorize");
  vector_width_ = width;
  trace_.back() += " width " + std::to_string(width);
}
void Stage::unroll(const Axis& a) { annotate(a, ForKind::kUnrolled, "unroll"); }
void Stage::parallel(const Axis& a) { annotate(a, ForKind::kParallel, "parallel"); }

void Stage::reduce_lanes(int64_t lanes) {
  if (!tensor_) return fail("reduce_lanes: the tensor is not part of this schedule");
  if (reduce_axes_.empty()) return fail("reduce_lanes: '" + tensor_->name + "' is not a reduction");
  if (lanes < 2 || lanes > 1024)
    return fail("reduce_lanes: " + std::to_string(lanes) + " partial results for '" + tensor_->name +
                "', expected 2 to 1024");
  lanes_ = lanes;
  trace_.push_back(tensor_->name + ".reduce_lanes(" + std::to_string(lanes) + ")");
}

void Stage::compute_inline() {
  if (!tensor_) return fail("compute_inline: the tensor is not part of this schedule");
  inlined_ = true;
  trace_.push_back(tensor_->name + ".compute_inline()");
}

void Stage::compute_at(const Stage& consumer, const Axis& axis) {
  if (!tensor_ || !consumer.tensor_) return fail("compute_at: the tensor is not part of this schedule");
  attach_consumer_ = consumer.tensor_.get();
  attach_axis_ = axis;
  trace_.push_back(tensor_->name + ".compute_at(" + consumer.tensor_->name + ", " +
                   (axis ? axis->name : "null") + ")");
}

ForKind Stage::kind_of(const AxisNode* a) const {
  auto it = kinds_.find(a);
  return it == kinds_.end() ? ForKind::kSerial : it->second;
}

Schedule::Schedule(std::vector<Tensor> outputs) : outputs_(std::move(outputs)), unknown_(nullptr) {
  // Post-order over loads: producers come before their consumers.
  std::set<const TensorNode*> done;
  std::function<void(const std::shared_ptr<TensorNode>&)> visit =
      [&](const std::shared_ptr<TensorNode>& t) {
        if (t->placeholder || !done.insert(t.get()).second) return;
        collect_loads(t->body, [&](const ExprNode* load) { visit(load->tensor); });
        stages_.emplace_back(t);
      };
  for (const Tensor& t : outputs_) visit(t.node());
}

Stage& Schedule::operator[](const Tensor& t) {
  for (Stage& s : stages_)
    if (s.tensor() == t.node()) return s;
  if (error_.empty())
    error_ = "schedule: '" + t->name + "' is not a compute of this schedule (a placeholder?)";
  unknown_ = Stage(nullptr);
  return unknown_;
}

Stage* Schedule::find(const TensorNode* t) {
  for (Stage& s : stages_)
    if (s.tensor().get() == t) return &s;
  return nullptr;
}

Tensor Schedule::fail(const std::string& message, const Tensor& t) {
  if (error_.empty()) error_ = message;
  return t;
}

std::string Schedule::unique_name(const std::string& base) const {
  std::set<std::string> names;
  for (const Stage& st : stages_) {
    names.insert(st.tensor()->name);
    collect_loads(st.body(), [&](const ExprNode* load) { names.insert(load->tensor->name); });
  }
  std::string name = base;
  for (int n = 2; names.count(name); ++n) name = base + std::to_string(n);
  return name;
}

Tensor Schedule::cache_read(const Tensor& t, const std::vector<Tensor>& readers) {
  if (!t.node()) return fail("cache_read: a null tensor", t);
  const std::string what = "cache_read('" + t->name + "')";
  if (readers.empty()) return fail(what + ": no readers given (the stages to read the cache)", t);
  bool read_here = false;
  for (const Stage& st : stages_) read_here |= reads(st.body(), t.node().get());
  if (!read_here) return fail(what + ": no stage of this schedule reads '" + t->name + "'", t);
  std::vector<Stage*> rs;
  for (const Tensor& r : readers) {
    Stage* st = r.node() ? find(r.node().get()) : nullptr;
    if (!st) return fail(what + ": reader '" + (r.node() ? r->name : "null") + "' is not a compute of this schedule", t);
    if (!reads(st->body(), t.node().get()))
      return fail(what + ": '" + r->name + "' does not read '" + t->name + "'", t);
    rs.push_back(st);
  }
  Tensor cache = cache_tensor(unique_name(t->name + ".local"), t->shape, [&](const std::vector<Expr>& i) { return t(i); });
  for (Stage* st : rs) st->body_ = rebuild(st->body(), {}, t.node().get(), cache.node());
  // Before the first reader, so that producers still come before their consumers.
  size_t first = stages_.size();
  for (Stage* st : rs) first = std::min<size_t>(first, st - stages_.data());
  Stage stage(cache.node());
  stage.cache_ = true;
  trace_.push_back(cache->name + " = cache_read(" + t->name + ")");
  stages_.insert(stages_.begin() + static_cast<std::ptrdiff_t>(first), std::move(stage));
  return cache;
}

Tensor Schedule::cache_write(const Tensor& t) {
  if (!t.node()) return fail("cache_write: a null tensor", t);
  const std::string what = "cache_write('" + t->name + "')";
  if (t->placeholder)
    return fail(what + ": a placeholder is an input; nothing in this schedule writes it (cache_read reads one)", t);
  Stage* st = find(t.node().get());
  if (!st) return fail(what + ": '" + t->name + "' is not a compute of this schedule", t);
  if (!st->trace().empty() || !st->error().empty())
    return fail(what + ": '" + t->name + "' is scheduled already (" +
                    (st->trace().empty() ? st->error() : st->trace().front()) +
                    "); call cache_write before other primitives on it", t);
  // The cache computes the body over axes of its own; `t` copies it.
  std::map<const ExprNode*, Expr> vars;
  Tensor cache = cache_tensor(unique_name(t->name + ".local"), t->shape, [&](const std::vector<Expr>& i) {
    for (size_t d = 0; d < i.size(); ++d) vars[t->axes[d]->var.get()] = i[d];
    return rebuild(st->body(), vars, nullptr, nullptr);
  });
  std::vector<Expr> idx;
  for (const Axis& a : t->axes) idx.push_back(a->var);
  const size_t at = static_cast<size_t>(st - stages_.data());
  st->body_ = cache(idx);
  st->reduce_axes_.clear();
  st->leaf_ = t->axes;
  trace_.push_back(cache->name + " = cache_write(" + t->name + ")");
  Stage stage(cache.node());
  stage.cache_ = true;
  stages_.insert(stages_.begin() + static_cast<std::ptrdiff_t>(at), std::move(stage));
  return cache;
}

bool Schedule::is_output(const TensorNode* t) const {
  for (const Tensor& o : outputs_)
    if (o.node().get() == t) return true;
  return false;
}

std::string Schedule::trace() const {
  std::string s;
  for (const std::string& line : trace_) s += line + "\n";
  for (const Stage& st : stages_)
    for (const std::string& line : st.trace()) s += line + "\n";
  return s;
}

}  // namespace kiln::dsl
