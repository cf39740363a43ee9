// Loaded models: the workspace bound, execution contexts, binding, execution. The arena an
// execution draws from is in execution_arena.cc, the table of loaded models in model_table.cc.
#include "runtime/model_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/fault_inject.h"
#include "core/logging.h"
#include "ir/value_bytes.h"
#include "core/huge_pages.h"
#include "runtime/memory.h"
#include "runtime/shape_buckets.h"

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

// ---- Workspace bound -----------------------------------------------------------------------

namespace {

// A value's bytes as the arena hands them out (whole alignment units).
size_t round_up(size_t n) { return (n + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment; }

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
  // What the loaded model reads: not the originals of weights stored pre-packed.
  sizes.weight_bytes = graph.weight_bytes() - graph.cold_weight_bytes() + graph.prepacked_bytes();
  return sizes;
}

bool arena_plan_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_ARENA_PLAN");
    if (!v || std::strcmp(v, "1") == 0) return true;
    if (std::strcmp(v, "0") == 0) {
      KILN_LOG(kInfo, "KILN_ARENA_PLAN=0: the arena plans of .kiln files are ignored");
      return false;
    }
    KILN_LOG(kWarning, "KILN_ARENA_PLAN=%s: not 0 or 1; using the arena plans of .kiln files", v);
    return true;
  }();
  return enabled;
}

Expected<ModelSizes> model_sizes(const model::LoadedModel& loaded) {
  if (loaded.arena_plan && loaded.bucket_kind == model::BucketKind::kNone && arena_plan_enabled()) {
    // What an execution lays out: the plan's arena, and nothing else. Inputs view the caller's
    // buffers; a kernel that asks for another size than planned, or a value the plan cannot
    // hold (model_runtime.h, ExecutionState::use_arena_layout), would need more and fails with
    // KILN_ERROR_BAD_ALLOC in a workspace of exactly this size.
    ModelSizes sizes;
    sizes.work_bytes = loaded.arena_plan->arena_bytes;
    const ir::Graph& graph = *loaded.graph;
    sizes.weight_bytes = graph.weight_bytes() - graph.cold_weight_bytes() + graph.prepacked_bytes();
    return sizes;
  }
  if (loaded.bucket_kind == model::BucketKind::kNone || loaded.variants.empty())
    return model_sizes(*loaded.graph);
  ModelSizes sizes;
  for (size_t k = 0; k < loaded.variants.size(); ++k) {
    const model::LoadedVariant& v = loaded.variants[k];
    KILN_ASSIGN_OR_RETURN(ModelSizes one, model_sizes(*v.graph), "shape bucket %zu", k);
    size_t padded = 0;
    for (const ir::Value* in : v.graph->inputs())
      if (v.shapes.count(in->name()))
        padded += round_up(dtype_bytes(in->dtype(), in->shape().num_elements()));
    sizes.work_bytes = std::max(sizes.work_bytes, one.work_bytes + padded);
  }
  sizes.weight_bytes = loaded.weight_bytes - loaded.cold_weight_bytes;  // the hot part of the file
  return sizes;
}

// ---- Model -------------------------------------------------------------------------------

