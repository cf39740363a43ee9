// GraphExecutor: reference execution of an IR graph.
#include "runtime/graph_executor.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <unordered_set>

#include "core/fault_inject.h"
#include "core/logging.h"
#include "core/offset_assignment.h"
#include "kernels/kernel_registry.h"
#include "profiler/profiler.h"
#include "runtime/plan_memory.h"

namespace kiln::rt {

struct GraphExecutor::Step {
  const ir::Node* node;
  const ops::KernelFn* kernel;  // the reference kernel, run when `fast` is null
  // The fast kernel select_kernel prepared for the node (weights packed, primitives made),
  // or null; its run() is const, so concurrent runs share it.
  std::unique_ptr<kernels::Kernel> fast;
  std::string implementation;  // fast->implementation(), or "reference"
  std::vector<int> inputs;   // slot per input, -1 if omitted
  std::vector<int> outputs;  // slot per output, -1 if omitted
  std::vector<int> release;  // slots whose last reader is this step
};

// Exposes the slots of a running graph to its subgraphs, by name.
class GraphExecutor::StepScope : public Scope {
 public:
  StepScope(const GraphExecutor& ex, const std::vector<RuntimeValue>& slots, const Scope* parent)
      : ex_(ex), slots_(slots), parent_(parent) {}
  const RuntimeValue* lookup(const std::string& name) const override {
    auto it = ex_.slot_by_name_.find(name);
    if (it != ex_.slot_by_name_.end()) {
      const RuntimeValue& v = slots_[static_cast<size_t>(it->second)];
      if (!v.is_none()) return &v;
    }
    return parent_ ? parent_->lookup(name) : nullptr;
  }

 private:
  const GraphExecutor& ex_;
  const std::vector<RuntimeValue>& slots_;
  const Scope* parent_;
};

class GraphExecutor::StepSubgraphRunner : public ops::SubgraphRunner {
 public:
  StepSubgraphRunner(const GraphExecutor& ex, const Scope& scope) : ex_(ex), scope_(scope) {}
  Expected<std::vector<RuntimeValue>> run(const ir::Graph& body, const std::vector<RuntimeValue>& inputs) override {
    auto it = ex_.subgraph_executors_.find(&body);
    if (it == ex_.subgraph_executors_.end())
      return internal_error("subgraph '%s' is not a subgraph of a node of graph '%s'",
                            body.name().c_str(), ex_.graph_->name().c_str());
    std::vector<RuntimeValue> outputs;
    KILN_RETURN_IF_ERROR(it->second->run_positional(inputs, &outputs, &scope_), "in subgraph '%s'",
                         body.name().c_str());
    return outputs;
  }

 private:
  const GraphExecutor& ex_;
  const Scope& scope_;
};

// ---- ExecutionState ------------------------------------------------------------------------

// The memory plan an execution state makes from its first execution, and the one block of
// memory it lays the outputs of every later execution out in. The first execution records, in order, each output it was asked for (its
// bytes) and the point where that output's block was parked free again; the state's
// executions all have the same input shapes (SignatureStates keeps one state per shape
// signature), so the next ones ask for the same sizes in the same order. assign_offsets (the
// compiler's offset assignment) places those lifetimes in one block, and from then on the
// r-th output asked for is a tensor at its planned offset: no arena lock, no size lookup, and
// the block is the plan's size, not the sum of every size the exact-size pool kept.
//
// The plan is only used while an execution keeps to the recorded order: every request and
// every release is checked against it, and on the first difference (a data-dependent shape,
// a failed step, a tensor some caller kept) the rest of the execution takes its memory from
// the arena as before. Planned tensors handed out are tracked one by one, and a plan some of
// whose tensors did not come back by the end of an execution is dropped, so the block is
// never handed out twice. The block stays alive as long as any of its tensors does (each
// tensor's deleter holds the PlannedBlock).
class PlannedBlock final : public TensorAllocator {
 public:
  explicit PlannedBlock(Tensor memory, size_t max_freed) : memory_(std::move(memory)) {
    freed_.reserve(max_freed);
  }
  char* base() { return static_cast<char*>(memory_.raw_data()); }
  size_t size() const { return memory_.storage_bytes(); }
  // Hands out `next` once: Tensor::allocate under a scope of this block takes it.
  void* allocate(size_t) override { return std::exchange(next_, nullptr); }
  // A planned tensor's last owner went away without being parked (a view in another value
  // kept the block, and that value was dropped): noted for the pool to see at its next trim.
  void deallocate(void* p, size_t) override {
    std::lock_guard lock(mutex_);
    if (freed_.size() < freed_.capacity()) freed_.push_back(p);
  }
  void set_next(void* p) { next_ = p; }
  // Moves the blocks freed since the last call into `out` (cleared first).
  void take_freed(std::vector<void*>* out) {
    out->clear();
    std::lock_guard lock(mutex_);
    out->swap(freed_);
    freed_.reserve(out->capacity());
  }

