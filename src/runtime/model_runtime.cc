// Loaded models: execution contexts and their arenas, binding, execution, the model table.
#include "runtime/model_runtime.h"

#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/logging.h"
#include "runtime/memory.h"

namespace kiln::rt {

CodedStatus coded(kilnError code, Status status) { return CodedStatus{code, std::move(status)}; }

kilnDataType to_c_dtype(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return KILN_FLOAT;
    case DataType::kFloat16:
      return KILN_FLOAT16;
    case DataType::kInt8:
      return KILN_INT8;
    case DataType::kInt32:
      return KILN_INT32;
    case DataType::kUInt8:
      return KILN_UINT8;
    case DataType::kInt16:
      return KILN_INT16;
    case DataType::kUInt16:
      return KILN_UINT16;
    case DataType::kUInt32:
      return KILN_UINT32;
    case DataType::kInt64:
      return KILN_INT64;
    case DataType::kUInt64:
      return KILN_UINT64;
    case DataType::kFloat64:
      return KILN_DOUBLE;
    case DataType::kBool:
      return KILN_BOOL;
    case DataType::kString:
      return KILN_STRING;
    case DataType::kComplex64:
      return KILN_COMPLEX64;
    case DataType::kComplex128:
      return KILN_COMPLEX128;
    case DataType::kBFloat16:
      return KILN_BF16;
    default:
      return KILN_DT_UNDEFINED;
  }
}

std::optional<DataType> from_c_dtype(kilnDataType t) {
  switch (t) {
    case KILN_FLOAT:
      return DataType::kFloat32;
    case KILN_FLOAT16:
      return DataType::kFloat16;
    case KILN_INT8:
      return DataType::kInt8;
    case KILN_INT32:
      return DataType::kInt32;
    case KILN_UINT8:
      return DataType::kUInt8;
    case KILN_INT16:
      return DataType::kInt16;
    case KILN_UINT16:
      return DataType::kUInt16;
    case KILN_UINT32:
      return DataType::kUInt32;
    case KILN_INT64:
      return DataType::kInt64;
    case KILN_UINT64:
      return DataType::kUInt64;
    case KILN_DOUBLE:
      return DataType::kFloat64;
    case KILN_BOOL:
      return DataType::kBool;
    case KILN_STRING:
      return DataType::kString;
    case KILN_COMPLEX64:
      return DataType::kComplex64;
    case KILN_COMPLEX128:
      return DataType::kComplex128;
    case KILN_BF16:
      return DataType::kBFloat16;
    default:
      return std::nullopt;
  }
}

// ---- ExecutionArena ------------------------------------------------------------------------

namespace {

// A size no execution has asked for in this many executions goes back to the heap.
constexpr uint64_t kTrimAfterRuns = 4;

size_t round_up(size_t n) {
  return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
}

}  // namespace

ExecutionArena::ExecutionArena() = default;

ExecutionArena::ExecutionArena(void* base, size_t size)
    : base_(static_cast<char*>(base)), size_(size) {}

ExecutionArena::~ExecutionArena() {
  // Every block is back by now: each buffer's deleter holds a reference to the arena.
  for (auto& [bytes, b] : buckets_) release_bucket_locked(b, bytes);
}

void ExecutionArena::release_bucket_locked(Bucket& b, size_t bytes) {
  if (!base_) {
    for (void* p : b.free) std::free(p);
    stats_.held -= b.free.size() * bytes;
  }
  b.free.clear();
}

void* ExecutionArena::allocate(size_t bytes) {
  std::lock_guard lock(mutex_);
  Bucket& b = buckets_[bytes];
  b.last_run = run_;
  void* p = nullptr;
  if (!b.free.empty()) {
    p = b.free.back();
    b.free.pop_back();
    ++stats_.reused_blocks;
  } else if (base_) {
    if (bytes > size_ - offset_) {
      refused_ = true;
      refused_bytes_ = bytes;
      return nullptr;
    }
    p = base_ + offset_;
    offset_ += bytes;
    stats_.held = offset_;
    ++stats_.fresh_blocks;
  } else {
    p = std::aligned_alloc(kTensorAlignment, bytes);
    if (!p) {
      refused_ = true;
      refused_bytes_ = bytes;
      return nullptr;
    }
    stats_.held += bytes;
    ++stats_.fresh_blocks;
  }
  stats_.in_use += bytes;
  if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  return p;
}