class ExecutionContext {
 public:
  explicit ExecutionContext(std::shared_ptr<ExecutionArena> a) : arena(std::move(a)) {}
  ~ExecutionContext() {
    // Parked blocks go back to the arena before it goes.
    states.clear();
  }
  std::shared_ptr<ExecutionArena> arena;
  // Slots and recycled outputs of the model's executor, one state per input-shape
  // signature, for heap-arena models without shape buckets (signature_states.h).
  SignatureStates states;
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

// [p, p + bytes) must lie in one live device allocation of `device`. `describe` names the
// buffer in an error; it runs only on one (so a valid execution formats nothing).
CodedStatus check_device_memory(const void* p, size_t bytes, const Device& device,
                                const std::function<std::string()>& describe) {
  const MemoryRegistry& registry = MemoryRegistry::get();
  std::optional<Allocation> a = registry.find(p, bytes);
  if (!a) {
    if (std::optional<Allocation> start = registry.find(p, 1))
      return coded(KILN_ERROR_INVALID_MEMORY,
                   invalid_argument(
                       "%s [%p, +%zu bytes) runs past the end of its allocation (%zu bytes at %p)",
                       describe().c_str(), p, bytes, start->size, start->base));
    return coded(
        KILN_ERROR_INVALID_MEMORY,
        invalid_argument("%s %p is not device memory (host memory, or freed); it must be memory of "
                         "device %s from kilnrtMalloc",
                         describe().c_str(), p, device.name().c_str()));
  }
  if (a->kind != MemoryKind::kDevice)
    return coded(
        KILN_ERROR_INVALID_MEMORY,
        invalid_argument("%s %p is pinned host memory (kilnrtMallocHost); it must be memory of "
                         "device %s from kilnrtMalloc",
                         describe().c_str(), p, device.name().c_str()));
  if (a->device != device.id())
    return coded(KILN_ERROR_INVALID_MEMORY,
                 invalid_argument("%s %p is memory of device cpu:%d, the model is on device %s",
                                  describe().c_str(), p, a->device, device.name().c_str()));
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
  // A shape whose values cannot fit in the device's memory is refused before any kernel is
  // prepared for it: oneDNN spends minutes creating primitives for such shapes (issue 24).
  if (Status fits = ir::check_values_fit(g, device.memory_limit(), "the device's"); !fits.ok())
    return coded(KILN_ERROR_STORAGE_OVER_LIMIT, fits.add_context("loading the model"));
  auto executor = GraphExecutor::create(m->loaded_.graph);
  if (!executor.ok()) {
    Status s = executor.status();
    return coded(s.code() == StatusCode::kUnsupported ? KILN_ERROR_FEATURE_UNSUPPORTED
                                                      : KILN_ERROR_PARSE_MODEL,
                 s.add_context("preparing the model"));
  }
  m->executor_ = std::move(executor).value();
  if (!arena_plan_enabled()) m->loaded_.arena_plan.reset();
  if (m->loaded_.arena_plan && m->loaded_.bucket_kind == model::BucketKind::kNone) {
    auto layout = m->executor_->layout_arena(*m->loaded_.arena_plan);
    if (!layout.ok()) return coded(KILN_ERROR_PARSE_MODEL, layout.status().add_context("loading the model"));
    m->arena_layout_ = std::move(layout).value();
    KILN_LOG(kDebug, "model '%s': executions lay out %zu activations in the .kiln's %zu-byte arena plan",
             g.name().c_str(), m->arena_layout_->entries.size(), m->arena_layout_->arena_bytes);
  } else {
    KILN_LOG(kDebug, "model '%s': no arena plan in the file: each execution state plans from its first execution",
             g.name().c_str());
  }
  if (m->loaded_.bucket_kind != model::BucketKind::kNone) {
    CodedStatus s = m->prepare_buckets();
    if (!s.ok()) return s;
  }

  std::shared_ptr<ExecutionArena> arena;
  if (workspace) {
    if (reinterpret_cast<uintptr_t>(workspace->data) % kTensorAlignment != 0)
      return coded(KILN_ERROR_MEMORY_ADDRESS_UNALIGNED,
                   invalid_argument("the workspace %p is not %zu-byte aligned", workspace->data,
                                    kTensorAlignment));
    CodedStatus mem =
        check_device_memory(workspace->data, workspace->size, device, [] { return std::string("the workspace"); });
    if (!mem.ok()) return mem;
    auto sizes = model_sizes(m->loaded_);
    if (!sizes.ok()) return coded(KILN_ERROR_FEATURE_UNSUPPORTED, sizes.status());
    if (workspace->size < sizes->work_bytes)
      return coded(
          KILN_ERROR_INVALID_PARAM,
          invalid_argument("the workspace holds %zu bytes, the model needs %zu (kilnmdlQuerySize)",
                           workspace->size, sizes->work_bytes));
    m->workspace_ = workspace;
    // With an arena plan, the plan takes the workspace's first arena_bytes and the execution
    // arena the rest (empty in a workspace of exactly kilnmdlQuerySize's size).
    const size_t planned = m->arena_layout_ ? m->arena_layout_->arena_bytes : 0;
    arena = std::make_shared<ExecutionArena>(static_cast<char*>(workspace->data) + planned, workspace->size - planned);
  } else {
    arena = std::make_shared<ExecutionArena>(device.memory_limit());
  }
  m->memory_limit_ = device.memory_limit();
  // The first context is made up front; more come when executions overlap.
  m->contexts_.push_back(std::make_unique<ExecutionContext>(std::move(arena)));
  if (workspace && m->arena_layout_)
    m->contexts_.back()->states.use_workspace(workspace->data, m->arena_layout_->arena_bytes);
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
                                        [] { return std::string("the workspace given at load"); });
    if (!s.ok()) return s;
  }
  request.input_dims.resize(inputs_.size());  // each entry is assigned below
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
      CodedStatus s = check_device_memory(in.buffer.data, bytes, device_, [i, &io] {
        return str_format("input %zu ('%s')", i, io.name.c_str());
      });
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
      CodedStatus s = check_device_memory(out.data, out.size, device_, [i, &io] {
        return str_format("output %zu ('%s')", i, io.name.c_str());
      });
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
  contexts_.push_back(std::make_unique<ExecutionContext>(std::make_shared<ExecutionArena>(memory_limit_)));
  return contexts_.back().get();
}