 private:
  Tensor memory_;
  void* next_ = nullptr;
  std::mutex mutex_;
  std::vector<void*> freed_;
};

// Finished tensors by block size, sorted; each bin's vector keeps its capacity, so parking
// and taking allocate nothing once the first execution has sized the bins. After the first
// execution, the outputs come from the plan above where it holds.
class ExecutionState::Pool final : public ops::OutputRecycler {
 public:
  bool reuse(DataType dtype, const std::vector<int64_t>& dims, TensorInit init, Tensor* out) override {
    size_t bytes = 0;
    if (!Tensor::storage_bytes_for(dtype, dims, &bytes)) return false;
    if (plan_ && !diverged_ && take_planned(bytes, dtype, dims, init, out)) return true;
    Bin& bin = bin_of(bytes);
    ++bin.demand;
    if (bin.tensors.empty()) {
      if (!recording()) return false;
      // Recording: allocate here (as the kernel context would) to learn the block's address.
      Expected<Tensor> fresh = Tensor::allocate(dtype, dims, init);
      if (!fresh.ok()) return false;
      *out = std::move(fresh).value();
    } else {
      *out = std::move(bin.tensors.back());
      bin.tensors.pop_back();
      out->reuse_storage(dtype, dims, init);
      parked_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
      recycled_.fetch_add(1, std::memory_order_relaxed);
    }
    if (recording()) record_request(bytes, out->raw_data());
    return true;
  }

