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
#include "runtime/execution_cancel.h"
#include "runtime/execution_pool.h"
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

ExecutionState::ExecutionState() : pool_(std::make_unique<Pool>()) {}
ExecutionState::~ExecutionState() = default;

ExecutionState::Stats ExecutionState::stats() const {
  return {pool_->recycled(), pool_->parked_bytes(), pool_->planned_bytes(), pool_->planned_outputs()};
}

bool ExecutionState::take_new_plan() { return pool_->take_new_plan(); }

void ExecutionState::share_plan_memory(std::shared_ptr<PlanMemory> memory) {
  pool_->share_plan_memory(std::move(memory));
}

void ExecutionState::use_arena_layout(std::shared_ptr<const ArenaLayout> layout, bool keep_bins) {
  pool_->use_arena_layout(std::move(layout), keep_bins);
}

bool ExecutionState::has_arena_layout() const { return pool_->has_arena_layout(); }

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

Expected<std::shared_ptr<const ArenaLayout>> GraphExecutor::layout_arena(const model::ArenaPlan& plan) const {
  std::unordered_map<const ir::Value*, const model::PlannedValue*> planned;
  for (const model::PlannedValue& pv : plan.values) planned[pv.value] = &pv;
  auto layout = std::make_shared<ArenaLayout>();
  layout->arena_bytes = plan.arena_bytes;
  size_t found = 0;
  for (const Step& step : steps_) {
    layout->step_begin.push_back(static_cast<uint32_t>(layout->entries.size()));
    for (const ir::Value* v : step.node->outputs()) {
      auto it = v ? planned.find(v) : planned.end();
      if (it == planned.end()) continue;
      layout->entries.push_back({it->second->offset, it->second->size, v, step.node});
      ++found;
    }
  }
  layout->step_begin.push_back(static_cast<uint32_t>(layout->entries.size()));
  if (found != plan.values.size())
    return invalid_argument("the arena plan places %zu values, %zu of them outputs of graph '%s''s nodes",
                            plan.values.size(), found, graph_->name().c_str());
  std::unordered_map<const ir::Node*, size_t> step_of;
  for (size_t s = 0; s < steps_.size(); ++s) step_of[steps_[s].node] = s;
  layout->workspace.resize(steps_.size());
  for (const model::PlannedWorkspace& pw : plan.workspaces) {
    auto it = step_of.find(pw.node);
    if (it == step_of.end())
      return invalid_argument("the arena plan has a workspace for node %s, not a step of graph '%s'",
                              pw.node ? pw.node->label().c_str() : "?", graph_->name().c_str());
    layout->workspace[it->second] = {pw.offset, pw.size};
  }
  return std::shared_ptr<const ArenaLayout>(std::move(layout));
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
  // The caller's cancellation flag (execution_cancel.h), read once: a relaxed load per node.
  const std::atomic<bool>* cancel = ExecutionCancelScope::current();
  for (size_t step_index = 0; step_index < steps_.size(); ++step_index) {
    const Step& step = steps_[step_index];
    if (KILN_UNLIKELY(cancel != nullptr) && cancel->load(std::memory_order_relaxed))
      return execution_cancelled(step.node->label(), step_index, steps_.size());
    if (state) state->pool_->begin_step(step_index);
    in.clear();
    for (int s : step.inputs) in.push_back(s >= 0 ? &slots[static_cast<size_t>(s)] : nullptr);
    out.clear();
    out.resize(step.outputs.size());
    ops::KernelContext ctx(*step.node, in.data(), in.size(), &out, &runner, recycler);
    int64_t profile_start = KILN_UNLIKELY(profiler::enabled()) ? profiler::now_ns() : -1;
    // The kernel's workspace from the arena's free part during this step, where it fits.
    kernels::WorkspaceLenderScope lender(state ? state->pool_->lender(step_index) : kernels::WorkspaceLender{});
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
