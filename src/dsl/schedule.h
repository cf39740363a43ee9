// Schedules: how each compute is looped (split, tile, reorder, fuse, vectorize, unroll, parallel,
// compute_inline, compute_at, cache_read, cache_write). Primitives record what they did (the trace) and keep the first error,
// which lowering reports; so schedule code reads as a chain of calls, as in TVM.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dsl/stmt.h"
#include "dsl/tensor.h"

namespace kiln::dsl {

enum class RelationKind { kSplit, kFuse };

// split: parent = outer * factor + inner.  fuse: fused = outer * extent(inner) + inner.
struct Relation {
  RelationKind kind;
  Axis parent;  // split: the axis split; fuse: the fused result
  Axis outer;
  Axis inner;
  int64_t factor = 0;  // split only
};

class Stage {
 public:
  explicit Stage(std::shared_ptr<TensorNode> t);

  // The compute's data-parallel axes (one per dim) and its reduction axes.
  const std::vector<Axis>& axes() const { return tensor_->axes; }
  const std::vector<Axis>& reduce_axes() const { return reduce_axes_; }
  // The loops after the primitives so far, outermost first.
  const std::vector<Axis>& leaf_axes() const { return leaf_; }

  std::pair<Axis, Axis> split(const Axis& a, int64_t factor);
  // Splits x and y and orders their four loops (x outer, y outer, x inner, y inner) where x and
  // y were: TVM's tile, a 2-D block of x_factor x y_factor iterations innermost.
  struct Tiled {
    Axis x_outer, y_outer, x_inner, y_inner;
  };
  Tiled tile(const Axis& x, const Axis& y, int64_t x_factor, int64_t y_factor);
  Axis fuse(const Axis& outer, const Axis& inner);
  void reorder(const std::vector<Axis>& order);
  void vectorize(const Axis& a);
  // The same with a vector length of `width` elements (OpenMP simdlen: 8 is a 256-bit vector of
  // float32 on an AVX-512 machine): a tuning knob, since the widest vector is not always the fastest.
  void vectorize(const Axis& a, int64_t width);
  int64_t vector_width() const { return vector_width_; }
  void unroll(const Axis& a);
  void parallel(const Axis& a);
  // The innermost reduction loop accumulates in `lanes` partial results, each iteration updating
  // partial (k mod lanes), combined after the loop: several independent vector accumulators
  // instead of one dependency chain (TVM's rfactor onto a vectorised axis, as Kiln's SIMD
  // kernels do by hand). Reassociates the reduction, as the vector reduction already does.
  void reduce_lanes(int64_t lanes);
  int64_t lanes() const { return lanes_; }
  void compute_inline();
  // Computes this stage inside `consumer`'s loop `axis`, once per iteration of the loops
  // enclosing it: the dims that the consumer reads with the variable of such a loop are fixed
  // to it, the others run whole. Lowering checks that `axis` is one of the consumer's loops.
  void compute_at(const Stage& consumer, const Axis& axis);
  const TensorNode* attach_consumer() const { return attach_consumer_; }
  const Axis& attach_axis() const { return attach_axis_; }

  const std::shared_ptr<TensorNode>& tensor() const { return tensor_; }
  // What this stage computes per element: the tensor's body, with the reads that cache_read
  // redirected to a cache (and, after cache_write, a copy of the cache).
  const Expr& body() const { return body_; }
  // A stage made by cache_read / cache_write: computed at a loop (compute_at), it is computed
  // over the region of it that loop's stage reads, into a local buffer of that region's size.
  bool is_cache() const { return cache_; }
  const std::vector<Relation>& relations() const { return relations_; }
  ForKind kind_of(const AxisNode* a) const;
  bool inlined() const { return inlined_; }
  const std::string& error() const { return error_; }  // first illegal primitive, or empty
  const std::vector<std::string>& trace() const { return trace_; }

 private:
  friend class Schedule;
  bool check_leaf(const Axis& a, const char* primitive);
  void fail(const std::string& message);
  void annotate(const Axis& a, ForKind k, const char* primitive);

  std::shared_ptr<TensorNode> tensor_;
  Expr body_;
  bool cache_ = false;
  std::vector<Axis> reduce_axes_;
  std::vector<Axis> leaf_;
  std::vector<Relation> relations_;
  std::map<const AxisNode*, ForKind> kinds_;
  bool inlined_ = false;
  int64_t lanes_ = 0;
  int64_t vector_width_ = 0;
  const TensorNode* attach_consumer_ = nullptr;
  Axis attach_axis_;
  std::string error_;
  std::vector<std::string> trace_;
};

// The stages of every compute reachable from `outputs`, producers first.
class Schedule {
 public:
  explicit Schedule(std::vector<Tensor> outputs);
  Stage& operator[](const Tensor& t);
  const std::vector<Tensor>& outputs() const { return outputs_; }
  // TVM's cache_read: a new stage `T.local` (a copy of `t`, a placeholder or a compute) that the
  // stages of `readers` read instead of `t`. Computed at a loop of its one reader (compute_at), it
  // holds only the region that loop's iteration reads (bounds inference), in a local buffer;
  // else a whole copy. Errors (reported by lower): no readers, a reader that is not a compute of
  // this schedule or does not read `t`, `t` not read in this schedule.
  Tensor cache_read(const Tensor& t, const std::vector<Tensor>& readers);
  // TVM's cache_write: a new stage `T.local` computes what `t` did (its reduction, say), and `t`
  // becomes a copy of it, so that `T.local` computed at a loop of `t` accumulates a tile in a local
  // buffer written back once. Errors: a placeholder (nothing computes it), a tensor this schedule
  // does not compute, a stage already scheduled (call cache_write first).
  Tensor cache_write(const Tensor& t);
  // cache_read and cache_write insert a stage: Stage references taken before them are invalid.
  std::vector<Stage>& stages() { return stages_; }
  const std::vector<Stage>& stages() const { return stages_; }
  bool is_output(const TensorNode* t) const;
  Stage* find(const TensorNode* t);
  // The primitives applied, one line each, for the printed IR and the cache key.
  std::string trace() const;
  // Set when operator[] was given a tensor this schedule does not compute.
  const std::string& error() const { return error_; }

 private:
  Tensor fail(const std::string& message, const Tensor& t);
  std::string unique_name(const std::string& base) const;

  std::string error_;
  std::vector<std::string> trace_;  // cache_read / cache_write
  std::vector<Tensor> outputs_;
  std::vector<Stage> stages_;
  Stage unknown_;  // returned for a tensor not in the schedule; it keeps an error
};

}  // namespace kiln::dsl