void Model::release_context(ExecutionContext* ctx) {
  std::lock_guard lock(pool_mutex_);
  idle_.push_back(ctx);
}

namespace {

CodedStatus prepare_error(const Status& s, const char* what) {
  Status st = s;
  return coded(s.code() == StatusCode::kUnsupported ? KILN_ERROR_FEATURE_UNSUPPORTED : KILN_ERROR_PARSE_MODEL,
               st.add_context("preparing %s", what));
}

std::string bucket_list(const model::LoadedModel& m) {
  std::string s;
  for (const model::LoadedVariant& v : m.variants) {
    std::string one;
    for (const auto& [name, dims] : v.shapes) one += (one.empty() ? "" : " ") + name + dims_to_string(dims);
    s += (s.empty() ? "" : ", ") + one;
  }
  return s;
}

std::string input_list(const std::vector<ModelIo>& ios, const std::vector<std::vector<int64_t>>& dims) {
  std::string s;
  for (size_t i = 0; i < ios.size(); ++i) s += (i ? " " : "") + ios[i].name + dims_to_string(dims[i]);
  return s;
}

}  // namespace

CodedStatus Model::prepare_buckets() {
  const model::LoadedModel& m = loaded_;
  variant_executors_.push_back(executor_.get());
  for (size_t k = 1; k < m.variants.size(); ++k) {
    auto e = GraphExecutor::create(m.variants[k].graph);
    if (!e.ok()) return prepare_error(e.status(), str_format("shape bucket %zu", k).c_str());
    variant_executors_.push_back(e->get());
    extra_executors_.push_back(std::move(e).value());
  }
  if (m.dynamic_graph) {
    auto e = GraphExecutor::create(m.dynamic_graph);
    if (!e.ok()) return prepare_error(e.status(), "the dynamic graph");
    dynamic_executor_ = std::move(e).value();
  }
  // The model's inputs and outputs as the caller sees them: a dim the variants disagree
  // on, or that the dynamic graph leaves open, is open.
  auto open_dims = [&](ModelIo& io, auto graph_values) {
    for (const model::LoadedVariant& v : m.variants) {
      const ir::Value* val = graph_values(*v.graph)[io.graph_index];
      for (size_t d = 0; d < io.dims.size(); ++d)
        if (!val->shape()[static_cast<int>(d)].is_static() || val->shape()[static_cast<int>(d)].value != io.dims[d])
          io.dims[d] = -1;
    }
    if (m.dynamic_graph) {
      const ir::Value* val = graph_values(*m.dynamic_graph)[io.graph_index];
      for (size_t d = 0; d < io.dims.size(); ++d)
        if (!val->shape()[static_cast<int>(d)].is_static()) io.dims[d] = -1;
    }
    io.is_static = io.has_rank;
    for (int64_t d : io.dims) io.is_static = io.is_static && d >= 0;
    io.size_bytes = 0;
    if (io.is_static) {
      int64_t n = 1;
      for (int64_t d : io.dims) n *= d;
      io.size_bytes = dtype_bytes(io.dtype, n);
    }
  };
  for (ModelIo& io : inputs_) open_dims(io, [](const ir::Graph& g) { return g.inputs(); });
  for (ModelIo& io : outputs_) open_dims(io, [](const ir::Graph& g) { return g.outputs(); });
  bucket_dims_.assign(m.variants.size(), std::vector<std::vector<int64_t>>(inputs_.size()));
  for (size_t k = 0; k < m.variants.size(); ++k)
    for (size_t i = 0; i < inputs_.size(); ++i) {
      auto it = m.variants[k].shapes.find(inputs_[i].name);
      if (it != m.variants[k].shapes.end()) bucket_dims_[k][i] = it->second;
    }
  pad_values_.assign(inputs_.size(), 0.0);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    auto it = m.pad_values.find(inputs_[i].name);
    if (it != m.pad_values.end()) pad_values_[i] = it->second;
  }
  return {};
}

