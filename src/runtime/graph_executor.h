// GraphExecutor: runs an IR graph node by node, each on the fast kernel the kernel registry
// selects for it (src/kernels) or else on its op's reference kernel. Prepared once (schema
// lookup, kernel selection and preparation, value slots, last-use points), run many times.
// Safe to run from several threads at once (subgraph executors are prepared up front);
// the C API's model executions (model_runtime.h) run through it on streams.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/runtime_value.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "model/arena_plan.h"
#include "ops/registry.h"

namespace kiln::rt {

class PlanMemory;

// The .kiln's arena plan (model/arena_plan.h) in an executor's terms, made once per loaded
// model by GraphExecutor::layout_arena: per step, the planned outputs in output order and the
// planned workspace of the step's kernel (kernels/cpu/lent_workspace.h).
struct ArenaLayout {
  struct Entry {
    size_t offset = 0;
    size_t size = 0;  // the storage a tensor of the value takes (Tensor::storage_bytes_for)
    const ir::Value* value = nullptr;
    const ir::Node* node = nullptr;  // its producer
  };
  size_t arena_bytes = 0;
  std::vector<Entry> entries;        // by step, then output index
  std::vector<uint32_t> step_begin;  // step s's entries: [step_begin[s], step_begin[s + 1])
  struct Range {
    size_t offset = 0;
    size_t size = 0;  // 0: no workspace planned for the step
  };
  std::vector<Range> workspace;  // per step
};

// Resolves values of enclosing graphs by name for subgraph execution.
class Scope {
 public:
  virtual ~Scope() = default;
  virtual const RuntimeValue* lookup(const std::string& name) const = 0;
};

struct NamedValue {
  std::string name;
  RuntimeValue value;
};

class GraphExecutor;

// What one execution at a time of a GraphExecutor keeps from one execution to the next (a
// model's execution context holds one): the value slots, the kernel context's vectors, the
// views of the caller's input buffers, and a pool of the tensors finished values left
// behind, whose blocks and dims vectors later outputs of the same size take as they are. So a
// model with fixed shapes executes without allocating anything once its first execution has
// filled the pool (tests/api/hot_path_allocations_test.cc counts it).
//
// From the second execution on, outputs are laid out in one block by a plan made from the
// first execution's record of sizes and lifetimes, as long as executions keep to it (see
// PlannedBlock in graph_executor.cc).
//
// Memory: a parked tensor's block stays out of the arena until a value of its size takes it
// (the arena's own free lists would hold it otherwise); sizes the last execution did not take
// go back to the arena when it ends, so shapes that change do not hoard memory.
class ExecutionState {
 public:
  ExecutionState();
  ~ExecutionState();
  ExecutionState(const ExecutionState&) = delete;
  ExecutionState& operator=(const ExecutionState&) = delete;

  struct Stats {
    uint64_t recycled_outputs = 0;  // outputs served from the pool, ever
    size_t parked_bytes = 0;        // blocks parked in the pool now (arena blocks)
    // The memory plan made from the first execution (graph_executor.cc, PlannedBlock): the
    // bytes of its block (from the heap, apart from the arena; 0 without a plan) and the
    // outputs placed in it, ever.
    size_t planned_bytes = 0;
    uint64_t planned_outputs = 0;
  };
  Stats stats() const;
  // True once, after the execution that recorded the sizes and lifetimes the state's memory
  // plan is made of: the blocks that execution used are not needed again (the next one lays
  // its outputs out in the plan's own block), so the caller may give its arena's free blocks
  // back to the system before that block is taken.
  bool take_new_plan();
  // Gives every parked block back (to the arena it came from) and forgets the slots.
  void clear();
  // Lays the memory plan out in `memory`'s block, shared with the other states of the same
  // execution context, instead of a block of its own (plan_memory.h). Set before the first
  // execution; the states sharing it must never run at the same time.
  void share_plan_memory(std::shared_ptr<PlanMemory> memory);
  // Lays the outputs out by the .kiln's arena plan from the first execution on: the output a
  // step asks for is a tensor at its planned offset in one block (the shared PlanMemory's),
  // with no recording. The plan is checked as it goes: an output whose size differs from the
  // plan, or whose place is still held (a view that outlives its base, a tensor someone kept),
  // is served as before the plan (from the pool or the arena), with a debug log line naming it.
  // `keep_bins` false: what the pool holds apart from the plan goes back to the arena at the
  // end of each execution (a workspace arena starts each execution empty). Set before the
  // first execution.
  void use_arena_layout(std::shared_ptr<const ArenaLayout> layout, bool keep_bins);
  bool has_arena_layout() const;