  bool reuse_view(const Tensor& base, const std::vector<int64_t>& dims, Tensor* out) override {
    if (shells_.empty()) return false;
    *out = std::move(shells_.back());
    shells_.pop_back();
    out->become_view_of(base, dims);
    recycled_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Takes the tensor of `v` when its block is free to reuse, or else keeps the tensor object
  // without its storage as a shell for a view (reuse_view); `v` is empty afterwards.
  void park(RuntimeValue& v) {
    if (v.is_tensor() && !v.tensor().storage_reusable() && shells_.size() < kMaxShells) {
      v.tensor().release_storage();
      shells_.push_back(std::move(v.tensor()));
    } else if (v.is_tensor() && v.tensor().storage_reusable()) {
      if (recording()) {
        // Straight back to the arena, whose free lists reuse blocks across sizes (up to twice
        // as large): the recorded execution's peak is what the process's peak memory is.
        record_release(v.tensor().raw_data());
      } else if (!park_planned(v.tensor())) {
        size_t bytes = v.tensor().storage_bytes();
        bin_of(bytes).tensors.push_back(std::move(v.tensor()));
        parked_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      }
    }
    v = RuntimeValue();
  }

  // At the end of an execution: each size keeps at most as many blocks as this execution
  // asked the pool for; the rest go back to the arena. So shapes that change do not hoard
  // memory, and the blocks of tensors kernels allocate by themselves (not through the kernel
  // context, so never asked for here) return to the arena's free lists, where those kernels
  // find them again. The first execution's record becomes the plan here.
  void trim() {
    if (recording()) {
      make_plan();
    } else if (plan_) {
      // Executions that keep leaving the plan (shapes that depend on the data) drop it, and
      // the next one records again (up to kMaxRecordings).
      diverged_runs_ = diverged_ ? diverged_runs_ + 1 : 0;
      if (diverged_runs_ >= kMaxDivergedRuns) {
        drop_plan();
      } else {
        check_plan_returned();
      }
    }
    for (Bin& b : bins_) {
      while (b.tensors.size() > b.demand) {
        b.tensors.pop_back();
        parked_bytes_.fetch_sub(b.bytes, std::memory_order_relaxed);
      }
      b.demand = 0;
    }
    next_event_ = 0;
    diverged_ = false;
  }
  void clear() {
    bins_.clear();
    shells_.clear();
    drop_plan();
    trace_ = Trace();
    recordings_ = 0;
    parked_bytes_.store(0, std::memory_order_relaxed);
  }
  // Read by Model::stats while an execution may be running.
  uint64_t recycled() const { return recycled_.load(std::memory_order_relaxed); }
  size_t parked_bytes() const { return parked_bytes_.load(std::memory_order_relaxed); }
  size_t planned_bytes() const { return planned_bytes_.load(std::memory_order_relaxed); }
  uint64_t planned_outputs() const { return planned_outputs_.load(std::memory_order_relaxed); }
  bool take_new_plan() { return std::exchange(new_plan_, false); }
  void share_plan_memory(std::shared_ptr<PlanMemory> memory) { shared_ = std::move(memory); }

 private:
  struct Bin {
    size_t bytes;
    std::vector<Tensor> tensors;
    size_t demand = 0;  // outputs of this size asked for in this execution
  };
  // One event of an execution, in order: output `request` asked for, or its block parked free.
  struct Event {
    uint32_t request;
    bool release;
  };
  struct Trace {
    std::vector<size_t> bytes;            // per request
    std::vector<Event> events;
    std::unordered_map<const void*, uint32_t> live;  // block -> request, while recording
    bool valid = true;  // false once something the plan cannot follow happened
  };
  enum class Held : uint8_t { kInPool, kOut, kFreed };
  struct Plan {
    size_t block_bytes = 0;
    std::shared_ptr<PlannedBlock> block;  // made by materialize()
    uint64_t generation = 0;              // of the shared PlanMemory the block came from
    std::vector<size_t> bytes, offsets;   // per request
    std::vector<Event> events;
    std::vector<Tensor> tensors;          // per request, while in the pool
    std::vector<Held> held;               // per request
    std::vector<size_t> offset_index;     // per request: its offset's index in `offsets_sorted`
    std::vector<size_t> offsets_sorted;   // the distinct offsets
    std::vector<uint32_t> out_at;         // per distinct offset: the request handed out there
    std::vector<void*> freed;             // scratch for PlannedBlock::take_freed
  };

  // Executions recorded at most per state: a model whose executions keep differing (shapes
  // that depend on the data) goes on with the exact-size pool alone.
  static constexpr int kMaxRecordings = 2;
  // Requests recorded at most: a plan is made for a model's activations, not for unbounded
  // loops of them.
  static constexpr size_t kMaxRequests = 1 << 16;
  // Executions in a row that left the plan before it is dropped.
  static constexpr int kMaxDivergedRuns = 3;

  bool recording() const { return !plan_ && recordings_ < kMaxRecordings && trace_.valid; }

  void record_request(size_t bytes, const void* data) {
    if (trace_.bytes.size() >= kMaxRequests) {
      trace_.valid = false;
      return;
    }
    auto r = static_cast<uint32_t>(trace_.bytes.size());
    trace_.bytes.push_back(bytes);
    trace_.events.push_back({r, false});
    trace_.live[data] = r;
  }
  void record_release(const void* data) {
    auto it = trace_.live.find(data);
    if (it == trace_.live.end()) return;  // a block a kernel allocated by itself
    trace_.events.push_back({it->second, true});
    trace_.live.erase(it);
  }

  // The end of a recorded execution: lifetimes in event positions (blocks never parked free
  // live to the end), their offsets, the block, and a tensor per request.
  void make_plan() {
    ++recordings_;
    Trace trace = std::move(trace_);
    trace_ = Trace();
    const size_t n = trace.bytes.size();
    if (!trace.valid || n == 0) return;
    std::vector<int> first(n), last(n, static_cast<int>(trace.events.size()));
    for (size_t e = 0; e < trace.events.size(); ++e)
      (trace.events[e].release ? last : first)[trace.events[e].request] = static_cast<int>(e);
    auto plan = std::make_unique<Plan>();
    plan->block_bytes = assign_offsets(trace.bytes, first, last, &plan->offsets);
    if (plan->block_bytes == 0) return;
    plan->bytes = std::move(trace.bytes);
    plan->events = std::move(trace.events);
    plan->offsets_sorted = plan->offsets;
    std::sort(plan->offsets_sorted.begin(), plan->offsets_sorted.end());
    plan->offsets_sorted.erase(std::unique(plan->offsets_sorted.begin(), plan->offsets_sorted.end()),
                               plan->offsets_sorted.end());
    plan->offset_index.resize(n);
    for (size_t r = 0; r < n; ++r)
      plan->offset_index[r] = index_of_offset(*plan, plan->offsets[r]);
    plan->out_at.assign(plan->offsets_sorted.size(), 0);
    plan->held.assign(n, Held::kFreed);
    plan->tensors.resize(n);
    plan->freed.reserve(n);
    plan_ = std::move(plan);
    new_plan_ = true;
  }

  // The plan's block and tensors, made by the first execution that follows the plan (so the
  // recorded execution's blocks can go back first: ExecutionState::take_new_plan).
  bool materialize() {
    Plan& p = *plan_;
    Expected<Tensor> memory = [&]() -> Expected<Tensor> {
      if (shared_) return shared_->block(p.block_bytes);
      TensorAllocatorScope heap(nullptr);  // one block of its own, not the arena's free lists
      return Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(p.block_bytes)},
                              TensorInit::kUninitialized);
    }();
    if (!memory.ok()) return false;
    if (shared_) p.generation = shared_->generation();
    p.block = std::make_shared<PlannedBlock>(std::move(memory).value(), p.bytes.size());
    for (size_t r = 0; r < p.bytes.size(); ++r)
      if (!make_planned_tensor(r)) return false;
    planned_bytes_.store(p.block_bytes, std::memory_order_relaxed);
    return true;
  }