CodedStatus Model::execute(const GraphExecutor& executor,
                           const std::vector<std::pair<size_t, RuntimeValue>>& feeds,
                           std::vector<RuntimeValue>* values, ExecutionArena& arena) {
  return execution_result(executor.run_indexed(feeds, values), arena);
}

CodedStatus Model::execution_result(Status st, const ExecutionArena& arena) const {
  size_t refused_bytes = 0, held = 0;
  uint64_t injected = 0;
  if (arena.refused(&refused_bytes, &injected, &held)) {
    if (injected) {
      return coded(KILN_ERROR_BAD_ALLOC,
                   fault::injected_error(fault::Site::kAlloc, injected,
                                         str_format("a %zu-byte activation of the execution", refused_bytes)));
    }
    if (held || (arena.limit() && refused_bytes > arena.limit())) {
      return coded(KILN_ERROR_BAD_ALLOC,
                   resource_exhausted("the device memory limit of %zu bytes is reached: a %zu-byte activation "
                                      "does not fit beside the %zu bytes the execution holds",
                                      arena.limit(), refused_bytes, held));
    }
    return workspace_
               ? coded(KILN_ERROR_BAD_ALLOC,
                       resource_exhausted("the workspace given at load (%zu bytes) ran out: a %zu-byte "
                                          "activation did not fit",
                                          workspace_->size, refused_bytes))
               : coded(KILN_ERROR_BAD_ALLOC,
                       resource_exhausted("out of memory for a %zu-byte activation", refused_bytes));
  }
  if (!st.ok())
    return coded(st.code() == StatusCode::kResourceExhausted ? KILN_ERROR_BAD_ALLOC : KILN_ERROR_FAILURE,
                 std::move(st));
  return {};
}

CodedStatus Model::copy_outputs(const std::vector<RuntimeValue>& values, const ExecutionRequest& request,
                                const std::vector<std::vector<int64_t>>* true_dims,
                                std::vector<std::vector<int64_t>>* output_dims) {
  return copy_outputs([&](size_t g) -> const RuntimeValue& { return values[g]; }, request, true_dims, output_dims);
}