void ExecutionArena::deallocate(void* p, size_t bytes) {
  std::lock_guard lock(mutex_);
  // The vector keeps its capacity, so the steady state pushes without allocating.
  buckets_[bytes].free.push_back(p);
  stats_.in_use -= bytes;
}

void ExecutionArena::begin_run() {
  std::lock_guard lock(mutex_);
  ++run_;
  refused_ = false;
  refused_bytes_ = 0;
  if (base_) {
    // Start each execution from an empty workspace, so the bound of model_sizes holds per
    // execution however earlier executions cut it up. (Nothing is in use between
    // executions: outputs are copied out and every activation released.)
    if (stats_.in_use == 0) {
      for (auto& [bytes, b] : buckets_) b.free.clear();
      offset_ = 0;
      stats_.held = 0;
    }
    return;
  }
  for (auto it = buckets_.begin(); it != buckets_.end();) {
    if (it->second.last_run + kTrimAfterRuns < run_) {
      release_bucket_locked(it->second, it->first);
      it = buckets_.erase(it);
    } else {
      ++it;
    }
  }
}

bool ExecutionArena::refused(size_t* bytes) const {
  std::lock_guard lock(mutex_);
  if (bytes) *bytes = refused_bytes_;
  return refused_;
}

ExecutionArena::Stats ExecutionArena::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

// ---- Workspace bound -----------------------------------------------------------------------

namespace {

Status add_graph_sizes(const ir::Graph& graph, size_t* total) {
  std::vector<const ir::Value*> graph_inputs(graph.inputs().begin(), graph.inputs().end());
  auto is_input = [&](const ir::Value* v) {
    for (const ir::Value* in : graph_inputs)
      if (in == v) return true;
    return false;
  };
  for (const auto& v : graph.values()) {
    // Initializers view the mapped file; outer-scope values are counted where they are made;
    // a value neither produced nor fed is never allocated.
    if (v->has_initializer() || v->is_outer_scope()) continue;
    if (!v->producer() && !is_input(v.get())) continue;
    const ir::TensorType& type = v->type();
    if (type.kind == ir::TypeKind::kSequence || type.kind == ir::TypeKind::kOptionalSequence)
      return unsupported(
          "value '%s' of graph '%s' is a sequence (%s), whose length is known only at run time",
          v->name().c_str(), graph.name().c_str(), type.to_string().c_str());
    if (!type.shape.is_static())
      return unsupported("value '%s' of graph '%s' has dims not fixed at compile time (%s)",
                         v->name().c_str(), graph.name().c_str(), type.to_string().c_str());
    if (type.dtype == DataType::kString) continue;  // string tensors live on the heap
    int64_t n = type.shape.num_elements();
    if (n > std::numeric_limits<int64_t>::max() / 16)
      return unsupported("value '%s' is too large (%s)", v->name().c_str(),
                         type.to_string().c_str());
    size_t bytes = round_up(dtype_bytes(type.dtype, n));
    if (bytes == 0) bytes = kTensorAlignment;
    if (*total > std::numeric_limits<size_t>::max() - bytes)
      return unsupported("the workspace of graph '%s' overflows", graph.name().c_str());
    *total += bytes;
  }
  for (const auto& n : graph.nodes()) {
    std::vector<ir::Graph*> subgraphs = n->subgraphs();
    if (subgraphs.empty()) continue;
    if (n->op_type() != "If")
      return unsupported("node %s runs its body a number of times known only at run time",
                         n->label().c_str());
    // Both branches are counted: an upper bound whichever one runs.
    for (const ir::Graph* g : subgraphs) KILN_RETURN_IF_ERROR(add_graph_sizes(*g, total));
  }
  return ok_status();
}

}  // namespace

// The bound: the sum, over every non-initializer value of the graph and of its If branches,
// of its bytes rounded up to 64. It holds because the executor allocates each value at most
// once per execution, the workspace arena starts every execution empty, and a block is only
// ever carved once per execution (a freed block is reused only for the same size). Graph
// inputs are counted although they view the caller's buffers and take no workspace: the
// slack covers the scratch tensors a few kernels allocate for themselves (e.g. computing a
// half-precision op in float32). Should an execution still need more, the arena refuses and
// the execution fails with KILN_ERROR_BAD_ALLOC; it never writes past the workspace.
Expected<ModelSizes> model_sizes(const ir::Graph& graph) {
  ModelSizes sizes;
  KILN_RETURN_IF_ERROR(add_graph_sizes(graph, &sizes.work_bytes),
                       "the activation workspace cannot be bounded");
  sizes.weight_bytes = graph.weight_bytes();
  return sizes;
}