  static size_t index_of_offset(const Plan& plan, size_t offset) {
    return static_cast<size_t>(
        std::lower_bound(plan.offsets_sorted.begin(), plan.offsets_sorted.end(), offset) -
        plan.offsets_sorted.begin());
  }

  // (Re)makes request r's tensor over its place in the block: a uint8 tensor of its bytes,
  // which reuse_storage turns into whatever the execution asks for.
  bool make_planned_tensor(size_t r) {
    Plan& p = *plan_;
    p.block->set_next(p.block->base() + p.offsets[r]);
    TensorAllocatorScope scope(p.block);
    Expected<Tensor> t = Tensor::allocate(DataType::kUInt8, {static_cast<int64_t>(p.bytes[r])},
                                          TensorInit::kUninitialized);
    if (!t.ok()) return false;
    p.tensors[r] = std::move(t).value();
    p.held[r] = Held::kInPool;
    return true;
  }

  // The next event must be request r of `bytes`, with r's tensor in the pool.
  bool take_planned(size_t bytes, DataType dtype, const std::vector<int64_t>& dims, TensorInit init,
                    Tensor* out) {
    // A plan over a shared block another state replaced or retired moves to the current one
    // at the start of an execution (every tensor of it is in the pool then, or freed).
    if (plan_->block && shared_ && next_event_ == 0 && plan_->generation != shared_->generation()) {
      plan_->block.reset();
      for (size_t r = 0; r < plan_->tensors.size(); ++r) {
        plan_->tensors[r] = Tensor();
        plan_->held[r] = Held::kFreed;
      }
    }
    if (!plan_->block && !materialize()) {
      drop_plan();  // no memory for it: none of its tensors is out, the arena serves as before
      return diverge();
    }
    Plan& p = *plan_;
    if (next_event_ >= p.events.size() || p.events[next_event_].release) return diverge();
    const uint32_t r = p.events[next_event_].request;
    if (p.bytes[r] != bytes) return diverge();
    if (p.held[r] == Held::kFreed && !make_planned_tensor(r)) return diverge();
    if (p.held[r] != Held::kInPool) return diverge();
    ++next_event_;
    *out = std::move(p.tensors[r]);
    p.held[r] = Held::kOut;
    p.out_at[p.offset_index[r]] = r;
    out->reuse_storage(dtype, dims, init);
    recycled_.fetch_add(1, std::memory_order_relaxed);
    planned_outputs_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  bool diverge() {
    diverged_ = true;
    return false;
  }

  // Puts a planned tensor back (checking the release against the plan); false for any other.
  bool park_planned(Tensor& t) {
    if (!plan_ || !plan_->block) return false;
    Plan& p = *plan_;
    char* data = static_cast<char*>(t.raw_data());
    if (data < p.block->base() || data >= p.block->base() + p.block->size()) return false;
    const size_t offset = static_cast<size_t>(data - p.block->base());
    const size_t index = index_of_offset(p, offset);
    const uint32_t r = index < p.out_at.size() ? p.out_at[index] : 0;
    if (index >= p.out_at.size() || p.offsets[r] != offset || p.held[r] != Held::kOut) {
      // Not a tensor the plan handed out (a copy sharing a planned block): let it go, and
      // follow the plan no further in this execution.
      diverged_ = true;
      t = Tensor();
      return true;
    }
    if (!diverged_) {
      if (next_event_ < p.events.size() && p.events[next_event_].release &&
          p.events[next_event_].request == r)
        ++next_event_;
      else
        diverged_ = true;
    }
    p.tensors[r] = std::move(t);
    p.held[r] = Held::kInPool;
    return true;
  }

  // After a planned execution: every tensor handed out is back, or its block was freed (a
  // view kept it and went); one still out is held by someone, so the plan goes (its block
  // lives on with that tensor) and the next execution records again.
  void check_plan_returned() {
    Plan& p = *plan_;
    if (!p.block) return;  // not made yet: nothing of it is out
    p.block->take_freed(&p.freed);
    for (void* q : p.freed) {
      const size_t index = index_of_offset(p, static_cast<size_t>(static_cast<char*>(q) - p.block->base()));
      if (index < p.out_at.size() && p.held[p.out_at[index]] == Held::kOut) p.held[p.out_at[index]] = Held::kFreed;
    }
    if (std::find(p.held.begin(), p.held.end(), Held::kOut) != p.held.end()) drop_plan();
  }
  void drop_plan() {
    diverged_runs_ = 0;
    if (!plan_) return;
    // A tensor of the plan still out is held by someone: the shared block must not be written
    // under it by this or any other state's plan again.
    if (shared_ && plan_->block &&
        std::find(plan_->held.begin(), plan_->held.end(), Held::kOut) != plan_->held.end())
      shared_->retire(plan_->block->base());
    planned_bytes_.store(0, std::memory_order_relaxed);
    plan_.reset();
  }

  // The bin of `bytes`, made on first use (the only allocation: a size's first execution).
  Bin& bin_of(size_t bytes) {
    auto it = std::lower_bound(bins_.begin(), bins_.end(), bytes,
                               [](const Bin& b, size_t n) { return b.bytes < n; });
    if (it == bins_.end() || it->bytes != bytes) it = bins_.insert(it, Bin{bytes, {}, 0});
    return *it;
  }
  // Shells kept at most: more than the views one execution makes of most models, and a bound
  // for those that make many.
  static constexpr size_t kMaxShells = 256;
  std::vector<Bin> bins_;
  std::vector<Tensor> shells_;
  Trace trace_;
  int recordings_ = 0;
  std::unique_ptr<Plan> plan_;
  std::shared_ptr<PlanMemory> shared_;  // the context's block for every state's plan, or none
  size_t next_event_ = 0;  // position in plan_->events of this execution
  bool diverged_ = false;  // this execution left the plan
  bool new_plan_ = false;  // made by the last trim, for take_new_plan
  int diverged_runs_ = 0;  // executions in a row that left it
  std::atomic<uint64_t> recycled_{0};
  std::atomic<size_t> parked_bytes_{0};
  std::atomic<size_t> planned_bytes_{0};
  std::atomic<uint64_t> planned_outputs_{0};
};

ExecutionState::ExecutionState() : pool_(std::make_unique<Pool>()) {}
ExecutionState::~ExecutionState() = default;

ExecutionState::Stats ExecutionState::stats() const {
  return {pool_->recycled(), pool_->parked_bytes(), pool_->planned_bytes(), pool_->planned_outputs()};
}

bool ExecutionState::take_new_plan() { return pool_->take_new_plan(); }

void ExecutionState::share_plan_memory(std::shared_ptr<PlanMemory> memory) {
  pool_->share_plan_memory(std::move(memory));
}

void ExecutionState::clear() {
  slots_.clear();
  step_outputs_.clear();
  input_bound_.clear();
  pool_->clear();
  executor_ = nullptr;
}

// ---- GraphExecutor -------------------------------------------------------------------------

GraphExecutor::GraphExecutor(const ir::Graph& graph) : graph_(&graph) {}
GraphExecutor::~GraphExecutor() = default;

Expected<std::unique_ptr<GraphExecutor>> GraphExecutor::create(std::shared_ptr<const ir::Graph> graph) {
  if (!graph) return invalid_argument("no graph to execute");
  std::unique_ptr<GraphExecutor> ex(new GraphExecutor(*graph));
  ex->owner_ = std::move(graph);
  KILN_RETURN_IF_ERROR(ex->prepare());
  return ex;
}

Expected<std::unique_ptr<GraphExecutor>> GraphExecutor::create_for_subgraph(const ir::Graph& graph) {
  std::unique_ptr<GraphExecutor> ex(new GraphExecutor(graph));
  KILN_RETURN_IF_ERROR(ex->prepare());
  return ex;
}

Status GraphExecutor::prepare() {
  KILN_RETURN_IF_ERROR(ir::verify(*graph_));
  for (const auto& v : graph_->values()) {
    int slot = num_slots_++;
    slot_of_[v.get()] = slot;
    slot_by_name_[v->name()] = slot;
    if (v->has_initializer()) constant_slots_.emplace_back(slot, v->initializer());
    if (v->is_outer_scope()) outer_slots_.emplace_back(slot, v->name());
  }
  for (const ir::Value* v : graph_->inputs()) input_slots_.push_back(slot_of_.at(v));
  is_input_slot_.assign(static_cast<size_t>(num_slots_), false);
  for (int slot : input_slots_) is_input_slot_[static_cast<size_t>(slot)] = true;
  is_constant_slot_.assign(static_cast<size_t>(num_slots_), false);
  for (const auto& [slot, t] : constant_slots_) is_constant_slot_[static_cast<size_t>(slot)] = true;
  for (const ir::Value* v : graph_->outputs()) output_slots_.push_back(slot_of_.at(v));

  std::unordered_set<int> keep(output_slots_.begin(), output_slots_.end());
  for (const auto& [slot, t] : constant_slots_) keep.insert(slot);
  for (const auto& [slot, name] : outer_slots_) keep.insert(slot);
  std::unordered_map<int, size_t> last_use;
  size_t fast_steps = 0;
  for (const auto& n : graph_->nodes()) {
    KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*n));
    KILN_RETURN_IF_ERROR(schema->validate(*n));
    if (!schema->kernel_fn())
      return unsupported("node %s: no reference kernel is registered", n->label().c_str());
    Step step{n.get(), &schema->kernel_fn(), kernels::select_kernel(*n), "reference", {}, {}, {}};
    if (step.fast) {
      step.implementation = step.fast->implementation();
      ++fast_steps;
    }
    for (const ir::Value* v : n->inputs()) {
      int slot = v ? slot_of_.at(v) : -1;
      step.inputs.push_back(slot);
      if (slot >= 0) last_use[slot] = steps_.size();
    }
    // Values a subgraph reads from this scope stay alive until this node has run.
    for (ir::Graph* g : n->subgraphs())
      for (const auto& sv : g->values())
        if (sv->is_outer_scope()) {
          auto it = slot_by_name_.find(sv->name());
          if (it != slot_by_name_.end()) last_use[it->second] = steps_.size();
        }
    for (const ir::Value* v : n->outputs()) step.outputs.push_back(v ? slot_of_.at(v) : -1);
    // Subgraph executors are made here, not on first use, so that runs never modify the
    // executor and may go on concurrently.
    for (ir::Graph* g : n->subgraphs()) {
      if (subgraph_executors_.count(g)) continue;
      KILN_ASSIGN_OR_RETURN(subgraph_executors_[g], create_for_subgraph(*g),
                            "node %s: subgraph '%s'", n->label().c_str(), g->name().c_str());
    }
    steps_.push_back(std::move(step));
  }
  for (const auto& [slot, step] : last_use)
    if (!keep.count(slot)) steps_[step].release.push_back(slot);
  KILN_LOG(kDebug, "prepared graph '%s': %zu steps (%zu on fast kernels), %d value slots", graph_->name().c_str(),
           steps_.size(), fast_steps, num_slots_);
  return ok_status();
}