CodedStatus Model::copy_outputs(const std::function<const RuntimeValue&(size_t)>& value_of,
                                const ExecutionRequest& request, const std::vector<std::vector<int64_t>>* true_dims,
                                std::vector<std::vector<int64_t>>* output_dims) {
  // Resized, not reassigned: a caller that keeps its vector keeps their capacity.
  output_dims->resize(outputs_.size());
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const ModelIo& io = outputs_[i];
    const RuntimeValue& v = value_of(io.graph_index);
    if (!v.is_tensor() || v.tensor().dtype() != io.dtype)
      return coded(KILN_ERROR_FAILURE,
                   internal_error("output %zu ('%s') came out as %s, declared %s", i, io.name.c_str(),
                                  v.description().c_str(), shape_text(io).c_str()));
    const Tensor& t = v.tensor();
    const std::vector<int64_t>& dims = true_dims ? (*true_dims)[io.graph_index] : t.dims();
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    size_t bytes = dtype_bytes(t.dtype(), n);
    if (bytes > request.outputs[i].size)
      return coded(KILN_ERROR_MODEL_OUTPUT_NOT_MATCH,
                   invalid_argument("output %zu ('%s') is %s%s, %zu bytes; its buffer holds %zu", i,
                                    io.name.c_str(), dtype_name(t.dtype()), dims_to_string(dims).c_str(),
                                    bytes, request.outputs[i].size));
    if (dims == t.dims()) {
      // memmove: an output may view an input (Identity), whose buffer may be this one.
      if (bytes) std::memmove(request.outputs[i].data, t.raw_data(), bytes);
    } else if (bytes) {
      copy_leading_block(t, dims, request.outputs[i].data);
    }
    (*output_dims)[i].assign(dims.begin(), dims.end());
  }
  return {};
}

std::optional<std::vector<std::vector<int64_t>>> Model::true_output_dims(
    const std::vector<std::vector<int64_t>>& input_dims) {
  {
    std::lock_guard lock(shape_cache_mutex_);
    auto it = shape_cache_.find(input_dims);
    if (it != shape_cache_.end()) return it->second;
  }
  std::optional<std::vector<std::vector<int64_t>>> result;
  if (loaded_.dynamic_graph) {
    std::vector<std::pair<size_t, std::vector<int64_t>>> feeds;
    for (size_t i = 0; i < inputs_.size(); ++i) feeds.emplace_back(inputs_[i].graph_index, input_dims[i]);
    // Outside the execution's arena: these few small tensors must not take workspace.
    TensorAllocatorScope heap(nullptr);
    auto dims = infer_output_dims(*loaded_.dynamic_graph, feeds);
    if (dims.ok()) {
      result = std::move(dims).value();
    } else {
      KILN_LOG(kInfo, "output shapes for inputs %s not inferred (%s): running the dynamic graph",
               input_list(inputs_, input_dims).c_str(), dims.status().to_string().c_str());
    }
  }
  std::lock_guard lock(shape_cache_mutex_);
  if (shape_cache_.size() >= 1024) shape_cache_.clear();  // bounds memory for callers cycling shapes
  shape_cache_[input_dims] = result;
  return result;
}

