// Lowering of a schedule to loop IR: legality, bounds inference, loop nests per stage.
#include "dsl/lower.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "dsl/bounds.h"
#include "dsl/printer.h"

namespace kiln::dsl {
namespace {

using Subst = std::map<const ExprNode*, Expr>;

StmtPtr make(StmtKind k) {
  auto s = std::make_shared<Stmt>();
  s->kind = k;
  return s;
}

void walk(const Expr& e, const std::function<void(const Expr&)>& f) {
  if (!e.defined()) return;
  f(e);
  for (const Expr& a : e->args) walk(a, f);
  if (e->kind == ExprKind::kReduce)
    for (const Axis& a : e->axes) walk(a->extent, f);
}

const Stage* stage_of(const Schedule& s, const TensorNode* t) {
  for (const Stage& st : s.stages())
    if (st.tensor().get() == t) return &st;
  return nullptr;
}

// Substitutes variables and replaces reads of inlined computes by their bodies.
Expr rewrite(const Expr& e, const Subst& sub, const Schedule& s) {
  switch (e->kind) {
    case ExprKind::kInt:
    case ExprKind::kFloat: return e;
    case ExprKind::kVar: {
      auto it = sub.find(e.get());
      return it == sub.end() ? e : it->second;
    }
    default: break;
  }
  std::vector<Expr> args;
  for (const Expr& a : e->args) args.push_back(rewrite(a, sub, s));
  if (e->kind == ExprKind::kLoad) {
    const Stage* st = stage_of(s, e->tensor.get());
    if (st && st->inlined()) {
      Subst inner;
      for (size_t d = 0; d < args.size(); ++d) inner[e->tensor->axes[d]->var.get()] = args[d];
      return rewrite(st->body(), inner, s);
    }
  }
  if (e->kind == ExprKind::kBinary) return make_binary(static_cast<BinOp>(e->op), args[0], args[1]);
  auto n = std::make_shared<ExprNode>(*e.get());
  n->args = std::move(args);
  return Expr(n);
}

Expr reduce_init(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return Expr(0.0);
    case ReduceOp::kMax: return Expr(-INFINITY);
    case ReduceOp::kMin: return Expr(INFINITY);
  }
  return Expr(0.0);
}

Expr combine(ReduceOp op, Expr acc, Expr v) {
  switch (op) {
    case ReduceOp::kSum: return acc + v;
    case ReduceOp::kMax: return max(acc, v);
    case ReduceOp::kMin: return min(acc, v);
  }
  return acc;
}

std::map<const AxisNode*, Expr> fixed_dims(const Schedule& s, const Stage& producer, const Stage& consumer,
                                           const Axis& axis);

Status check_attach(const Schedule& s, const Stage& st) {
  const TensorNode* c = st.attach_consumer();
  if (!c) return ok_status();
  const std::string& name = st.tensor()->name;
  const Stage* consumer = stage_of(s, c);
  const Axis& axis = st.attach_axis();
  if (!consumer || consumer->inlined() || st.inlined())
    return invalid_argument("compute_at('%s', '%s'): both must be computes with loops, neither inlined",
                            name.c_str(), c->name.c_str());
  const auto& leaf = consumer->leaf_axes();
  if (!axis || std::find(leaf.begin(), leaf.end(), axis) == leaf.end()) {
    std::string names;
    for (const Axis& l : leaf) names += (names.empty() ? "" : ", ") + l->name;
    return invalid_argument("compute_at('%s', '%s', %s): %s is not a loop of '%s' (its loops: %s), so it "
                            "does not enclose the reads of '%s'", name.c_str(), c->name.c_str(),
                            axis ? axis->name.c_str() : "null", axis ? axis->name.c_str() : "null",
                            c->name.c_str(), names.c_str(), name.c_str());
  }
  bool outer_parallel = false;
  for (const Axis& l : leaf) {
    outer_parallel |= consumer->kind_of(l.get()) == ForKind::kParallel;
    if (l == axis) break;
  }
  if (st.is_cache() && !st.relations().empty())
    return invalid_argument("compute_at('%s', '%s', %s): a cache computed at a loop runs over its region; split "
                            "and fuse of its loops are not supported (reorder, vectorize, unroll are)",
                            name.c_str(), c->name.c_str(), axis->name.c_str());
  // Inside a parallel loop each thread computes its part: the loop's variable must fix a dim
  // (a cache's region is a local buffer of each iteration: no race).
  for (const Axis& l : leaf) {
    if (st.is_cache()) break;
    if (consumer->kind_of(l.get()) == ForKind::kParallel) {
      bool fixes = false;
      for (const auto& [a, v] : fixed_dims(s, st, *consumer, axis)) fixes |= v.get() == l->var.get();
      if (!fixes)
        return invalid_argument("compute_at('%s', '%s', %s): inside parallel loop %s every thread would "
                                "write all of '%s' (no dim of it is read at %s alone), a race",
                                name.c_str(), c->name.c_str(), axis->name.c_str(), l->name.c_str(),
                                name.c_str(), l->name.c_str());
    }
    if (l == axis) break;
  }
  // Every other reader must be computed inside the same loop, after it.
  for (const Stage& r : s.stages()) {
    if (r.tensor().get() == c || r.tensor() == st.tensor() || r.inlined()) continue;
    bool reads_it = false;
    walk(rewrite(r.body(), {}, s), [&](const Expr& e) { reads_it |= e->kind == ExprKind::kLoad && e->tensor == st.tensor(); });
    const bool cache_at_same_loop = r.is_cache() && r.attach_consumer() == c && r.attach_axis() == axis;
    if (reads_it && st.is_cache() && !cache_at_same_loop)
      return invalid_argument("compute_at('%s', '%s', %s): '%s' reads the cache too; a cache computed at a loop "
                              "holds the region of it that loop's stage and the caches computed at the same "
                              "loop read, for them alone",
                              name.c_str(), c->name.c_str(), axis->name.c_str(), r.tensor()->name.c_str());
    if (reads_it && (r.inlined() || r.attach_consumer() != c || r.attach_axis() != axis))
      return invalid_argument("compute_at('%s', '%s', %s): '%s' also reads '%s' and is not computed at the "
                              "same loop", name.c_str(), c->name.c_str(), axis->name.c_str(),
                              r.tensor()->name.c_str(), name.c_str());
  }
  for (const Axis& l : st.leaf_axes())
    if (outer_parallel && st.kind_of(l.get()) == ForKind::kParallel)
      return invalid_argument("parallel(%s) on '%s': computed at '%s' inside a parallel loop", l->name.c_str(),
                              name.c_str(), c->name.c_str());
  return ok_status();
}

Status check_stage(const Schedule& s, const Stage& st) {
  const std::string& name = st.tensor()->name;
  if (!st.error().empty()) return invalid_argument("%s", st.error().c_str());
  const Expr& body = st.body();
  Status nested_reduce = ok_status();
  for (const Expr& a : body->args)
    walk(a, [&](const Expr& e) {
      if (e->kind == ExprKind::kReduce && nested_reduce.ok())
        nested_reduce = invalid_argument("compute '%s': sum/max/min must be the whole body, not part of it",
                                         name.c_str());
    });
  KILN_RETURN_IF_ERROR(std::move(nested_reduce));
  if (st.inlined() && body->kind == ExprKind::kReduce)
    return invalid_argument("compute_inline('%s'): a reduction cannot be inlined", name.c_str());
  if (st.inlined() && s.is_output(st.tensor().get()))
    return invalid_argument("compute_inline('%s'): an output cannot be inlined", name.c_str());
  KILN_RETURN_IF_ERROR(check_attach(s, st));
  const auto& leaf = st.leaf_axes();
  const AxisNode* parallel = nullptr;
  for (size_t i = 0; i < leaf.size(); ++i) {
    ForKind k = st.kind_of(leaf[i].get());
    if (k == ForKind::kParallel && leaf[i]->reduce)
      return invalid_argument(
          "parallel(%s) on '%s': %s is a reduction loop; its iterations all update the same "
          "elements of '%s', so running them in parallel would race",
          leaf[i]->name.c_str(), name.c_str(), leaf[i]->name.c_str(), name.c_str());
    if (k == ForKind::kVectorized && leaf[i]->reduce)
      return invalid_argument(
          "vectorize(%s) on '%s': %s is a reduction loop; its lanes would race on the same "
          "element of '%s' (the innermost reduction is vectorised by the code generator instead)",
          leaf[i]->name.c_str(), name.c_str(), leaf[i]->name.c_str(), name.c_str());
    if (k == ForKind::kVectorized && i + 1 != leaf.size())
      return invalid_argument("vectorize(%s) on '%s': only the innermost loop (%s) can be vectorized",
                              leaf[i]->name.c_str(), name.c_str(), leaf.back()->name.c_str());
    if (k == ForKind::kParallel) {
      if (parallel)
        return invalid_argument("parallel(%s) on '%s': nested inside parallel loop %s",
                                leaf[i]->name.c_str(), name.c_str(), parallel->name.c_str());
      parallel = leaf[i].get();
    }
  }
  return ok_status();
}

// Every read of every compute, checked against the shape it reads over the loop ranges.
Status check_bounds(const Schedule& s, std::vector<StmtPtr>* checks) {
  for (const Stage& st : s.stages()) {
    const TensorNode* t = st.tensor().get();
    Ranges ranges;
    for (const Axis& a : t->axes) ranges[a->var.get()] = {Expr(int64_t{0}), simplify(a->extent - 1)};
    for (const Axis& a : st.reduce_axes())
      ranges[a->var.get()] = {Expr(int64_t{0}), simplify(a->extent - 1)};
    Status status = ok_status();
    walk(st.body(), [&](const Expr& e) {
      if (e->kind != ExprKind::kLoad || !status.ok()) return;
      const TensorNode* src = e->tensor.get();
      if (e->args.size() != src->shape.size()) {
        status = invalid_argument("'%s' reads %s with %zu indices; it has %zu dims", t->name.c_str(),
                                  to_string(e).c_str(), e->args.size(), src->shape.size());
        return;
      }
      for (size_t d = 0; d < e->args.size() && status.ok(); ++d) {
        Expr lo, hi;
        status = bound(e->args[d], ranges, &lo, &hi);
        if (!status.ok()) return;
        Expr room = simplify(src->shape[d] - 1 - hi);
        for (auto [margin, what] : {std::pair{lo, "below 0"}, std::pair{room, "past the end"}}) {
          Proof p = prove_nonnegative(margin);
          std::string msg = "'" + t->name + "' reads " + to_string(e) + ": index " + std::to_string(d) +
                            " spans [" + to_string(lo) + ", " + to_string(hi) + "], dim " +
                            std::to_string(d) + " of '" + src->name + "' is " + to_string(src->shape[d]);
          if (p == Proof::kFalse) {
            status = out_of_range("out of bounds (%s): %s", what, msg.c_str());
            return;
          }
          if (p == Proof::kUnknown) {
            auto c = make(StmtKind::kCheck);
            c->a = margin >= Expr(int64_t{0});
            c->name = "out of bounds: " + msg;
            checks->push_back(c);
          }
        }
      }
    });
    KILN_RETURN_IF_ERROR(std::move(status));
  }
  return ok_status();
}

StmtPtr make_for(const Axis& a, Expr extent, ForKind k) {
  auto f = make(StmtKind::kFor);
  f->name = a->name;
  f->var = a->var;
  f->a = extent;
  f->for_kind = k;
  f->reduce_loop = a->reduce;
  return f;
}

Expr all_of(const std::vector<Expr>& conds) {
  Expr c;
  for (const Expr& e : conds) c = c.defined() ? (c && e) : e;
  return c;
}

StmtPtr guarded(const std::vector<Expr>& conds, StmtPtr body) {
  if (conds.empty()) return body;
  auto i = make(StmtKind::kIf);
  i->a = all_of(conds);
  i->body = {body};
  return i;
}

// Wraps `body` in the loops `leaves` (outermost first) and returns the outermost statement.
// Statements of stages computed at a loop (compute_at), by the loop's axis.
using Attached = std::map<const AxisNode*, std::vector<StmtPtr>>;

StmtPtr nest(const std::vector<Axis>& leaves, const std::map<const AxisNode*, Expr>& extents,
             const Stage& st, StmtPtr body, StmtPtr* innermost_loop, const Attached* attached = nullptr) {
  for (size_t i = leaves.size(); i-- > 0;) {
    auto f = make_for(leaves[i], extents.at(leaves[i].get()), st.kind_of(leaves[i].get()));
    if (f->for_kind == ForKind::kVectorized) f->simd_width = st.vector_width();
    auto at = attached ? attached->find(leaves[i].get()) : Attached::const_iterator();
    if (attached && at != attached->end()) {
      auto seq = make(StmtKind::kSeq);
      seq->body = at->second;
      seq->body.push_back(body);
      body = seq;
    }
    f->body = {body};
    if (i + 1 == leaves.size() && innermost_loop) *innermost_loop = f;
    body = f;
  }
  return body;
}

// The dims of `producer` that are read only with the variable of one of `consumer`'s loops at
// or outside `axis` (unsplit) — by the consumer, or by stages computed at the same loop whose
// own dims are fixed so: producer axis -> that variable.
std::map<const AxisNode*, Expr> fixed_dims(const Schedule& s, const Stage& producer, const Stage& consumer,
                                           const Axis& axis) {
  const auto& leaf = consumer.leaf_axes();
  size_t limit = std::find(leaf.begin(), leaf.end(), axis) - leaf.begin();
  std::map<const ExprNode*, const ExprNode*> consumer_var;  // consumer's own outer loop vars
  for (size_t i = 0; i <= limit && i < leaf.size(); ++i) consumer_var[leaf[i]->var.get()] = leaf[i]->var.get();
  const TensorNode* p = producer.tensor().get();
  std::vector<const ExprNode*> var_of(p->shape.size(), nullptr);
  std::vector<bool> ok(p->shape.size(), true);
  auto scan = [&](const Expr& body, const std::map<const ExprNode*, const ExprNode*>& to_consumer) {
    walk(rewrite(body, {}, s), [&](const Expr& e) {  // reads through inlined stages included
      if (e->kind != ExprKind::kLoad || e->tensor.get() != p) return;
      for (size_t d = 0; d < e->args.size() && d < ok.size(); ++d) {
        const Expr& ix = e->args[d];
        auto it = ix->kind == ExprKind::kVar ? to_consumer.find(ix.get()) : to_consumer.end();
        if (it == to_consumer.end() || (var_of[d] && var_of[d] != it->second))
          ok[d] = false;
        else
          var_of[d] = it->second;
      }
    });
  };
  scan(consumer.body(), consumer_var);
  for (const Stage& r : s.stages()) {
    if (r.attach_consumer() != consumer.tensor().get() || r.attach_axis() != axis || &r == &producer) continue;
    bool reads = false;  // only readers: they come after the producer, so this recursion ends
    walk(rewrite(r.body(), {}, s), [&](const Expr& e) { reads |= e->kind == ExprKind::kLoad && e->tensor.get() == p; });
    if (!reads) continue;
    std::map<const ExprNode*, const ExprNode*> to_consumer;
    for (const auto& [a, v] : fixed_dims(s, r, consumer, axis)) to_consumer[a->var.get()] = v.get();
    scan(r.body(), to_consumer);
  }
  std::map<const AxisNode*, Expr> fixed;
  const auto& pleaf = producer.leaf_axes();
  for (size_t d = 0; d < ok.size(); ++d) {
    const Axis& a = p->axes[d];
    if (!ok[d] || !var_of[d] || std::find(pleaf.begin(), pleaf.end(), a) == pleaf.end()) continue;
    for (const Axis& l : leaf)
      if (l->var.get() == var_of[d]) fixed[a.get()] = l->var;
  }
  return fixed;
}

// A cache stage computed at a loop: the region of it that one iteration of the loop reads.
struct Region {
  std::vector<Expr> lo;                // per dim: the first element (outer loop variables, dims)
  std::vector<Expr> extent;            // per dim: how many elements (the cache's loop extents)
  std::shared_ptr<TensorNode> buffer;  // the local buffer: the cache's name, the region's constant bound
};
using Regions = std::map<const TensorNode*, Region>;

// Reads of region caches become reads of their local buffers, relative to the region.
Expr relocate(const Expr& e, const Regions& regions) {
  if (regions.empty() || e->args.empty()) return e;
  auto n = std::make_shared<ExprNode>(*e.get());
  for (Expr& a : n->args) a = relocate(a, regions);
  auto it = n->kind == ExprKind::kLoad ? regions.find(n->tensor.get()) : regions.end();
  if (it != regions.end()) {
    n->tensor = it->second.buffer;
    for (size_t d = 0; d < n->args.size(); ++d) n->args[d] = simplify(n->args[d] - it->second.lo[d]);
  }
  return Expr(n);
}

// A constant that integer `e` never exceeds (the loop variables in it being >= 0), if one is seen:
// min(8, n - io * 8) + 2 is at most 10.
bool upper_const(const Expr& e, int64_t* v) {
  if (as_int(e, v)) return true;
  if (e->kind != ExprKind::kBinary) return false;
  int64_t a = 0, b = 0, c = 0;
  const bool ha = upper_const(e->args[0], &a), hb = upper_const(e->args[1], &b);
  switch (static_cast<BinOp>(e->op)) {
    case BinOp::kMin:
      if (!ha && !hb) return false;
      *v = ha && hb ? std::min(a, b) : (ha ? a : b);
      return true;
    case BinOp::kMax: *v = std::max(a, b); return ha && hb;
    case BinOp::kAdd: *v = a + b; return ha && hb;
    case BinOp::kSub:
      if (!ha || !as_int(e->args[1], &c)) return false;
      *v = a - c;
      return true;
    case BinOp::kMul:
      if (as_int(e->args[0], &c) && c >= 0 && hb) { *v = c * b; return true; }
      if (as_int(e->args[1], &c) && c >= 0 && ha) { *v = c * a; return true; }
      return false;
    default: return false;
  }
}

// The largest local buffer (elements): it lives on the stack of the loop body.
constexpr int64_t kMaxLocalElements = int64_t{1} << 16;

// The region of cache `p` that one iteration of `consumer`'s loop `p.attach_axis()` reads: bounds
// inference over the loops inside it (`leaf`, `extents`: the consumer's loops, outermost first),
// the consumer's body read through `sub` (its axes as loop expressions). `clamp`: the consumer has
// guarded tails (loops that run past an extent), so the region is cut to the cache's shape.
// The reads of a cache by a cache computed at the same loop, over that cache's region.
struct CacheReader {
  const Stage* stage;
  Subst sub;      // its axes as its region's start + its loop variables
  Ranges ranges;  // its loops
};

Expected<Region> region_of(const Schedule& s, const Stage& p, const Stage& consumer, const std::vector<Axis>& leaf,
                           const std::map<const AxisNode*, Expr>& extents, const Subst& sub, bool clamp,
                           const std::vector<CacheReader>& cache_readers) {
  const TensorNode* pt = p.tensor().get();
  const Axis& axis = p.attach_axis();
  const std::string where =
      "compute_at('" + pt->name + "', '" + consumer.tensor()->name + "', " + axis->name + ")";
  const size_t at = std::find(leaf.begin(), leaf.end(), axis) - leaf.begin();
  if (at == leaf.size())
    return invalid_argument("%s: %s is not a loop of '%s' where it is lowered", where.c_str(), axis->name.c_str(),
                            consumer.tensor()->name.c_str());
  Ranges ranges;
  for (size_t i = at + 1; i < leaf.size(); ++i)
    ranges[leaf[i]->var.get()] = {Expr(int64_t{0}), simplify(extents.at(leaf[i].get()) - 1)};
  const size_t nd = pt->shape.size();
  std::vector<Expr> lo(nd), hi(nd);
  Status status = ok_status();
  auto reads = [&](const Expr& body, const Ranges& rs) {
    walk(body, [&](const Expr& e) {
      if (!status.ok() || e->kind != ExprKind::kLoad || e->tensor.get() != pt) return;
      for (size_t d = 0; d < nd && status.ok(); ++d) {
        Expr l, h;
        status = bound(e->args[d], rs, &l, &h);
        lo[d] = lo[d].defined() ? simplify(min(lo[d], l)) : l;
        hi[d] = hi[d].defined() ? simplify(max(hi[d], h)) : h;
      }
    });
  };
  reads(rewrite(consumer.body(), sub, s), ranges);
  for (const CacheReader& r : cache_readers) reads(rewrite(r.stage->body(), r.sub, s), r.ranges);
  if (!status.ok()) return invalid_argument("%s: the region read: %s", where.c_str(), status.message().c_str());
  Region r;
  r.buffer = std::make_shared<TensorNode>();
  r.buffer->name = pt->name;
  r.buffer->placeholder = false;
  int64_t size = 1;
  for (size_t d = 0; d < nd; ++d) {
    if (!lo[d].defined())
      return invalid_argument("%s: '%s' does not read '%s'", where.c_str(), consumer.tensor()->name.c_str(), pt->name.c_str());
    Expr ext = simplify(hi[d] - lo[d] + 1);
    int64_t cap = 0, dim = 0;
    if (!upper_const(ext, &cap))
      return invalid_argument("%s: dim %zu of the region read per iteration spans %s elements, with no constant "
                              "bound for a local buffer (split the loops inside %s by constants)", where.c_str(), d,
                              to_string(ext).c_str(), axis->name.c_str());
    if (as_int(pt->shape[d], &dim)) cap = std::min(cap, dim);
    if (clamp) {  // a guarded tail runs the loops past the extent: compute no more than exists
      lo[d] = simplify(max(lo[d], Expr(int64_t{0})));
      ext = simplify(min(hi[d], pt->shape[d] - 1) - lo[d] + 1);
    }
    r.lo.push_back(lo[d]);
    r.extent.push_back(ext);
    r.buffer->shape.push_back(Expr(std::max<int64_t>(cap, 1)));
    size *= std::max<int64_t>(cap, 1);
    if (size > kMaxLocalElements)
      return invalid_argument("%s: the region read per iteration holds up to %lld elements, more than a local "
                              "buffer's %lld: compute it at an inner loop", where.c_str(),
                              static_cast<long long>(size), static_cast<long long>(kMaxLocalElements));
  }
  return r;
}

Expected<StmtPtr> lower_stage(const Schedule& s, const Stage& st, const std::map<const AxisNode*, Expr>& fixed = {},
                              const Region* region = nullptr, const Regions* outer_regions = nullptr) {
  const TensorNode* t = st.tensor().get();
  // What the stage writes: its buffer, or a region of it in a local buffer.
  const std::shared_ptr<TensorNode> out = region ? region->buffer : st.tensor();
  std::vector<Axis> leaf;
  for (const Axis& a : st.leaf_axes())
    if (!fixed.count(a.get())) leaf.push_back(a);
  std::map<const AxisNode*, Expr> value, extents;
  for (const auto& [a, v] : fixed) value[a] = v;
  std::map<const AxisNode*, size_t> pos;
  for (size_t i = 0; i < leaf.size(); ++i) {
    value[leaf[i].get()] = leaf[i]->var;
    extents[leaf[i].get()] = leaf[i]->extent;
    pos[leaf[i].get()] = i;
  }
  std::map<const AxisNode*, Expr> root_ext;  // the data-parallel axes' extents
  for (size_t d = 0; d < t->axes.size(); ++d) {
    root_ext[t->axes[d].get()] = region ? region->extent[d] : t->axes[d]->extent;
    if (region) extents[t->axes[d].get()] = region->extent[d];  // a region cache is not split
  }
  // Walk the relations backwards: each root axis gets its value in terms of the loops.
  std::vector<Expr> spatial_guards, reduce_guards;
  const auto& rels = st.relations();
  for (size_t r = rels.size(); r-- > 0;) {
    const Relation& rel = rels[r];
    if (rel.kind == RelationKind::kFuse) {
      Expr f = value.at(rel.parent.get());
      value[rel.outer.get()] = f / rel.inner->extent;
      value[rel.inner.get()] = f % rel.inner->extent;
      continue;
    }
    Expr parent = simplify(value.at(rel.outer.get()) * Expr(rel.factor) + value.at(rel.inner.get()));
    value[rel.parent.get()] = parent;
    int64_t ext;
    if (as_int(rel.parent->extent, &ext) && ext % rel.factor == 0) continue;
    auto po = pos.find(rel.outer.get()), pi = pos.find(rel.inner.get());
    if (po != pos.end() && pi != pos.end() && po->second < pi->second) {
      // The tail: the inner loop runs only as far as the parent's extent.
      extents[rel.inner.get()] =
          min(Expr(rel.factor), simplify(rel.parent->extent - rel.outer->var * Expr(rel.factor)));
      continue;
    }
    (rel.parent->reduce ? reduce_guards : spatial_guards).push_back(parent < rel.parent->extent);
  }
  Subst sub;
  std::vector<Expr> idx;
  for (size_t d = 0; d < t->axes.size(); ++d) {
    const Axis& a = t->axes[d];
    sub[a->var.get()] = region ? simplify(region->lo[d] + value.at(a.get())) : value.at(a.get());
    idx.push_back(value.at(a.get()));  // in a region: relative to its start
  }
  for (const Axis& a : st.reduce_axes()) sub[a->var.get()] = value.at(a.get());

  // Stages computed at one of this stage's loops, in producer-first order; a cache among them is
  // computed over the region read (by this stage and by the caches computed at the same loop,
  // so consumers first), into a local buffer allocated there.
  Regions regions;
  if (outer_regions) regions = *outer_regions;
  std::vector<const Stage*> caches;
  for (const Stage& p : s.stages())
    if (p.attach_consumer() == t && p.is_cache()) caches.push_back(&p);
  std::map<const Stage*, CacheReader> readers;
  for (size_t c = caches.size(); c-- > 0;) {
    const Stage& p = *caches[c];
    std::vector<CacheReader> cache_readers;
    for (size_t q = c + 1; q < caches.size(); ++q)
      if (caches[q]->attach_axis() == p.attach_axis()) cache_readers.push_back(readers.at(caches[q]));
    KILN_ASSIGN_OR_RETURN(Region r, region_of(s, p, st, leaf, extents, sub,
                                              !spatial_guards.empty() || !reduce_guards.empty(), cache_readers));
    CacheReader& self = readers[&p];
    self.stage = &p;
    const TensorNode* pt = p.tensor().get();
    for (size_t d = 0; d < pt->axes.size(); ++d) {
      self.sub[pt->axes[d]->var.get()] = simplify(r.lo[d] + pt->axes[d]->var);
      self.ranges[pt->axes[d]->var.get()] = {Expr(int64_t{0}), simplify(r.extent[d] - 1)};
    }
    for (const Axis& a : p.reduce_axes()) self.ranges[a->var.get()] = {Expr(int64_t{0}), simplify(a->extent - 1)};
    regions[pt] = std::move(r);
  }
  Attached attached;
  for (const Stage& p : s.stages()) {
    if (p.attach_consumer() != t) continue;
    std::vector<StmtPtr>& at = attached[p.attach_axis().get()];
    if (!p.is_cache()) {
      KILN_ASSIGN_OR_RETURN(StmtPtr ps, lower_stage(s, p, fixed_dims(s, p, st, p.attach_axis())));
      at.push_back(ps);
      continue;
    }
    const Region& r = regions.at(p.tensor().get());
    auto alloc = make(StmtKind::kAllocate);
    alloc->name = r.buffer->name;
    alloc->tensor = r.buffer;
    alloc->local = true;
    Expr size(int64_t{1});
    for (const Expr& d : r.buffer->shape) size = size * d;
    alloc->a = simplify(size);
    KILN_ASSIGN_OR_RETURN(StmtPtr ps, lower_stage(s, p, {}, &r, &regions));
    at.push_back(alloc);
    at.push_back(ps);
  }
  auto read = [&](const Expr& e) { return relocate(rewrite(e, sub, s), regions); };

  auto store = [&](Expr v) {
    auto s2 = make(StmtKind::kStore);
    s2->tensor = out;
    s2->indices = idx;
    s2->value = v;
    return s2;
  };
  const Expr& body = st.body();
  if (body->kind != ExprKind::kReduce)
    return nest(leaf, extents, st, guarded(spatial_guards, store(read(body))), nullptr, &attached);

  ReduceOp op = static_cast<ReduceOp>(body->op);
  Expr src = read(body->args[0]);
  auto first_reduce = std::find_if(leaf.begin(), leaf.end(), [](const Axis& a) { return a->reduce; });
  bool reduce_inner = std::all_of(first_reduce, leaf.end(), [](const Axis& a) { return a->reduce; });
  if (reduce_inner) {
    // Accumulate in a scalar: spatial loops { acc = init; reduction loops { acc op= src }; out = acc }.
    const std::string acc = "acc_" + t->name;
    auto acc_node = std::make_shared<ExprNode>(*var(acc).get());
    acc_node->dtype = DType::kF32;
    Expr acc_var(acc_node);
    auto let = make(StmtKind::kLetFloat);
    let->name = acc;
    let->value = reduce_init(op);
    auto update = make(StmtKind::kAssign);
    update->name = acc;
    update->value = combine(op, acc_var, src);
    StmtPtr inner_loop;
    StmtPtr rloops = nest(std::vector<Axis>(first_reduce, leaf.end()), extents, st,
                          guarded(reduce_guards, update), &inner_loop, &attached);
    if (inner_loop) {
      inner_loop->accumulator = acc;
      inner_loop->reduce_op = static_cast<int>(op);
      inner_loop->reduce_lanes = st.lanes();
    }
    auto seq = make(StmtKind::kSeq);
    seq->body = {let, rloops, store(acc_var)};
    return nest(std::vector<Axis>(leaf.begin(), first_reduce), extents, st,
                guarded(spatial_guards, seq), nullptr, &attached);
  }
  // A reduction loop outside a data-parallel one: initialise the output, then update it in place.
  std::vector<Expr> root_idx;
  std::vector<Axis> init_axes;
  for (const Axis& a : t->axes) {
    auto fx = fixed.find(a.get());
    root_idx.push_back(fx == fixed.end() ? a->var : fx->second);
    if (fx == fixed.end()) init_axes.push_back(a);
  }
  auto init = make(StmtKind::kStore);
  init->tensor = out;
  init->indices = root_idx;
  init->value = reduce_init(op);
  Stage plain(st.tensor());
  StmtPtr init_nest = nest(init_axes, root_ext, plain, init, nullptr);
  auto load = std::make_shared<ExprNode>();
  load->kind = ExprKind::kLoad;
  load->tensor = out;
  load->args = idx;
  std::vector<Expr> guards = spatial_guards;
  guards.insert(guards.end(), reduce_guards.begin(), reduce_guards.end());
  StmtPtr update = nest(leaf, extents, st, guarded(guards, store(combine(op, Expr(load), src))), nullptr, &attached);
  auto seq = make(StmtKind::kSeq);
  seq->body = {init_nest, update};
  return StmtPtr(seq);
}

}  // namespace