// ---- Model -------------------------------------------------------------------------------

class ExecutionContext {
 public:
  explicit ExecutionContext(std::shared_ptr<ExecutionArena> a) : arena(std::move(a)) {}
  std::shared_ptr<ExecutionArena> arena;
};

namespace {

CodedStatus make_io(const ir::Value& v, size_t index, const char* kind, ModelIo* io) {
  const ir::TensorType& type = v.type();
  if (!type.is_tensor())
    return coded(KILN_ERROR_FEATURE_UNSUPPORTED,
                 unsupported("model %s '%s' is %s; the C API carries tensors only", kind,
                             v.name().c_str(), type.to_string().c_str()));
  kilnDataType c = to_c_dtype(type.dtype);
  if (type.dtype == DataType::kString)
    return coded(
        KILN_ERROR_FEATURE_UNSUPPORTED,
        unsupported(
            "model %s '%s' holds strings, which have no fixed-size elements for a data buffer",
            kind, v.name().c_str()));
  if (c == KILN_DT_UNDEFINED)
    return coded(KILN_ERROR_FEATURE_UNSUPPORTED,
                 unsupported("model %s '%s' has dtype %s, which has no kilnDataType", kind,
                             v.name().c_str(), dtype_name(type.dtype)));
  io->name = v.name();
  io->dtype = type.dtype;
  io->c_dtype = c;
  io->graph_index = index;
  io->has_rank = type.shape.has_rank();
  io->dims.clear();
  if (io->has_rank) {
    if (type.shape.rank() > KILN_MAX_DIM_CNT)
      return coded(KILN_ERROR_FEATURE_UNSUPPORTED,
                   unsupported("model %s '%s' has rank %d, more than KILN_MAX_DIM_CNT (%d)", kind,
                               v.name().c_str(), type.shape.rank(), KILN_MAX_DIM_CNT));
    for (const Dim& d : type.shape.dims()) io->dims.push_back(d.is_static() ? d.value : -1);
  }
  io->is_static = type.shape.is_static();
  io->size_bytes = io->is_static ? dtype_bytes(type.dtype, type.shape.num_elements()) : 0;
  io->format = io->has_rank && io->dims.size() == 4 ? KILN_FORMAT_NCHW : KILN_FORMAT_ND;
  return {};
}

// [p, p + bytes) must lie in one live device allocation of `device`.
CodedStatus check_device_memory(const void* p, size_t bytes, const Device& device,
                                const std::string& what) {
  const MemoryRegistry& registry = MemoryRegistry::get();
  std::optional<Allocation> a = registry.find(p, bytes);
  if (!a) {
    if (std::optional<Allocation> start = registry.find(p, 1))
      return coded(KILN_ERROR_INVALID_MEMORY,
                   invalid_argument(
                       "%s [%p, +%zu bytes) runs past the end of its allocation (%zu bytes at %p)",
                       what.c_str(), p, bytes, start->size, start->base));
    return coded(
        KILN_ERROR_INVALID_MEMORY,
        invalid_argument("%s %p is not device memory (host memory, or freed); it must be memory of "
                         "device %s from kilnrtMalloc",
                         what.c_str(), p, device.name().c_str()));
  }
  if (a->kind != MemoryKind::kDevice)
    return coded(
        KILN_ERROR_INVALID_MEMORY,
        invalid_argument("%s %p is pinned host memory (kilnrtMallocHost); it must be memory of "
                         "device %s from kilnrtMalloc",
                         what.c_str(), p, device.name().c_str()));
  if (a->device != device.id())
    return coded(KILN_ERROR_INVALID_MEMORY,
                 invalid_argument("%s %p is memory of device cpu:%d, the model is on device %s",
                                  what.c_str(), p, a->device, device.name().c_str()));
  return {};
}

std::string shape_text(const ModelIo& io) {
  if (!io.has_rank) return std::string(dtype_name(io.dtype)) + "[*]";
  std::string s = std::string(dtype_name(io.dtype)) + "[";
  for (size_t i = 0; i < io.dims.size(); ++i) {
    if (i) s += ",";
    s += io.dims[i] < 0 ? "?" : std::to_string(io.dims[i]);
  }
  return s + "]";
}

}  // namespace

Model::Model(model::LoadedModel loaded, Device& device)
    : loaded_(std::move(loaded)), device_(device) {}

Model::~Model() = default;

