// Single-operator mode (include/kiln/kiln_op.h): one ONNX op run without a model.
//
// A call is keyed by (device, op type, domain, opset, attributes, input dtypes and dims).
// On a miss the op becomes a one-node ONNX model compiled by Kiln's compiler (so it gets
// the kernel a model would: same passes, same kernel selection) and loaded as a runtime
// Model; the cache keeps it (bounded LRU). On a hit the call is a key build, a hash
// lookup, a bind of the caller's buffers and a task on the stream, as kilnmdlExecuteAsync.
//
// This lives in its own folder, not src/runtime, because it needs the compiler, which
// the runtime layer does not link.
#include "kiln/kiln_op.h"

#include <onnx/onnx_pb.h>

#include <charconv>
#include <cstring>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include "compiler/compiler.h"
#include "ops/registry.h"
#include "capi/api_dataset.h"
#include "capi/api_guard.h"
#include "capi/api_internal.h"
#include "runtime/device.h"
#include "runtime/model_runtime.h"
#include "runtime/stream.h"

using kiln::rt::api_entry;
using kiln::rt::api_entry_or;
using kiln::rt::api_entry_void;
using kiln::rt::ApiNeeds;
using kiln::rt::fail;

struct kilnopAttr {
  using Value = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;
  std::map<std::string, Value> values;  // ordered: the cache key lists them by name
};

namespace kiln::rt {
namespace {

// The attribute sets made by kilnopCreateAttr and not yet destroyed: a handle Kiln did not
// make (or one destroyed) is an error code, as for tensor descs, not a wild delete.
std::mutex g_attr_mutex;
std::unordered_set<const kilnopAttr*> g_live_attrs;

bool live_attr(const kilnopAttr* attr) {
  std::lock_guard lock(g_attr_mutex);
  return g_live_attrs.count(attr) != 0;
}

// ONNX TensorProto element types of the C dtypes (ONNX's numbering differs from AscendCL's).
int onnx_elem_type(kilnDataType t) {
  switch (t) {
    case KILN_FLOAT: return onnx::TensorProto::FLOAT;
    case KILN_FLOAT16: return onnx::TensorProto::FLOAT16;
    case KILN_INT8: return onnx::TensorProto::INT8;
    case KILN_INT32: return onnx::TensorProto::INT32;
    case KILN_UINT8: return onnx::TensorProto::UINT8;
    case KILN_INT16: return onnx::TensorProto::INT16;
    case KILN_UINT16: return onnx::TensorProto::UINT16;
    case KILN_UINT32: return onnx::TensorProto::UINT32;
    case KILN_INT64: return onnx::TensorProto::INT64;
    case KILN_UINT64: return onnx::TensorProto::UINT64;
    case KILN_DOUBLE: return onnx::TensorProto::DOUBLE;
    case KILN_BOOL: return onnx::TensorProto::BOOL;
    case KILN_BF16: return onnx::TensorProto::BFLOAT16;
    default: return 0;
  }
}

struct CompiledOp;

// What a queued kilnopExecute needs: the model, the bound request, the token that keeps the
// model counted in flight, and, while in flight, the op it goes back to.
struct OpLaunch {
  std::shared_ptr<Model> model;
  ExecutionRequest request;
  std::optional<ExecutionToken> token;
  std::shared_ptr<const CompiledOp> op;
};

// One compiled op: the loaded one-node model and the outputs inference gave, and the launches
// of its finished calls. A cached call reuses one (its request's vectors keep their capacity),
// so it allocates nothing but the stream task's closure: the calls' allocations were made by
// the caller's thread and freed by the stream's, which glibc's per-thread caches do not
// recycle, and the allocator's slow path was most of a call (bench/op_bench).
struct CompiledOp {
  std::shared_ptr<Model> model;
  std::vector<kilnDataType> out_dtypes;
  std::vector<std::vector<int64_t>> out_dims;