 private:
  friend class GraphExecutor;
  class Pool;
  const GraphExecutor* executor_ = nullptr;  // the executor whose slots these are
  std::vector<RuntimeValue> slots_;
  std::vector<const RuntimeValue*> step_inputs_;
  std::vector<RuntimeValue> step_outputs_;
  std::vector<bool> input_bound_;
  std::unique_ptr<Pool> pool_;
};

// Prepared once, then run any number of times, from any number of threads at once: run()
// never modifies the executor (subgraph executors are made up front by create), and each
// run keeps its values in its own slots.
class GraphExecutor {
 public:
  // `graph` must outlive the executor (the shared_ptr keeps it alive).
  static Expected<std::unique_ptr<GraphExecutor>> create(std::shared_ptr<const ir::Graph> graph);
  // Same, for a subgraph owned by a node of a graph kept alive elsewhere.
  static Expected<std::unique_ptr<GraphExecutor>> create_for_subgraph(const ir::Graph& graph);

  // Runs the graph. `inputs` are matched to graph inputs by name; graph inputs that have
  // an initializer may be omitted. Checks dtypes and static dims of every input.
  // Outputs come back in graph-output order.
  Status run(const std::vector<NamedValue>& inputs, std::vector<RuntimeValue>* outputs,
             const Scope* outer = nullptr) const;
  // Same with inputs named by their index in graph().inputs() (pairs of index, value),
  // for callers that resolved names once up front.
  Status run_indexed(const std::vector<std::pair<size_t, RuntimeValue>>& inputs,
                     std::vector<RuntimeValue>* outputs) const;
  // The execution-state form (see ExecutionState): bind every graph input that has no
  // initializer (bind_input views the caller's buffer, which must stay valid until
  // end_run), then run_bound, read the outputs with output(), and end_run before the next
  // execution with this state. One execution at a time per state; several states may run
  // concurrently.
  Status bind_input(ExecutionState& state, size_t index, DataType dtype, const std::vector<int64_t>& dims,
                    void* data) const;
  Status run_bound(ExecutionState& state) const;
  const RuntimeValue& output(const ExecutionState& state, size_t index) const;
  void end_run(ExecutionState& state) const;
  // Positional form used for subgraph bodies (inputs in graph-input order).
  Status run_positional(const std::vector<RuntimeValue>& inputs, std::vector<RuntimeValue>* outputs,
                        const Scope* outer) const;

  const ir::Graph& graph() const { return *graph_; }
  // The steps, one per node of this graph in execution order (nodes of subgraphs are steps
  // of their subgraph's executor). implementation(i) is what runs step i: the prepared fast
  // kernel's implementation() (e.g. "onednn:jit:avx512_core") or "reference".
  size_t num_steps() const;
  const ir::Node& step_node(size_t step) const;
  const std::string& implementation(size_t step) const;
  // The arena plan of this executor's graph (checked by the loader against the same graph) as
  // the steps will ask for it.
  Expected<std::shared_ptr<const ArenaLayout>> layout_arena(const model::ArenaPlan& plan) const;
  ~GraphExecutor();

 private:
  struct Step;
  class StepScope;
  class StepSubgraphRunner;
  explicit GraphExecutor(const ir::Graph& graph);
  Status prepare();
  Status check_input(const ir::Value& decl, const RuntimeValue& v) const;
  Status finish_run(std::vector<RuntimeValue>& slots, std::vector<RuntimeValue>* outputs,
                    const Scope* outer) const;
  Status execute(std::vector<RuntimeValue>& slots, const Scope* outer, ExecutionState* state = nullptr) const;
  void attach(ExecutionState& state) const;

  std::shared_ptr<const ir::Graph> owner_;
  const ir::Graph* graph_;
  std::unordered_map<const ir::Value*, int> slot_of_;
  std::unordered_map<std::string, int> slot_by_name_;
  std::vector<Step> steps_;
  std::vector<std::pair<int, const Tensor*>> constant_slots_;
  std::vector<std::pair<int, std::string>> outer_slots_;
  std::vector<int> input_slots_;
  std::vector<bool> is_input_slot_;     // per slot: a graph input's
  std::vector<bool> is_constant_slot_;  // per slot: an initializer's
  std::vector<int> output_slots_;
  int num_slots_ = 0;
  // One per subgraph of this graph's nodes (If branches, Loop/Scan bodies), made in prepare.
  std::unordered_map<const ir::Graph*, std::unique_ptr<GraphExecutor>> subgraph_executors_;
};

}  // namespace kiln::rt
