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
      return rewrite(e->tensor->body, inner, s);
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
  // Inside a parallel loop each thread computes its part: the loop's variable must fix a dim.
  for (const Axis& l : leaf) {
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
    walk(rewrite(r.tensor()->body, {}, s), [&](const Expr& e) { reads_it |= e->kind == ExprKind::kLoad && e->tensor == st.tensor(); });
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
  const Expr& body = st.tensor()->body;
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
    walk(t->body, [&](const Expr& e) {
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
  scan(consumer.tensor()->body, consumer_var);
  for (const Stage& r : s.stages()) {
    if (r.attach_consumer() != consumer.tensor().get() || r.attach_axis() != axis || &r == &producer) continue;
    bool reads = false;  // only readers: they come after the producer, so this recursion ends
    walk(rewrite(r.tensor()->body, {}, s), [&](const Expr& e) { reads |= e->kind == ExprKind::kLoad && e->tensor.get() == p; });
    if (!reads) continue;
    std::map<const ExprNode*, const ExprNode*> to_consumer;
    for (const auto& [a, v] : fixed_dims(s, r, consumer, axis)) to_consumer[a->var.get()] = v.get();
    scan(r.tensor()->body, to_consumer);
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

StmtPtr lower_stage(const Schedule& s, const Stage& st, const std::map<const AxisNode*, Expr>& fixed = {}) {
  const TensorNode* t = st.tensor().get();
  std::vector<Axis> leaf;
  for (const Axis& a : st.leaf_axes())
    if (!fixed.count(a.get())) leaf.push_back(a);
  // Stages computed at one of this stage's loops, in producer-first order.
  Attached attached;
  for (const Stage& p : s.stages())
    if (p.attach_consumer() == t)
      attached[p.attach_axis().get()].push_back(lower_stage(s, p, fixed_dims(s, p, st, p.attach_axis())));
  std::map<const AxisNode*, Expr> value, extents;
  for (const auto& [a, v] : fixed) value[a] = v;
  std::map<const AxisNode*, size_t> pos;
  for (size_t i = 0; i < leaf.size(); ++i) {
    value[leaf[i].get()] = leaf[i]->var;
    extents[leaf[i].get()] = leaf[i]->extent;
    pos[leaf[i].get()] = i;
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
  for (const Axis& a : t->axes) {
    sub[a->var.get()] = value.at(a.get());
    idx.push_back(value.at(a.get()));
  }
  for (const Axis& a : st.reduce_axes()) sub[a->var.get()] = value.at(a.get());

  auto store = [&](Expr v) {
    auto s2 = make(StmtKind::kStore);
    s2->tensor = st.tensor();
    s2->indices = idx;
    s2->value = v;
    return s2;
  };
  const Expr& body = t->body;
  if (body->kind != ExprKind::kReduce)
    return nest(leaf, extents, st, guarded(spatial_guards, store(rewrite(body, sub, s))), nullptr, &attached);

  ReduceOp op = static_cast<ReduceOp>(body->op);
  Expr src = rewrite(body->args[0], sub, s);
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
  init->tensor = st.tensor();
  init->indices = root_idx;
  init->value = reduce_init(op);
  std::map<const AxisNode*, Expr> root_ext;
  for (const Axis& a : t->axes) root_ext[a.get()] = a->extent;
  Stage plain(st.tensor());
  StmtPtr init_nest = nest(init_axes, root_ext, plain, init, nullptr);
  auto load = std::make_shared<ExprNode>();
  load->kind = ExprKind::kLoad;
  load->tensor = st.tensor();
  load->args = idx;
  std::vector<Expr> guards = spatial_guards;
  guards.insert(guards.end(), reduce_guards.begin(), reduce_guards.end());
  StmtPtr update = nest(leaf, extents, st, guarded(guards, store(combine(op, Expr(load), src))), nullptr, &attached);
  auto seq = make(StmtKind::kSeq);
  seq->body = {init_nest, update};
  return seq;
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
    check_vars(st.tensor()->body, nullptr);
    KILN_RETURN_IF_ERROR(std::move(status));
  }

  auto body = make(StmtKind::kSeq);
  KILN_RETURN_IF_ERROR(check_bounds(schedule, &body->body));
  for (const Stage& st : schedule.stages()) {
    if (st.inlined() || in_args.count(st.tensor().get())) continue;
    auto alloc = make(StmtKind::kAllocate);
    alloc->name = st.tensor()->name;
    alloc->tensor = st.tensor();
    Expr size(int64_t{1});
    for (const Expr& d : st.tensor()->shape) size = size * d;
    alloc->a = simplify(size);
    body->body.push_back(alloc);
  }
  for (const Stage& st : schedule.stages())
    if (!st.inlined() && !st.attach_consumer()) body->body.push_back(lower_stage(schedule, st));
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