  std::shared_ptr<OpLaunch> take_launch() const {
    {
      std::lock_guard lock(spare_mutex);
      if (!spare.empty()) {
        std::shared_ptr<OpLaunch> l = std::move(spare.back());
        spare.pop_back();
        return l;
      }
    }
    auto l = std::make_shared<OpLaunch>();
    l->model = model;
    return l;
  }
  // A finished launch (its token released) comes back; beyond kMaxSpare it is freed.
  void recycle(std::shared_ptr<OpLaunch> l) const {
    l->token.reset();
    l->op.reset();
    std::lock_guard lock(spare_mutex);
    if (spare.size() < kMaxSpare) spare.push_back(std::move(l));
  }

 private:
  static constexpr size_t kMaxSpare = 64;
  mutable std::mutex spare_mutex;
  mutable std::vector<std::shared_ptr<OpLaunch>> spare;
};

// The compiled-op cache: LRU over a hash map; one mutex (a hit holds it for a lookup and a
// list splice). Compiling happens outside the lock, so a slow compile blocks no hit.
class OpCache {
 public:
  static OpCache& get() {
    static OpCache* cache = [] {
      auto* c = new OpCache();  // never destroyed: models must go at kilnFinalize, not exit
      add_finalize_hook([c] { c->clear(); });
      return c;
    }();
    return *cache;
  }

