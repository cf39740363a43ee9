// Loaded models behind the kilnmdl* C API: the model table (ids), one prepared executor
// per model shared by every execution, execution contexts with their own activation
// arenas, binding of caller buffers to model inputs and outputs, and the workspace bound
// reported by kilnmdlQuerySize.
//
// Threading: a Model may be executed from any number of threads and streams at once. The
// graph and its weights (views of the mapped .kiln file) are shared read-only; each
// execution takes an ExecutionContext from the model's pool, so executions never share
// activation memory. A model loaded with a caller workspace has a single context and runs
// one execution at a time.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "kiln/kiln.h"
#include "model/kiln_model.h"
#include "runtime/device.h"
#include "runtime/graph_executor.h"
#include "runtime/signature_states.h"

namespace kiln::rt {

// A Status together with the C error code it becomes at the API boundary.
struct CodedStatus {
  kilnError code = KILN_SUCCESS;
  Status status;
  bool ok() const { return code == KILN_SUCCESS; }
};
CodedStatus coded(kilnError code, Status status);

// Kiln DataType <-> kilnDataType (AscendCL numbering). Types with no C twin (float8,
// packed 4-bit and 2-bit types) map to KILN_DT_UNDEFINED.
kilnDataType to_c_dtype(DataType t);
// nullopt for KILN_DT_UNDEFINED and values outside the enum.
std::optional<DataType> from_c_dtype(kilnDataType t);

// ---- Activation arenas -------------------------------------------------------------------

// The TensorAllocator an execution context installs while its execution runs. Blocks are
// kept in free lists by exact (64-byte rounded) size and reused by later allocations of
// that size, so the steady state of a model with fixed shapes allocates nothing.
//  - Heap arena: fresh blocks come from the heap, in size classes (four per power of two),
//    and a request takes the smallest free block of its class or up to twice its size, so
//    that inputs of new shapes reuse the memory of earlier ones; a size unused for several executions is
//    given back once the arena holds more than four times the largest peak of the last 16
//    executions, so a model alternating between a few shapes keeps their blocks and one
//    whose shapes moved on does not hoard memory.
//  - Workspace arena: blocks are carved from a caller-given range (bump pointer plus the
//    free lists), reset at the start of each execution. When the range is used up the
//    allocation is refused (never overrun), refused() turns true, and the execution fails.
class ExecutionArena final : public TensorAllocator {
 public:
  // Heap; `limit` bounds the bytes it holds (the device's memory limit; 0: no bound).
  explicit ExecutionArena(size_t limit = 0);
  ExecutionArena(void* base, size_t size);  // workspace; base must be 64-byte aligned
  ~ExecutionArena() override;
  ExecutionArena(const ExecutionArena&) = delete;
  ExecutionArena& operator=(const ExecutionArena&) = delete;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

  // Called at the start of each execution.
  void begin_run();
  // Heap arena: gives every free block back to the system (after an execution state made its
  // memory plan, the blocks of the execution it recorded are not needed again).
  void release_free();
  // True if an allocation was refused since begin_run; `bytes` gets its size, `injected` the
  // KILN_FAULT_INJECT event number when the refusal was an injected fault (else 0), `held` the
  // bytes a heap arena held when its limit refused it (else 0).
  bool refused(size_t* bytes = nullptr, uint64_t* injected = nullptr, size_t* held = nullptr) const;
  size_t limit() const { return limit_; }

  struct Stats {
    uint64_t fresh_blocks = 0;   // blocks taken from the heap / bump pointer, ever
    uint64_t reused_blocks = 0;  // allocations served from a free list, ever
    size_t in_use = 0;           // bytes handed out now
    size_t peak_in_use = 0;      // highest in_use
    size_t held = 0;             // heap: bytes owned (in use + free lists); workspace: bump offset
  };
  Stats stats() const;

 private:
  struct Bucket {
    std::vector<void*> free;
    uint64_t last_run = 0;  // the last execution that allocated this size
  };
  void release_bucket_locked(Bucket& b, size_t bytes);