CodedStatus Model::create(model::LoadedModel loaded, Device& device,
                          std::optional<BufferRef> workspace, std::shared_ptr<Model>* out) {
  if (!loaded.graph)
    return coded(KILN_ERROR_PARSE_MODEL, invalid_argument("the model has no graph"));
  std::shared_ptr<Model> m(new Model(std::move(loaded), device));
  const ir::Graph& g = *m->loaded_.graph;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    if (g.inputs()[i]->has_initializer()) continue;
    ModelIo io;
    CodedStatus s = make_io(*g.inputs()[i], i, "input", &io);
    if (!s.ok()) return s;
    m->inputs_.push_back(std::move(io));
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    ModelIo io;
    CodedStatus s = make_io(*g.outputs()[i], i, "output", &io);
    if (!s.ok()) return s;
    m->outputs_.push_back(std::move(io));
  }
  auto executor = GraphExecutor::create(m->loaded_.graph);
  if (!executor.ok()) {
    Status s = executor.status();
    return coded(s.code() == StatusCode::kUnsupported ? KILN_ERROR_FEATURE_UNSUPPORTED
                                                      : KILN_ERROR_PARSE_MODEL,
                 s.add_context("preparing the model"));
  }
  m->executor_ = std::move(executor).value();

  std::shared_ptr<ExecutionArena> arena;
  if (workspace) {
    if (reinterpret_cast<uintptr_t>(workspace->data) % kTensorAlignment != 0)
      return coded(KILN_ERROR_MEMORY_ADDRESS_UNALIGNED,
                   invalid_argument("the workspace %p is not %zu-byte aligned", workspace->data,
                                    kTensorAlignment));
    CodedStatus mem =
        check_device_memory(workspace->data, workspace->size, device, "the workspace");
    if (!mem.ok()) return mem;
    auto sizes = model_sizes(g);
    if (!sizes.ok()) return coded(KILN_ERROR_FEATURE_UNSUPPORTED, sizes.status());
    if (workspace->size < sizes->work_bytes)
      return coded(
          KILN_ERROR_INVALID_PARAM,
          invalid_argument("the workspace holds %zu bytes, the model needs %zu (kilnmdlQuerySize)",
                           workspace->size, sizes->work_bytes));
    m->workspace_ = workspace;
    arena = std::make_shared<ExecutionArena>(workspace->data, workspace->size);
  } else {
    arena = std::make_shared<ExecutionArena>();
  }
  // The first context is made up front; more come when executions overlap.
  m->contexts_.push_back(std::make_unique<ExecutionContext>(std::move(arena)));
  m->idle_.push_back(m->contexts_.back().get());
  *out = std::move(m);
  return {};
}