size_t GraphExecutor::num_steps() const { return steps_.size(); }

const ir::Node& GraphExecutor::step_node(size_t step) const { return *steps_.at(step).node; }

const std::string& GraphExecutor::implementation(size_t step) const { return steps_.at(step).implementation; }

Status GraphExecutor::check_input(const ir::Value& decl, const RuntimeValue& v) const {
  // Sequences and optionals are checked by the kernels that read them.
  if (!v.is_tensor()) return ok_status();
  const Tensor& t = v.tensor();
  if (!t.defined()) return invalid_argument("input '%s' has no data", decl.name().c_str());
  if (decl.dtype() != DataType::kUndefined && t.dtype() != decl.dtype())
    return invalid_argument("input '%s' has dtype %s, the model expects %s", decl.name().c_str(),
                            dtype_name(t.dtype()), dtype_name(decl.dtype()));
  const Shape& s = decl.shape();
  if (!s.has_rank()) return ok_status();
  bool match = s.rank() == t.rank();
  for (int i = 0; match && i < s.rank(); ++i)
    if (s[i].is_static() && s[i].value != t.dim(i)) match = false;
  if (!match)
    return invalid_argument("input '%s' has shape %s, the model expects %s", decl.name().c_str(),
                            dims_to_string(t.dims()).c_str(), s.to_string().c_str());
  return ok_status();
}