  mutable std::mutex mutex_;
  // Heap: by size class (heap_size_class), ordered so that an allocation can take a free
  // block of a larger class (best fit up to twice the size) instead of fresh memory.
  std::map<size_t, Bucket> buckets_;
  std::unordered_map<void*, size_t> larger_blocks_;  // heap blocks handed out for a smaller class
  char* base_ = nullptr;  // workspace, or null for the heap
  size_t size_ = 0;
  size_t offset_ = 0;
  uint64_t run_ = 0;
  // Peak bytes in use of the current execution and of the last kPeakWindow ones: what a heap
  // arena keeps free blocks for (begin_run).
  static constexpr size_t kPeakWindow = 16;
  size_t run_peak_ = 0;
  std::array<size_t, kPeakWindow> recent_peaks_{};
  bool refused_ = false;
  size_t refused_bytes_ = 0;
  uint64_t refused_injected_ = 0;
  size_t refused_held_ = 0;
  size_t limit_ = 0;  // heap only
  Stats stats_;
};

// ---- Workspace bound ---------------------------------------------------------------------

struct ModelSizes {
  // Activation workspace an execution needs at most: with the .kiln's arena plan, exactly its
  // arena (model/arena_plan.h); without, the bound below.
  size_t work_bytes = 0;
  size_t weight_bytes = 0;  // constant data the model carries (stays in the mapped file)
};
// Fails (naming the value or node) when the workspace cannot be bounded: a value whose
// dims are not fixed, a sequence, or a Loop/Scan whose trip count is known only at run
// time.
Expected<ModelSizes> model_sizes(const ir::Graph& graph);
// The same for a loaded model: the arena of its plan when the file has one; for one with shape buckets, the largest variant's workspace
// plus its padded input copies (an input no bucket fits runs the dynamic graph, whose
// workspace cannot be bounded: such an execution fails with KILN_ERROR_BAD_ALLOC if it
// does not fit), and the weight section of the file (weights are stored once).
Expected<ModelSizes> model_sizes(const model::LoadedModel& loaded);
// False when KILN_ARENA_PLAN=0: the arena plans of .kiln files are ignored (A/B measurements).
bool arena_plan_enabled();

// ---- Models ------------------------------------------------------------------------------

// An input or output of a model as the C API sees it. The model's inputs are the graph
// inputs without an initializer, in graph order: an input that has an initializer is an
// overridable constant of the ONNX model and keeps its value (ONNX test data and ONNX
// Runtime number inputs the same way).
struct ModelIo {
  std::string name;
  DataType dtype = DataType::kUndefined;
  kilnDataType c_dtype = KILN_DT_UNDEFINED;
  bool has_rank = true;
  std::vector<int64_t> dims;           // -1 for a dim not fixed at compile time; empty if !has_rank
  bool is_static = false;              // rank and every dim known
  size_t size_bytes = 0;               // 0 unless is_static
  kilnFormat format = KILN_FORMAT_ND;  // NCHW for rank 4, ND otherwise
  size_t graph_index = 0;              // index in graph().inputs() / outputs()
};

// Caller memory for one input or output of an execution.
struct BufferRef {
  void* data = nullptr;
  size_t size = 0;
};
struct InputBinding {
  BufferRef buffer;
  std::optional<std::vector<int64_t>> dims;  // from kilnmdlSetDatasetTensorDesc
  kilnDataType dtype = KILN_DT_UNDEFINED;    // from that desc (UNDEFINED: the model's)
};
// One execution's inputs and outputs, validated by Model::bind before it is queued.
struct ExecutionRequest {
  std::vector<InputBinding> inputs;
  std::vector<BufferRef> outputs;
  std::vector<std::vector<int64_t>> input_dims;  // resolved by bind
};

class ExecutionContext;
class Model;

// Counts one execution of a model in flight (see Model::begin_execution). Shared by the
// copies of a queued task; release() is idempotent and also runs at destruction, so a task
// the stream skips releases it too.
class ExecutionToken {
 public:
  explicit ExecutionToken(std::shared_ptr<Model> model);
  ~ExecutionToken() { release(); }
  ExecutionToken(const ExecutionToken&) = delete;
  ExecutionToken& operator=(const ExecutionToken&) = delete;
  void release();