CodedStatus Model::bind(ExecutionRequest& request) const {
  if (request.inputs.size() != inputs_.size())
    return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                 invalid_argument("the model takes %zu inputs, the input dataset has %zu buffers",
                                  inputs_.size(), request.inputs.size()));
  if (request.outputs.size() != outputs_.size())
    return coded(KILN_ERROR_MODEL_OUTPUT_NOT_MATCH,
                 invalid_argument("the model has %zu outputs, the output dataset has %zu buffers",
                                  outputs_.size(), request.outputs.size()));
  if (workspace_) {
    CodedStatus s = check_device_memory(workspace_->data, workspace_->size, device_,
                                        "the workspace given at load");
    if (!s.ok()) return s;
  }
  request.input_dims.assign(inputs_.size(), {});
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const ModelIo& io = inputs_[i];
    const InputBinding& in = request.inputs[i];
    std::vector<int64_t>& dims = request.input_dims[i];
    if (in.dims) {
      if (in.dtype != KILN_DT_UNDEFINED && in.dtype != io.c_dtype)
        return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                     invalid_argument("input %zu ('%s') is %s, its tensor desc says %s", i,
                                      io.name.c_str(), dtype_name(io.dtype),
                                      from_c_dtype(in.dtype) ? dtype_name(*from_c_dtype(in.dtype))
                                                             : "an unknown type"));
      dims = *in.dims;
      bool match = !io.has_rank || dims.size() == io.dims.size();
      for (size_t k = 0; match && k < dims.size(); ++k) {
        if (dims[k] < 0) match = false;
        if (io.has_rank && io.dims[k] >= 0 && io.dims[k] != dims[k]) match = false;
      }
      if (!match)
        return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                     invalid_argument("input %zu ('%s') has shape %s, the model expects %s", i,
                                      io.name.c_str(), dims_to_string(dims).c_str(),
                                      shape_text(io).c_str()));
    } else if (io.is_static) {
      dims = io.dims;
    } else {
      return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                   invalid_argument(
                       "input %zu ('%s') has dims not fixed at compile time (%s); give its shape "
                       "with kilnmdlSetDatasetTensorDesc",
                       i, io.name.c_str(), shape_text(io).c_str()));
    }
    int64_t n = 1;
    for (int64_t d : dims) {
      if (d != 0 && n > std::numeric_limits<int64_t>::max() / 16 / d)
        return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                     invalid_argument("input %zu ('%s'): shape %s is too large", i, io.name.c_str(),
                                      dims_to_string(dims).c_str()));
      n *= d;
    }
    size_t bytes = dtype_bytes(io.dtype, n);
    if (in.buffer.size < bytes)
      return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                   invalid_argument("input %zu ('%s', %s%s) needs %zu bytes, its buffer holds %zu",
                                    i, io.name.c_str(), dtype_name(io.dtype),
                                    dims_to_string(dims).c_str(), bytes, in.buffer.size));
    if (bytes > 0) {
      CodedStatus s = check_device_memory(in.buffer.data, bytes, device_,
                                          str_format("input %zu ('%s')", i, io.name.c_str()));
      if (!s.ok()) return s;
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const ModelIo& io = outputs_[i];
    const BufferRef& out = request.outputs[i];
    if (io.is_static && out.size < io.size_bytes)
      return coded(
          KILN_ERROR_MODEL_OUTPUT_NOT_MATCH,
          invalid_argument("output %zu ('%s', %s) needs %zu bytes, its buffer holds %zu", i,
                           io.name.c_str(), shape_text(io).c_str(), io.size_bytes, out.size));
    if (out.size > 0) {
      CodedStatus s = check_device_memory(out.data, out.size, device_,
                                          str_format("output %zu ('%s')", i, io.name.c_str()));
      if (!s.ok()) return s;
    }
  }
  return {};
}

ExecutionContext* Model::acquire_context() {
  std::lock_guard lock(pool_mutex_);
  ++executions_;
  if (!idle_.empty()) {
    ExecutionContext* c = idle_.back();
    idle_.pop_back();
    return c;
  }
  // Only heap-arena models get here: a workspace model runs one execution at a time.
  contexts_.push_back(std::make_unique<ExecutionContext>(std::make_shared<ExecutionArena>()));
  return contexts_.back().get();
}

void Model::release_context(ExecutionContext* ctx) {
  std::lock_guard lock(pool_mutex_);
  idle_.push_back(ctx);
}

CodedStatus Model::run(const ExecutionRequest& request,
                       std::vector<std::vector<int64_t>>* output_dims) {
  KILN_CHECK(
      request.input_dims.size() == inputs_.size() && request.outputs.size() == outputs_.size(),
      "Model::run on a request that was not bound");
  std::unique_lock<std::mutex> workspace_lock;
  if (workspace_) workspace_lock = std::unique_lock(workspace_mutex_);
  ExecutionContext* ctx = acquire_context();
  ExecutionArena& arena = *ctx->arena;
  arena.begin_run();
  CodedStatus result;
  {
    TensorAllocatorScope scope(ctx->arena);
    std::vector<std::pair<size_t, RuntimeValue>> feeds;
    feeds.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i)
      feeds.emplace_back(inputs_[i].graph_index,
                         Tensor::view(inputs_[i].dtype, request.input_dims[i],
                                      request.inputs[i].buffer.data, nullptr));
    std::vector<RuntimeValue> values;
    Status st = executor_->run_indexed(feeds, &values);
    size_t refused_bytes = 0;
    if (arena.refused(&refused_bytes)) {
      result =
          workspace_
              ? coded(KILN_ERROR_BAD_ALLOC,
                      resource_exhausted(
                          "the workspace given at load (%zu bytes) ran out: a %zu-byte "
                          "activation did not fit",
                          workspace_->size, refused_bytes))
              : coded(KILN_ERROR_BAD_ALLOC,
                      resource_exhausted("out of memory for a %zu-byte activation", refused_bytes));
    } else if (!st.ok()) {
      result = coded(
          st.code() == StatusCode::kResourceExhausted ? KILN_ERROR_BAD_ALLOC : KILN_ERROR_FAILURE,
          std::move(st));
    } else {
      output_dims->assign(outputs_.size(), {});
      for (size_t i = 0; i < outputs_.size() && result.ok(); ++i) {
        const ModelIo& io = outputs_[i];
        const RuntimeValue& v = values[io.graph_index];
        if (!v.is_tensor() || v.tensor().dtype() != io.dtype) {
          result = coded(
              KILN_ERROR_FAILURE,
              internal_error("output %zu ('%s') came out as %s, declared %s", i, io.name.c_str(),
                             v.description().c_str(), shape_text(io).c_str()));
          break;
        }
        const Tensor& t = v.tensor();
        size_t bytes = t.size_bytes();
        if (bytes > request.outputs[i].size) {
          result =
              coded(KILN_ERROR_MODEL_OUTPUT_NOT_MATCH,
                    invalid_argument("output %zu ('%s') is %s, %zu bytes; its buffer holds %zu", i,
                                     io.name.c_str(), t.description().c_str(), bytes,
                                     request.outputs[i].size));
          break;
        }
        // memmove: an output may view an input (Identity), whose buffer may be this one.
        if (bytes) std::memmove(request.outputs[i].data, t.raw_data(), bytes);
        (*output_dims)[i] = t.dims();
      }
    }
    // Activations go back to the arena before the context is handed on.
    values.clear();
    feeds.clear();
  }
  release_context(ctx);
  return result;
}