Status GraphExecutor::run(const std::vector<NamedValue>& inputs, std::vector<RuntimeValue>* outputs,
                          const Scope* outer) const {
  std::vector<RuntimeValue> slots(static_cast<size_t>(num_slots_));
  for (const auto& [slot, t] : constant_slots_) slots[static_cast<size_t>(slot)] = *t;
  std::unordered_set<std::string> fed;
  for (const NamedValue& in : inputs) {
    const ir::Value* decl = nullptr;
    for (const ir::Value* v : graph_->inputs())
      if (v->name() == in.name) decl = v;
    if (!decl) {
      std::string names;
      for (const ir::Value* v : graph_->inputs()) names += (names.empty() ? "" : ", ") + v->name();
      return invalid_argument("the model has no input named '%s' (inputs: %s)", in.name.c_str(), names.c_str());
    }
    KILN_RETURN_IF_ERROR(check_input(*decl, in.value));
    slots[static_cast<size_t>(slot_of_.at(decl))] = in.value;
    fed.insert(in.name);
  }
  for (const ir::Value* v : graph_->inputs())
    if (!fed.count(v->name()) && !v->has_initializer())
      return invalid_argument("input '%s' (%s) was not given", v->name().c_str(), v->type().to_string().c_str());
  return finish_run(slots, outputs, outer);
}