 private:
  std::shared_ptr<Model> model_;  // the token keeps the model alive
  std::atomic<bool> released_{false};
};

class Model : public std::enable_shared_from_this<Model> {
 public:
  // Prepares `loaded` for `device`. With `workspace` (64-byte aligned device memory of the
  // device, at least model_sizes().work_bytes) activations come only from it.
  static CodedStatus create(model::LoadedModel loaded, Device& device,
                            std::optional<BufferRef> workspace, std::shared_ptr<Model>* out);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  uint32_t id() const { return id_; }
  void set_id(uint32_t id) { id_ = id; }
  Device& device() const { return device_; }
  const std::vector<ModelIo>& inputs() const { return inputs_; }
  const std::vector<ModelIo>& outputs() const { return outputs_; }
  const ir::Graph& graph() const { return *loaded_.graph; }
  const model::LoadedModel& loaded() const { return loaded_; }

  // Checks a request against the model (counts, dtypes, shapes, buffer sizes, that every
  // buffer is device memory of the model's device) and resolves the input dims.
  CodedStatus bind(ExecutionRequest& request) const;
  // Runs a bound request on the calling thread (which holds the device's compute engine)
  // and copies the outputs into their buffers; `output_dims` gets each output's dims.
  CodedStatus run(const ExecutionRequest& request, std::vector<std::vector<int64_t>>* output_dims);

  // Counts an execution in flight until the token is released. wait_idle() waits for
  // every token (kilnmdlUnload).
  std::shared_ptr<ExecutionToken> begin_execution();
  void wait_idle();

  struct Stats {
    size_t contexts = 0;           // execution contexts made so far
    ExecutionArena::Stats arenas;  // summed over the contexts
    // Over the contexts' execution states: outputs that reused a finished value's tensor,
    // and the bytes of blocks parked for the next execution (counted in arenas.in_use).
    uint64_t recycled_outputs = 0;
    size_t parked_bytes = 0;
    // The execution states' memory plans: their blocks (from the heap, not counted in
    // arenas) and the outputs placed in them.
    size_t planned_bytes = 0;
    uint64_t planned_outputs = 0;
    // Execution states kept per input-shape signature (signature_states.h), summed over the
    // contexts, and those given up to stay within their bounds.
    size_t shape_signatures = 0;
    uint64_t evicted_signatures = 0;
    uint64_t executions = 0;
  };
  Stats stats() const;
  // Nodes the model's executor runs (its first bucket's, for a bucketed model).
  size_t executor_steps() const;