CodedStatus Model::run_bucketed(const ExecutionRequest& request,
                                std::vector<std::vector<int64_t>>* output_dims, ExecutionArena& arena) {
  const std::vector<std::vector<int64_t>>& dims = request.input_dims;
  const bool batch = loaded_.bucket_kind == model::BucketKind::kBatch;
  // The smallest bucket that fits (variants are stored smallest first).
  size_t chosen = bucket_dims_.size();
  bool exact = false;
  for (size_t k = 0; k < bucket_dims_.size() && chosen == bucket_dims_.size(); ++k) {
    bool fits = true, same = true;
    for (size_t i = 0; i < inputs_.size() && fits; ++i) {
      const std::vector<int64_t>& b = bucket_dims_[k][i];
      if (b.empty()) continue;  // not bucketed: bind checked it against the model
      if (b.size() != dims[i].size()) {
        fits = false;
        break;
      }
      for (size_t d = 0; d < b.size(); ++d) {
        if (dims[i][d] > b[d] || (batch && d > 0 && dims[i][d] != b[d])) fits = false;
        if (dims[i][d] != b[d]) same = false;
      }
    }
    if (fits) {
      chosen = k;
      exact = same;
    }
  }
  std::optional<std::vector<std::vector<int64_t>>> true_dims;
  const char* why = "fit no shape bucket of the model";
  if (chosen < bucket_dims_.size() && !exact) {
    true_dims = true_output_dims(dims);
    if (!true_dims) {  // cannot slice: run at the true shape
      chosen = bucket_dims_.size();
      why = "fit a shape bucket, but the true output shapes cannot be inferred to slice them";
    }
  }
  if (chosen == bucket_dims_.size()) {
    if (!dynamic_executor_)
      return coded(KILN_ERROR_MODEL_INPUT_NOT_MATCH,
                   invalid_argument("inputs %s %s (buckets: %s) and the model has no dynamic graph",
                                    input_list(inputs_, dims).c_str(), why, bucket_list(loaded_).c_str()));
    if (!warned_dynamic_.exchange(true))
      KILN_LOG(kWarning,
               "inputs %s %s (buckets: %s): running the dynamic graph, with shapes resolved at run "
               "time (slower; said once per model)",
               input_list(inputs_, dims).c_str(), why, bucket_list(loaded_).c_str());
    std::vector<std::pair<size_t, RuntimeValue>> feeds;
    for (size_t i = 0; i < inputs_.size(); ++i)
      feeds.emplace_back(inputs_[i].graph_index,
                         Tensor::view(inputs_[i].dtype, dims[i], request.inputs[i].buffer.data, nullptr));
    std::vector<RuntimeValue> values;
    CodedStatus s = execute(*dynamic_executor_, feeds, &values, arena);
    if (s.ok()) s = copy_outputs(values, request, nullptr, output_dims);
    return s;
  }
  KILN_LOG(kDebug, "inputs %s: shape bucket %zu of %zu%s", input_list(inputs_, dims).c_str(), chosen + 1,
           bucket_dims_.size(), exact ? "" : " (padded, outputs sliced)");
  std::vector<std::pair<size_t, RuntimeValue>> feeds;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    Tensor in = Tensor::view(inputs_[i].dtype, dims[i], request.inputs[i].buffer.data, nullptr);
    const std::vector<int64_t>& b = bucket_dims_[chosen][i];
    if (!b.empty() && b != dims[i]) {
      Expected<Tensor> padded = pad_tensor(in, b, pad_values_[i]);
      if (!padded.ok()) {
        Status st = padded.status();
        return coded(st.code() == StatusCode::kResourceExhausted ? KILN_ERROR_BAD_ALLOC : KILN_ERROR_FAILURE,
                     st.add_context("padding input '%s' to shape bucket %s", inputs_[i].name.c_str(),
                                    dims_to_string(b).c_str()));
      }
      in = std::move(padded).value();
    }
    feeds.emplace_back(inputs_[i].graph_index, std::move(in));
  }
  std::vector<RuntimeValue> values;
  CodedStatus s = execute(*variant_executors_[chosen], feeds, &values, arena);
  if (!s.ok()) return s;
  if (true_dims) {
    // The padded run must cover the true outputs; it always does unless padding shrank an
    // output (then the true-shape run is the only correct answer).
    for (size_t o = 0; o < values.size() && true_dims; ++o) {
      const RuntimeValue& v = values[o];
      const std::vector<int64_t>& t = (*true_dims)[o];
      bool covers = v.is_tensor() && v.tensor().rank() == static_cast<int>(t.size());
      for (size_t d = 0; covers && d < t.size(); ++d) covers = t[d] <= v.tensor().dim(static_cast<int>(d));
      if (!covers) true_dims.reset();
    }
    if (!true_dims) {
      values.clear();
      feeds.clear();
      if (!dynamic_executor_)
        return coded(KILN_ERROR_FAILURE, internal_error("the padded run's outputs do not cover the true shapes"));
      std::vector<std::pair<size_t, RuntimeValue>> exact_feeds;
      for (size_t i = 0; i < inputs_.size(); ++i)
        exact_feeds.emplace_back(inputs_[i].graph_index,
                                 Tensor::view(inputs_[i].dtype, dims[i], request.inputs[i].buffer.data, nullptr));
      s = execute(*dynamic_executor_, exact_feeds, &values, arena);
      if (s.ok()) s = copy_outputs(values, request, nullptr, output_dims);
      return s;
    }
  }
  return copy_outputs(values, request, true_dims ? &*true_dims : nullptr, output_dims);
}