Status GraphExecutor::run_indexed(const std::vector<std::pair<size_t, RuntimeValue>>& inputs,
                                  std::vector<RuntimeValue>* outputs) const {
  std::vector<RuntimeValue> slots(static_cast<size_t>(num_slots_));
  for (const auto& [slot, t] : constant_slots_) slots[static_cast<size_t>(slot)] = *t;
  const auto& decls = graph_->inputs();
  std::vector<bool> fed(decls.size(), false);
  for (const auto& [index, value] : inputs) {
    if (index >= decls.size())
      return invalid_argument("graph '%s' has %zu inputs, there is no input %zu",
                              graph_->name().c_str(), decls.size(), index);
    KILN_RETURN_IF_ERROR(check_input(*decls[index], value));
    slots[static_cast<size_t>(input_slots_[index])] = value;
    fed[index] = true;
  }
  for (size_t i = 0; i < decls.size(); ++i)
    if (!fed[i] && !decls[i]->has_initializer())
      return invalid_argument("input '%s' (%s) was not given", decls[i]->name().c_str(),
                              decls[i]->type().to_string().c_str());
  return finish_run(slots, outputs, nullptr);
}

Status GraphExecutor::finish_run(std::vector<RuntimeValue>& slots,
                                 std::vector<RuntimeValue>* outputs, const Scope* outer) const {
  KILN_RETURN_IF_ERROR(execute(slots, outer));
  outputs->clear();
  for (int slot : output_slots_) outputs->push_back(slots[static_cast<size_t>(slot)]);
  return ok_status();
}

Status GraphExecutor::run_positional(const std::vector<RuntimeValue>& inputs,
                                     std::vector<RuntimeValue>* outputs, const Scope* outer) const {
  std::vector<RuntimeValue> slots(static_cast<size_t>(num_slots_));
  for (const auto& [slot, t] : constant_slots_) slots[static_cast<size_t>(slot)] = *t;
  if (inputs.size() > input_slots_.size())
    return invalid_argument("graph '%s' takes %zu inputs, got %zu", graph_->name().c_str(), input_slots_.size(),
                            inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) slots[static_cast<size_t>(input_slots_[i])] = inputs[i];
  return finish_run(slots, outputs, outer);
}

Status GraphExecutor::execute(std::vector<RuntimeValue>& slots, const Scope* outer, ExecutionState* state) const {
  for (const auto& [slot, name] : outer_slots_) {
    const RuntimeValue* t = outer ? outer->lookup(name) : nullptr;
    if (!t) return invalid_argument("graph '%s' reads '%s' from an enclosing graph, which has no such value",
                                    graph_->name().c_str(), name.c_str());
    slots[static_cast<size_t>(slot)] = *t;
  }
  StepScope scope(*this, slots, outer);
  StepSubgraphRunner runner(*this, scope);
  // With a state, the vectors are the state's (sized by its first execution) and outputs
  // come from its pool; without, they are this call's own.
  std::vector<const RuntimeValue*> own_in;
  std::vector<RuntimeValue> own_out;
  std::vector<const RuntimeValue*>& in = state ? state->step_inputs_ : own_in;
  std::vector<RuntimeValue>& out = state ? state->step_outputs_ : own_out;
  ops::OutputRecycler* recycler = state ? state->pool_.get() : nullptr;
  for (const Step& step : steps_) {
    in.clear();
    for (int s : step.inputs) in.push_back(s >= 0 ? &slots[static_cast<size_t>(s)] : nullptr);
    out.clear();
    out.resize(step.outputs.size());
    ops::KernelContext ctx(*step.node, in.data(), in.size(), &out, &runner, recycler);
    int64_t profile_start = KILN_UNLIKELY(profiler::enabled()) ? profiler::now_ns() : -1;
    Status st;
    if (uint64_t event = fault::should_fail(fault::Site::kKernel); KILN_UNLIKELY(event != 0))
      st = fault::injected_error(fault::Site::kKernel, event, "node " + step.node->label());
    else
      st = step.fast ? step.fast->run(ctx) : (*step.kernel)(ctx);
    if (KILN_UNLIKELY(profile_start >= 0) && st.ok())
      profiler::record_op(*step.node, graph_->name(), step.implementation, in, out, profile_start);
    if (!st.ok()) {
      // Kernels name their node in their messages; add it only where one did not.
      if (st.to_string().find(step.node->label()) == std::string::npos)
        st.add_context("running node %s", step.node->label().c_str());
      return st;
    }
    for (size_t i = 0; i < step.outputs.size(); ++i) {
      if (step.outputs[i] < 0) continue;
      // An empty optional is a legitimate output (kNone); a tensor must hold data.
      if (out[i].is_tensor() && !out[i].tensor().defined())
        return internal_error("node %s did not produce output %zu", step.node->label().c_str(), i);
      slots[static_cast<size_t>(step.outputs[i])] = std::move(out[i]);
    }
    for (int s : step.release) {
      RuntimeValue& v = slots[static_cast<size_t>(s)];
      if (!state) {
        v = RuntimeValue();
      } else if (!is_input_slot_[static_cast<size_t>(s)]) {
        // An input's view stays for bind_input to re-point at the next execution's buffer.
        state->pool_->park(v);
      }
    }
  }
  return ok_status();
}