 private:
  friend class ExecutionToken;
  Model(model::LoadedModel loaded, Device& device);
  ExecutionContext* acquire_context();
  void release_context(ExecutionContext* ctx);
  CodedStatus prepare_buckets();
  // Runs `executor` on `feeds` (arena set up by the caller) into `values`, mapping failures
  // (out of workspace, kernel errors) to C error codes.
  CodedStatus execute(const GraphExecutor& executor,
                      const std::vector<std::pair<size_t, RuntimeValue>>& feeds,
                      std::vector<RuntimeValue>* values, ExecutionArena& arena);
  // The C error of an execution that returned `st` on `arena` (a refused activation first).
  CodedStatus execution_result(Status st, const ExecutionArena& arena) const;
  // Copies each output (sliced to `true_dims` when given) into its caller buffer.
  CodedStatus copy_outputs(const std::vector<RuntimeValue>& values, const ExecutionRequest& request,
                           const std::vector<std::vector<int64_t>>* true_dims,
                           std::vector<std::vector<int64_t>>* output_dims);
  // Same, with the value of graph output g given by value_of(g).
  CodedStatus copy_outputs(const std::function<const RuntimeValue&(size_t)>& value_of,
                           const ExecutionRequest& request, const std::vector<std::vector<int64_t>>* true_dims,
                           std::vector<std::vector<int64_t>>* output_dims);
  // A model without buckets on a heap arena: the executor runs on the context's
  // ExecutionState, so a steady state allocates nothing.
  CodedStatus run_with_state(ExecutionContext& ctx, const ExecutionRequest& request,
                             std::vector<std::vector<int64_t>>* output_dims, ExecutionArena& arena);
  // A bucketed model's execution: pick, pad, run, slice; or the dynamic path.
  CodedStatus run_bucketed(const ExecutionRequest& request,
                           std::vector<std::vector<int64_t>>* output_dims, ExecutionArena& arena);
  // The true output dims for these input dims (shape inference of the dynamic graph,
  // cached), or nullopt when they cannot be inferred.
  std::optional<std::vector<std::vector<int64_t>>> true_output_dims(
      const std::vector<std::vector<int64_t>>& input_dims);

  uint32_t id_ = 0;
  model::LoadedModel loaded_;
  Device& device_;
  std::unique_ptr<GraphExecutor> executor_;
  // The .kiln's arena plan as executor_'s steps ask for it (null without one): every execution
  // state lays its outputs out by it from the first execution on.
  std::shared_ptr<const ArenaLayout> arena_layout_;
  // Shape buckets (loaded_.bucket_kind != kNone): one executor per variant (the first is
  // executor_), the dynamic graph's, and per variant the dims of each model input (empty
  // for an input the buckets do not bind).
  std::vector<GraphExecutor*> variant_executors_;
  std::vector<std::unique_ptr<GraphExecutor>> extra_executors_;
  std::unique_ptr<GraphExecutor> dynamic_executor_;
  std::vector<std::vector<std::vector<int64_t>>> bucket_dims_;
  std::vector<double> pad_values_;  // per model input
  std::mutex shape_cache_mutex_;
  std::map<std::vector<std::vector<int64_t>>, std::optional<std::vector<std::vector<int64_t>>>> shape_cache_;
  std::atomic<bool> warned_dynamic_{false};
  std::vector<ModelIo> inputs_;
  std::vector<ModelIo> outputs_;
  std::optional<BufferRef> workspace_;
  std::mutex workspace_mutex_;  // one execution at a time with a workspace
  size_t memory_limit_ = 0;     // the device's: bounds each heap arena's activations

  mutable std::mutex pool_mutex_;
  std::vector<std::unique_ptr<ExecutionContext>> contexts_;  // all, for stats
  std::vector<ExecutionContext*> idle_;
  uint64_t executions_ = 0;

  std::mutex inflight_mutex_;
  std::condition_variable inflight_cv_;
  int64_t inflight_ = 0;
};

// Loaded models by id. Ids come from a counter and are never reused in a process.
class ModelTable {
 public:
  static ModelTable& get();
  uint32_t add(std::shared_ptr<Model> model);
  // With `token`, also begins an execution of the model (Model::begin_execution) under the
  // table's lock, so kilnmdlUnload either sees it in flight or the caller sees no model.
  std::shared_ptr<Model> find(uint32_t id, std::shared_ptr<ExecutionToken>* token = nullptr) const;
  // Same, with the token made in place (a synchronous execution's, on its stack).
  std::shared_ptr<Model> find(uint32_t id, std::optional<ExecutionToken>* token) const;
  std::shared_ptr<Model> remove(uint32_t id);
  std::vector<std::shared_ptr<Model>> remove_all();
  size_t size() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<uint32_t, std::shared_ptr<Model>> models_;
  uint32_t next_id_ = 1;
};

// Maps a model-loading Status to its C error code (missing file, bad file, unsupported).
kilnError load_error_code(const Status& status);

}  // namespace kiln::rt