Expected<LoweredFunc> lower(const Schedule& schedule, const std::vector<Tensor>& args,
                            const std::string& name) {
  if (!schedule.error().empty()) return invalid_argument("%s", schedule.error().c_str());
  for (const Stage& st : schedule.stages()) KILN_RETURN_IF_ERROR(check_stage(schedule, st));

  std::set<const TensorNode*> in_args;
  for (const Tensor& a : args) in_args.insert(a.node().get());
  for (const Tensor& o : schedule.outputs())
    if (!in_args.count(o.node().get()))
      return invalid_argument("lower '%s': output '%s' is not among the arguments", name.c_str(),
                              o->name.c_str());
  LoweredFunc f;
  f.name = name;
  f.args = args;
  // Symbolic dims in argument order; every other shape must be expressible with them.
  std::set<const ExprNode*> known;
  for (const Tensor& a : args)
    for (const Expr& d : a->shape)
      walk(d, [&](const Expr& e) {
        if (e->kind == ExprKind::kVar && known.insert(e.get()).second) f.dims.push_back(e);
      });
  Status status = ok_status();
  for (const Stage& st : schedule.stages()) {
    auto check_vars = [&](const Expr& x, const char* where) {
      walk(x, [&](const Expr& e) {
        if (!status.ok()) return;
        if (e->kind == ExprKind::kLoad && e->tensor->placeholder && !in_args.count(e->tensor.get()))
          status = invalid_argument("lower '%s': placeholder '%s' is read by '%s' but is not an argument",
                                    name.c_str(), e->tensor->name.c_str(), st.tensor()->name.c_str());
        if (e->kind == ExprKind::kVar && where && !known.count(e.get()))
          status = invalid_argument("lower '%s': symbolic dim '%s' in the %s of '%s' is bound by no argument",
                                    name.c_str(), e->name.c_str(), where, st.tensor()->name.c_str());
      });
    };
    for (const Expr& d : st.tensor()->shape) check_vars(d, "shape");
    for (const Axis& a : st.reduce_axes()) check_vars(a->extent, "reduction extent");
    check_vars(st.body(), nullptr);
    KILN_RETURN_IF_ERROR(std::move(status));
  }

  auto body = make(StmtKind::kSeq);
  KILN_RETURN_IF_ERROR(check_bounds(schedule, &body->body));
  for (const Stage& st : schedule.stages()) {
    if (st.inlined() || in_args.count(st.tensor().get())) continue;
    if (st.is_cache() && st.attach_consumer()) continue;  // a local buffer where it is computed
    auto alloc = make(StmtKind::kAllocate);
    alloc->name = st.tensor()->name;
    alloc->tensor = st.tensor();
    Expr size(int64_t{1});
    for (const Expr& d : st.tensor()->shape) size = size * d;
    alloc->a = simplify(size);
    body->body.push_back(alloc);
  }
  for (const Stage& st : schedule.stages()) {
    if (st.inlined() || st.attach_consumer()) continue;
    KILN_ASSIGN_OR_RETURN(StmtPtr stage, lower_stage(schedule, st), "lower '%s'", name.c_str());
    body->body.push_back(stage);
  }
  f.body = body;
  return f;
}

std::string to_string(const LoweredFunc& f) {
  std::string s = f.name + "(";
  for (size_t i = 0; i < f.args.size(); ++i) {
    s += (i ? ", " : "") + f.args[i]->name + ": float32[";
    for (size_t d = 0; d < f.args[i]->shape.size(); ++d)
      s += (d ? ", " : "") + to_string(f.args[i]->shape[d]);
    s += "]";
  }
  for (const Expr& d : f.dims) s += ", " + d->name + ": int64";
  s += ") {\n" + to_string(f.body, 1) + "}\n";
  return s;
}

}  // namespace kiln::dsl