void GraphExecutor::attach(ExecutionState& state) const {
  if (state.executor_ == this) return;
  state.clear();
  state.executor_ = this;
  state.slots_.resize(static_cast<size_t>(num_slots_));
  // Constants are never released, so they stay in the state's slots from now on.
  for (const auto& [slot, t] : constant_slots_) state.slots_[static_cast<size_t>(slot)] = *t;
  state.input_bound_.assign(input_slots_.size(), false);
}

Status GraphExecutor::bind_input(ExecutionState& state, size_t index, DataType dtype,
                                 const std::vector<int64_t>& dims, void* data) const {
  attach(state);
  const auto& decls = graph_->inputs();
  if (index >= decls.size())
    return invalid_argument("graph '%s' has %zu inputs, there is no input %zu", graph_->name().c_str(),
                            decls.size(), index);
  RuntimeValue& slot = state.slots_[static_cast<size_t>(input_slots_[index])];
  if (slot.is_tensor() && slot.tensor().is_unowned_view() && slot.tensor().dtype() == dtype &&
      slot.tensor().dims() == dims) {
    slot.tensor().rebind_view(data);
  } else {
    Tensor view = Tensor::view(dtype, dims, data, nullptr);
    KILN_RETURN_IF_ERROR(check_input(*decls[index], view));
    slot = std::move(view);
  }
  state.input_bound_[index] = true;
  return ok_status();
}

Status GraphExecutor::run_bound(ExecutionState& state) const {
  attach(state);
  const auto& decls = graph_->inputs();
  for (size_t i = 0; i < decls.size(); ++i) {
    if (state.input_bound_[i]) continue;
    if (!decls[i]->has_initializer())
      return invalid_argument("input '%s' (%s) was not given", decls[i]->name().c_str(),
                              decls[i]->type().to_string().c_str());
    // An input with a default that an earlier execution fed: back to the default.
    RuntimeValue& slot = state.slots_[static_cast<size_t>(input_slots_[i])];
    const Tensor& fallback = *decls[i]->initializer();
    if (!slot.is_tensor() || slot.tensor().raw_data() != fallback.raw_data()) slot = fallback;
  }
  return execute(state.slots_, nullptr, &state);
}

const RuntimeValue& GraphExecutor::output(const ExecutionState& state, size_t index) const {
  KILN_CHECK(state.executor_ == this && index < output_slots_.size(), "output %zu of a state of another executor",
             index);
  return state.slots_[static_cast<size_t>(output_slots_[index])];
}

void GraphExecutor::end_run(ExecutionState& state) const {
  if (state.executor_ != this) return;
  // The outputs, and after a failed execution the values that did not reach their last
  // reader: everything but the inputs' views and the constants.
  for (size_t s = 0; s < state.slots_.size(); ++s)
    if (!is_input_slot_[s] && !is_constant_slot_[s] && !state.slots_[s].is_none())
      state.pool_->park(state.slots_[s]);
  for (RuntimeValue& v : state.step_outputs_) state.pool_->park(v);  // a failed step's
  state.pool_->trim();
  std::fill(state.input_bound_.begin(), state.input_bound_.end(), false);
}

}  // namespace kiln::rt