  std::shared_ptr<const CompiledOp> find(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  void insert(const std::string& key, std::shared_ptr<const CompiledOp> op) {
    std::lock_guard lock(mutex_);
    ++misses_;
    auto it = map_.find(key);
    if (it != map_.end()) {  // another thread compiled the same key meanwhile
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    lru_.emplace_front(key, std::move(op));
    map_.emplace(key, lru_.begin());
    trim_locked();
  }

  void set_capacity(size_t capacity) {
    std::lock_guard lock(mutex_);
    capacity_ = capacity;
    trim_locked();
  }

  void stats(uint64_t* hits, uint64_t* misses, size_t* entries) {
    std::lock_guard lock(mutex_);
    *hits = hits_;
    *misses = misses_;
    *entries = map_.size();
  }

  void clear() {
    std::lock_guard lock(mutex_);
    map_.clear();
    lru_.clear();
  }

 private:
  void trim_locked() {
    while (map_.size() > capacity_) {
      map_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  using Entry = std::pair<std::string, std::shared_ptr<const CompiledOp>>;
  std::mutex mutex_;
  std::list<Entry> lru_;
  std::unordered_map<std::string, std::list<Entry>::iterator> map_;
  size_t capacity_ = 256;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

void append_num(std::string& s, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}

void append_float(std::string& s, float f) {  // the bits: 0.1f and its neighbours differ
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  append_num(s, bits);
}

// What a call asks for, checked: everything the key and the one-node model are made of.
struct OpRequest {
  const char* api;
  std::string op_type;
  std::string domain;
  int32_t opset = 0;
  std::vector<const kilnTensorDesc*> inputs;
  const kilnopAttr* attr = nullptr;
};

kilnError check_request(const OpRequest& r, int num_inputs, const kilnTensorDesc* const desc[]) {
  if (r.op_type.empty()) return fail(KILN_ERROR_INVALID_PARAM, "%s: opType is NULL or empty", r.api);
  if (r.opset <= 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: opsetVersion %d must be > 0", r.api, r.opset);
  if (r.attr != nullptr && !live_attr(r.attr))
    return fail(KILN_ERROR_INVALID_PARAM, "%s: attr is not a live kilnopAttr", r.api);
  if (num_inputs < 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: numInputs %d < 0", r.api, num_inputs);
  if (num_inputs > 0 && desc == nullptr)
    return fail(KILN_ERROR_INVALID_PARAM, "%s: inputDesc is NULL with %d inputs", r.api, num_inputs);
  for (int i = 0; i < num_inputs; ++i) {
    const kilnTensorDesc* d = desc[i];
    if (d == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: inputDesc[%d] is NULL", r.api, i);
    if (onnx_elem_type(d->dtype) == 0)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: input %d: dtype %d is not supported", r.api, i, d->dtype);
    for (int64_t dim : d->dims)
      if (dim < 0)
        return fail(KILN_ERROR_INVALID_PARAM, "%s: input %d: dim %lld is not fixed (every dim must be >= 0)",
                    r.api, i, static_cast<long long>(dim));
  }
  return KILN_SUCCESS;
}

// Writes the key into `key` (cleared first; a caller's thread-local string keeps its
// capacity, so a cached call allocates no key).
void make_key(const OpRequest& r, int num_outputs, const Device& device, std::string& key) {
  key.clear();
  append_num(key, num_outputs);  // the node's output count: a 1-output and a 2-output MaxPool differ
  key += '|';
  append_num(key, reinterpret_cast<intptr_t>(&device));
  key += '|';
  key += r.op_type;
  key += '|';
  key += r.domain;
  key += '|';
  append_num(key, r.opset);
  for (const kilnTensorDesc* d : r.inputs) {
    key += "|i";
    append_num(key, d->dtype);
    for (int64_t dim : d->dims) {
      key += ',';
      append_num(key, dim);
    }
  }
  if (r.attr) {
    for (const auto& [name, value] : r.attr->values) {
      key += "|a";
      key += name;
      key += '=';
      key += static_cast<char>('0' + value.index());
      if (auto* i = std::get_if<int64_t>(&value)) append_num(key, *i);
      if (auto* f = std::get_if<float>(&value)) append_float(key, *f);
      if (auto* s = std::get_if<std::string>(&value)) {
        append_num(key, static_cast<int64_t>(s->size()));  // length first: no separator clash
        key += ':';
        key += *s;
      }
      if (auto* li = std::get_if<std::vector<int64_t>>(&value))
        for (int64_t v : *li) key += ',', append_num(key, v);
      if (auto* lf = std::get_if<std::vector<float>>(&value))
        for (float v : *lf) key += ',', append_float(key, v);
    }
  }
}

std::string one_node_model(const OpRequest& r, int num_outputs) {
  onnx::ModelProto m;
  m.set_ir_version(onnx::IR_VERSION);
  m.set_producer_name("kilnop");
  auto* opset = m.add_opset_import();
  opset->set_domain(r.domain);
  opset->set_version(r.opset);
  if (!r.domain.empty()) {  // the node's own domain; ONNX still needs its default one
    auto* def = m.add_opset_import();
    def->set_domain("");
    def->set_version(21);
  }
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(r.op_type);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(r.op_type);
  n->set_domain(r.domain);
  n->set_name(r.op_type);
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    std::string name = "x";  // (not "x" + to_string: GCC 12 warns falsely, -Wrestrict)
    name += std::to_string(i);
    n->add_input(name);
    onnx::ValueInfoProto* vi = g->add_input();
    vi->set_name(name);
    onnx::TypeProto_Tensor* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx_elem_type(r.inputs[i]->dtype));
    onnx::TensorShapeProto* shape = t->mutable_shape();
    for (int64_t dim : r.inputs[i]->dims) shape->add_dim()->set_dim_value(dim);
  }
  for (int i = 0; i < num_outputs; ++i) {
    std::string name = "y";
    name += std::to_string(i);
    n->add_output(name);
    g->add_output()->set_name(name);
  }
  if (r.attr) {
    for (const auto& [name, value] : r.attr->values) {
      onnx::AttributeProto* a = n->add_attribute();
      a->set_name(name);
      if (auto* i = std::get_if<int64_t>(&value)) a->set_type(onnx::AttributeProto::INT), a->set_i(*i);
      if (auto* f = std::get_if<float>(&value)) a->set_type(onnx::AttributeProto::FLOAT), a->set_f(*f);
      if (auto* s = std::get_if<std::string>(&value)) a->set_type(onnx::AttributeProto::STRING), a->set_s(*s);
      if (auto* li = std::get_if<std::vector<int64_t>>(&value)) {
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t v : *li) a->add_ints(v);
      }
      if (auto* lf = std::get_if<std::vector<float>>(&value)) {
        a->set_type(onnx::AttributeProto::FLOATS);
        for (float v : *lf) a->add_floats(v);
      }
    }
  }
  return m.SerializeAsString();
}

// The node gets `num_outputs` outputs (the caller's count; optional trailing outputs left
// out are not computed).
kilnError compile_op(const OpRequest& r, int num_outputs, Device& device, std::shared_ptr<const CompiledOp>* out) {
  const ops::OpSchema* schema = ops::OpRegistry::instance().find(r.domain, r.op_type, r.opset);
  if (schema == nullptr)
    return fail(KILN_ERROR_OP_TYPE_NOT_MATCH, "%s: Kiln has no op %s in domain '%s' at opset %d", r.api,
                r.op_type.c_str(), r.domain.c_str(), r.opset);
  std::string bytes = one_node_model(r, num_outputs);
  Expected<compiler::CompiledModel> compiled =
      compiler::compile_onnx_bytes(bytes.data(), bytes.size(), r.op_type, compiler::CompileOptions{});
  if (!compiled.ok()) {
    const Status& s = compiled.status();
    std::string msg = s.to_string();
    // The compiler's message names the cause (an attribute, an input's dtype or shape);
    // the code says which part of the call it is about.
    kilnError code = KILN_ERROR_OP_INPUT_NOT_MATCH;
    if (msg.find("ttribute") != std::string::npos) code = KILN_ERROR_OP_ATTR_NOT_MATCH;
    return fail(code, "%s: %s (domain '%s', opset %d) does not compile for these inputs: %s", r.api,
                r.op_type.c_str(), r.domain.c_str(), r.opset, msg.c_str());
  }
  model::LoadedModel loaded;
  loaded.info = compiled->info;
  loaded.graph = compiled->graph;
  loaded.variants.push_back(model::LoadedVariant{{}, compiled->graph});
  auto op = std::make_shared<CompiledOp>();
  CodedStatus st;
  {
    ComputeScope scope(device, ComputeScope::Team::kRelease);  // as a model load (api_model.cc)
    st = Model::create(std::move(loaded), device, std::nullopt, &op->model);
  }
  if (!st.ok()) return fail(st.code, "%s: %s: %s", r.api, r.op_type.c_str(), st.status.to_string().c_str());
  for (const ModelIo& o : op->model->outputs()) {
    if (!o.is_static)
      return fail(KILN_ERROR_OP_OUTPUT_NOT_MATCH, "%s: %s: the shape of output '%s' is not known from the inputs",
                  r.api, r.op_type.c_str(), o.name.c_str());
    op->out_dtypes.push_back(o.c_dtype);
    op->out_dims.push_back(o.dims);
  }
  *out = std::move(op);
  return KILN_SUCCESS;
}

// The compiled op of a request: from the cache, or compiled and cached.
kilnError lookup(const OpRequest& r, int num_outputs, std::shared_ptr<const CompiledOp>* out) {
  Context* ctx = current_context();
  if (!ctx)
    return fail(KILN_ERROR_RT_CONTEXT_NULL,
                "%s: no current context on this thread (call kilnrtSetDevice or kilnrtCreateContext first)", r.api);
  if (num_outputs <= 0) num_outputs = 1;  // kilnopCompile: the op's first output
  thread_local std::string key;
  make_key(r, num_outputs, ctx->device(), key);
  OpCache& cache = OpCache::get();
  if ((*out = cache.find(key))) return KILN_SUCCESS;
  if (kilnError e = compile_op(r, num_outputs, ctx->device(), out)) return e;
  cache.insert(key, *out);
  return KILN_SUCCESS;
}

OpRequest make_op_request(const char* api, const char* op_type, const char* domain, int32_t opset, int n,
                          const kilnTensorDesc* const desc[], const kilnopAttr* attr) {
  OpRequest r;
  r.api = api;
  r.op_type = op_type ? op_type : "";
  r.domain = domain ? domain : "";
  if (r.domain == "ai.onnx") r.domain.clear();  // one name for the default domain in keys
  r.opset = opset;
  if (n > 0 && desc) r.inputs.assign(desc, desc + n);
  r.attr = attr;
  return r;
}

std::string dims_str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ',';
    append_num(s, dims[i]);
  }
  return s + "]";
}

}  // namespace
}  // namespace kiln::rt

using namespace kiln::rt;  // NOLINT: the C entry points below are thin shells over it

kilnopAttr* kilnopCreateAttr(void) {
  return api_entry_or<kilnopAttr*>("kilnopCreateAttr", ApiNeeds::kNothing, nullptr, [] {
    auto attr = std::make_unique<kilnopAttr>();
    std::lock_guard lock(g_attr_mutex);
    g_live_attrs.insert(attr.get());
    return attr.release();
  });
}

void kilnopDestroyAttr(const kilnopAttr* attr) {
  api_entry_void("kilnopDestroyAttr", ApiNeeds::kNothing, [&] {
    if (attr == nullptr) return;  // as free(NULL)
    {
      std::lock_guard lock(g_attr_mutex);
      if (g_live_attrs.erase(attr) == 0) {
        fail(KILN_ERROR_INVALID_PARAM, "kilnopDestroyAttr: %p is not a live kilnopAttr", static_cast<const void*>(attr));
        return;
      }
    }
    delete attr;
  });
}

namespace {
template <class V>
kilnError set_attr(const char* api, kilnopAttr* attr, const char* name, V value) {
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (!live_attr(attr)) return fail(KILN_ERROR_INVALID_PARAM, "%s: attr is NULL or not a live kilnopAttr", api);
    if (name == nullptr || *name == '\0') return fail(KILN_ERROR_INVALID_PARAM, "%s: attrName is NULL or empty", api);
    attr->values[name] = std::move(value);
    return KILN_SUCCESS;
  });
}
}  // namespace

kilnError kilnopSetAttrInt(kilnopAttr* attr, const char* attrName, int64_t attrValue) {
  return set_attr("kilnopSetAttrInt", attr, attrName, attrValue);
}
kilnError kilnopSetAttrFloat(kilnopAttr* attr, const char* attrName, float attrValue) {
  return set_attr("kilnopSetAttrFloat", attr, attrName, attrValue);
}
kilnError kilnopSetAttrString(kilnopAttr* attr, const char* attrName, const char* attrValue) {
  if (attrValue == nullptr)
    return api_entry("kilnopSetAttrString", ApiNeeds::kNothing,
                     [] { return fail(KILN_ERROR_INVALID_PARAM, "kilnopSetAttrString: attrValue is NULL"); });
  return set_attr("kilnopSetAttrString", attr, attrName, std::string(attrValue));
}
kilnError kilnopSetAttrListInt(kilnopAttr* attr, const char* attrName, int numValues, const int64_t* values) {
  if (numValues < 0 || (numValues > 0 && values == nullptr))
    return api_entry("kilnopSetAttrListInt", ApiNeeds::kNothing, [] {
      return fail(KILN_ERROR_INVALID_PARAM, "kilnopSetAttrListInt: numValues < 0, or values NULL");
    });
  return set_attr("kilnopSetAttrListInt", attr, attrName, std::vector<int64_t>(values, values + numValues));
}
kilnError kilnopSetAttrListFloat(kilnopAttr* attr, const char* attrName, int numValues, const float* values) {
  if (numValues < 0 || (numValues > 0 && values == nullptr))
    return api_entry("kilnopSetAttrListFloat", ApiNeeds::kNothing, [] {
      return fail(KILN_ERROR_INVALID_PARAM, "kilnopSetAttrListFloat: numValues < 0, or values NULL");
    });
  return set_attr("kilnopSetAttrListFloat", attr, attrName, std::vector<float>(values, values + numValues));
}

kilnError kilnopCompile(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                        const kilnTensorDesc* const inputDesc[], const kilnopAttr* attr) {
  const char* api = "kilnopCompile";
  return api_entry(api, ApiNeeds::kRuntime, [&]() -> kilnError {
    OpRequest r = make_op_request(api, opType, domain, opsetVersion, numInputs, inputDesc, attr);
    if (kilnError e = check_request(r, numInputs, inputDesc)) return e;
    std::shared_ptr<const CompiledOp> op;
    return lookup(r, 0, &op);
  });
}

kilnError kilnopInferShape(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                           const kilnTensorDesc* const inputDesc[], int numOutputs, kilnTensorDesc* outputDesc[],
                           const kilnopAttr* attr) {
  const char* api = "kilnopInferShape";
  return api_entry(api, ApiNeeds::kRuntime, [&]() -> kilnError {
    OpRequest r = make_op_request(api, opType, domain, opsetVersion, numInputs, inputDesc, attr);
    if (kilnError e = check_request(r, numInputs, inputDesc)) return e;
    if (numOutputs <= 0 || outputDesc == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: numOutputs must be > 0 and outputDesc not NULL", api);
    std::shared_ptr<const CompiledOp> op;
    if (kilnError e = lookup(r, numOutputs, &op)) return e;
    // Made by kilnCreateTensorDesc, so the desc getters (which check live descs) accept them.
    for (int i = 0; i < numOutputs; ++i) {
      const std::vector<int64_t>& dims = op->out_dims[i];
      outputDesc[i] = kilnCreateTensorDesc(op->out_dtypes[i], static_cast<int>(dims.size()), dims.data(),
                                           KILN_FORMAT_ND);
      if (outputDesc[i] == nullptr) {
        for (int k = 0; k < i; ++k) kilnDestroyTensorDesc(outputDesc[k]), outputDesc[k] = nullptr;
        return fail(KILN_ERROR_BAD_ALLOC, "%s: could not create output desc %d", api, i);
      }
    }
    return KILN_SUCCESS;
  });
}

kilnError kilnopExecute(const char* opType, const char* domain, int32_t opsetVersion, int numInputs,
                        const kilnTensorDesc* const inputDesc[], const kilnDataBuffer* const inputs[],
                        int numOutputs, const kilnTensorDesc* const outputDesc[], kilnDataBuffer* const outputs[],
                        const kilnopAttr* attr, kilnrtStream stream) {
  const char* api = "kilnopExecute";
  return api_entry(api, ApiNeeds::kRuntime, [&]() -> kilnError {
    OpRequest r = make_op_request(api, opType, domain, opsetVersion, numInputs, inputDesc, attr);
    if (kilnError e = check_request(r, numInputs, inputDesc)) return e;
    if (numInputs > 0 && inputs == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: inputs is NULL", api);
    if (numOutputs <= 0 || outputDesc == nullptr || outputs == nullptr)
      return fail(KILN_ERROR_INVALID_PARAM, "%s: numOutputs must be > 0, outputDesc and outputs not NULL", api);
    for (int i = 0; i < numInputs; ++i)
      if (inputs[i] == nullptr) return fail(KILN_ERROR_INVALID_PARAM, "%s: inputs[%d] is NULL", api, i);
    for (int i = 0; i < numOutputs; ++i)
      if (outputDesc[i] == nullptr || outputs[i] == nullptr)
        return fail(KILN_ERROR_INVALID_PARAM, "%s: outputDesc[%d] or outputs[%d] is NULL", api, i, i);
    std::shared_ptr<const CompiledOp> op;
    if (kilnError e = lookup(r, numOutputs, &op)) return e;
    for (int i = 0; i < numOutputs; ++i) {
      const kilnTensorDesc* d = outputDesc[i];
      if (d->dtype != op->out_dtypes[i] || d->dims != op->out_dims[i])
        return fail(KILN_ERROR_OP_OUTPUT_NOT_MATCH,
                    "%s: %s output %d: the desc says dtype %d dims %s, shape inference gives dtype %d dims %s", api,
                    r.op_type.c_str(), i, d->dtype, dims_str(d->dims).c_str(), op->out_dtypes[i],
                    dims_str(op->out_dims[i]).c_str());
    }
    const std::shared_ptr<Model>& m = op->model;
    kiln::Expected<Stream*> resolved = resolve_stream(stream, api);
    if (!resolved.ok()) return fail(resolved.status());
    Stream* s = *resolved;
    if (&s->device() != &m->device())
      return fail(KILN_ERROR_RT_STREAM_CONTEXT, "%s: %s is on %s, the current context on %s", api,
                  s->name().c_str(), s->device().name().c_str(), m->device().name().c_str());
    std::shared_ptr<OpLaunch> launch = op->take_launch();
    ExecutionRequest* request = &launch->request;
    request->inputs.resize(numInputs);
    for (int i = 0; i < numInputs; ++i) {
      request->inputs[i].buffer = BufferRef{inputs[i]->data, inputs[i]->size};
      request->inputs[i].dims = inputDesc[i]->dims;
      request->inputs[i].dtype = inputDesc[i]->dtype;
    }
    request->outputs.resize(numOutputs);
    for (int i = 0; i < numOutputs; ++i) request->outputs[i] = BufferRef{outputs[i]->data, outputs[i]->size};
    CodedStatus st = m->bind(*request);
    if (!st.ok()) {
      op->recycle(std::move(launch));
      return fail(st.code, "%s: %s: %s", api, r.op_type.c_str(), st.status.to_string().c_str());
    }
    // The token keeps the model alive (an eviction or kilnopClearCache meanwhile is fine). A
    // task the stream skips drops its launch without recycling it: the token goes with it.
    launch->token.emplace(m);
    launch->op = op;
    s->submit(Engine::kCompute, [launch]() -> kiln::Status {
      kiln::Status result;
      try {
        std::vector<std::vector<int64_t>> dims;
        CodedStatus run = launch->model->run(launch->request, &dims);
        if (!run.ok()) result = std::move(run.status);
      } catch (const std::exception& e) {
        result = kiln::internal_error("kilnopExecute: unexpected exception: %s", e.what());
      }
      std::shared_ptr<const CompiledOp> home = std::move(launch->op);
      home->recycle(launch);
      return result;
    }, "OpExecute");
    return KILN_SUCCESS;
  });
}

kilnError kilnopSetCacheCapacity(size_t capacity) {
  const char* api = "kilnopSetCacheCapacity";
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (capacity == 0) return fail(KILN_ERROR_INVALID_PARAM, "%s: capacity must be >= 1", api);
    OpCache::get().set_capacity(capacity);
    return KILN_SUCCESS;
  });
}

kilnError kilnopGetCacheStats(uint64_t* hits, uint64_t* misses, size_t* entries) {
  const char* api = "kilnopGetCacheStats";
  return api_entry(api, ApiNeeds::kNothing, [&]() -> kilnError {
    if (!hits || !misses || !entries) return fail(KILN_ERROR_INVALID_PARAM, "%s: a pointer is NULL", api);
    OpCache::get().stats(hits, misses, entries);
    return KILN_SUCCESS;
  });
}

kilnError kilnopClearCache(void) {
  return api_entry("kilnopClearCache", ApiNeeds::kNothing, [] {
    OpCache::get().clear();
    return KILN_SUCCESS;
  });
}