CodedStatus Model::run_with_state(ExecutionContext& ctx, const ExecutionRequest& request,
                                  std::vector<std::vector<int64_t>>* output_dims, ExecutionArena& arena) {
  ExecutionState& state = ctx.states.acquire(request.input_dims);
  if (arena_layout_ && !state.has_arena_layout()) state.use_arena_layout(arena_layout_, !workspace_);
  const GraphExecutor& executor = *executor_;
  Status st;
  for (size_t i = 0; i < inputs_.size() && st.ok(); ++i)
    st = executor.bind_input(state, inputs_[i].graph_index, inputs_[i].dtype, request.input_dims[i],
                             request.inputs[i].buffer.data);
  if (st.ok()) st = executor.run_bound(state);
  CodedStatus result = execution_result(std::move(st), arena);
  if (result.ok()) {
    result = copy_outputs([&](size_t g) -> const RuntimeValue& { return executor.output(state, g); }, request,
                          nullptr, output_dims);
  }
  executor.end_run(state);
  if (state.take_new_plan()) arena.release_free();
  ctx.states.trim();
  return result;
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
    if (!variant_executors_.empty()) {
      result = run_bucketed(request, output_dims, arena);
    } else if (!workspace_ || arena_layout_) {
      result = run_with_state(*ctx, request, output_dims, arena);
    } else {
      // A workspace starts every execution empty (ExecutionArena::begin_run), which parked
      // blocks would prevent: these executions keep nothing from one to the next.
      std::vector<std::pair<size_t, RuntimeValue>> feeds;
      feeds.reserve(inputs_.size());
      for (size_t i = 0; i < inputs_.size(); ++i)
        feeds.emplace_back(inputs_[i].graph_index,
                           Tensor::view(inputs_[i].dtype, request.input_dims[i],
                                        request.inputs[i].buffer.data, nullptr));
      std::vector<RuntimeValue> values;
      result = execute(*executor_, feeds, &values, arena);
      if (result.ok())
        result = copy_outputs(values, request, nullptr, output_dims);
      // Activations go back to the arena before the context is handed on.
      values.clear();
      feeds.clear();
    }
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

size_t Model::executor_steps() const {
  if (executor_) return executor_->num_steps();
  return variant_executors_.empty() ? 0 : variant_executors_.front()->num_steps();
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
    SignatureStates::Stats r = c->states.stats();
    s.recycled_outputs += r.recycled_outputs;
    s.parked_bytes += r.parked_bytes;
    s.planned_bytes += r.planned_bytes;
    s.planned_outputs += r.planned_outputs;
    s.shape_signatures += r.signatures;
    s.evicted_signatures += r.evicted;
    s.arenas.held += a.held;
  }
  return s;
}

}  // namespace kiln::rt