ExecutionToken::ExecutionToken(std::shared_ptr<Model> model) : model_(std::move(model)) {
  std::lock_guard lock(model_->inflight_mutex_);
  ++model_->inflight_;
}

void ExecutionToken::release() {
  if (released_.exchange(true)) return;
  std::lock_guard lock(model_->inflight_mutex_);
  if (--model_->inflight_ == 0) model_->inflight_cv_.notify_all();
}

std::shared_ptr<ExecutionToken> Model::begin_execution() {
  return std::make_shared<ExecutionToken>(shared_from_this());
}

void Model::wait_idle() {
  std::unique_lock lock(inflight_mutex_);
  inflight_cv_.wait(lock, [&] { return inflight_ == 0; });
}

Model::Stats Model::stats() const {
  std::lock_guard lock(pool_mutex_);
  Stats s;
  s.contexts = contexts_.size();
  s.executions = executions_;
  for (const auto& c : contexts_) {
    ExecutionArena::Stats a = c->arena->stats();
    s.arenas.fresh_blocks += a.fresh_blocks;
    s.arenas.reused_blocks += a.reused_blocks;
    s.arenas.in_use += a.in_use;
    s.arenas.peak_in_use += a.peak_in_use;
    s.arenas.held += a.held;
  }
  return s;
}

// ---- ModelTable ----------------------------------------------------------------------------

ModelTable& ModelTable::get() {
  static ModelTable* table = new ModelTable();  // never destroyed: used until process exit
  return *table;
}

uint32_t ModelTable::add(std::shared_ptr<Model> model) {
  std::lock_guard lock(mutex_);
  uint32_t id = next_id_++;
  if (next_id_ == 0) next_id_ = 1;  // 0 is never an id
  model->set_id(id);
  models_[id] = std::move(model);
  return id;
}

std::shared_ptr<Model> ModelTable::find(uint32_t id, std::shared_ptr<ExecutionToken>* token) const {
  std::lock_guard lock(mutex_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  if (token) *token = it->second->begin_execution();
  return it->second;
}

std::shared_ptr<Model> ModelTable::remove(uint32_t id) {
  std::lock_guard lock(mutex_);
  auto it = models_.find(id);
  if (it == models_.end()) return nullptr;
  std::shared_ptr<Model> m = std::move(it->second);
  models_.erase(it);
  return m;
}

std::vector<std::shared_ptr<Model>> ModelTable::remove_all() {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Model>> all;
  for (auto& [id, m] : models_) all.push_back(std::move(m));
  models_.clear();
  return all;
}

size_t ModelTable::size() const {
  std::lock_guard lock(mutex_);
  return models_.size();
}

kilnError load_error_code(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound:
    case StatusCode::kUnavailable:
      return KILN_ERROR_READ_MODEL_FAILURE;
    case StatusCode::kInvalidArgument:
      return KILN_ERROR_INVALID_FILE;
    case StatusCode::kDataLoss:
      return KILN_ERROR_PARSE_MODEL;
    case StatusCode::kUnsupported:
      return KILN_ERROR_FEATURE_UNSUPPORTED;
    case StatusCode::kResourceExhausted:
      return KILN_ERROR_BAD_ALLOC;
    default:
      return KILN_ERROR_FAILURE;
  }
}

}  // namespace kiln::rt
