// Per-shape fast kernels for nodes with open dims: concrete twins and the per-node cache.
#include "kernels/shape_specialized_kernel.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include <unistd.h>

#include "core/logging.h"
#include "ir/value_bytes.h"
#include "kernels/kernel_registry.h"
#include "ops/registry.h"

namespace kiln::kernels {

bool has_open_dims(const ir::Node& node) {
  auto open = [](const ir::Value* v) {
    return v && v->type().is_tensor() && v->shape().has_rank() && !v->shape().is_static();
  };
  for (const ir::Value* v : node.inputs())
    if (open(v)) return true;
  for (const ir::Value* v : node.outputs())
    if (open(v)) return true;
  return false;
}

Expected<ConcreteNode> concretize(const ir::Node& node,
                                  const std::vector<const std::vector<int64_t>*>& input_dims) {
  ConcreteNode twin;
  twin.graph = std::make_unique<ir::Graph>("shape_twin");
  ir::Graph& g = *twin.graph;
  std::vector<ir::Value*> inputs;
  std::unordered_map<const ir::Value*, ir::Value*> copied;  // a value read twice is one value
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const ir::Value* v = node.inputs()[i];
    if (!v) {
      inputs.push_back(nullptr);
      continue;
    }
    if (auto it = copied.find(v); it != copied.end()) {
      inputs.push_back(it->second);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(ir::Value * c, g.add_value(v->name()));
    c->type() = v->type();
    if (v->has_initializer()) {
      c->share_initializer(*v);
    } else if (i < input_dims.size() && input_dims[i]) {
      c->type().shape = Shape::from_static(*input_dims[i]);
    }
    if (!v->has_initializer()) g.inputs().push_back(c);
    copied[v] = c;
    inputs.push_back(c);
  }
  std::vector<ir::Value*> outputs;
  for (const ir::Value* v : node.outputs()) {
    if (!v) {
      outputs.push_back(nullptr);
      continue;
    }
    ir::Value* c = nullptr;
    if (auto it = copied.find(v); it != copied.end()) return internal_error("node %s reads its own output", node.label().c_str());
    KILN_ASSIGN_OR_RETURN(c, g.add_value(v->name()));
    // The kind and dtype stay; the shape comes from inference at the concrete input shapes.
    c->type().kind = v->type().kind;
    c->type().dtype = v->type().dtype;
    outputs.push_back(c);
    g.outputs().push_back(c);
  }
  twin.node = g.add_node(node.name(), node.op_type(), node.domain(), node.opset(), std::move(inputs),
                         std::move(outputs));
  twin.node->attrs() = node.attrs();
  KILN_RETURN_IF_ERROR(ops::infer_node(*twin.node));
  return twin;
}

Expected<ConcreteNode> probe_twin(const ir::Node& node) {
  // Each symbol takes the same extent, so inputs that share a symbol (broadcast partners,
  // concatenated tensors) stay consistent; unnamed open dims take it too.
  std::vector<std::vector<int64_t>> dims(node.inputs().size());
  std::vector<const std::vector<int64_t>*> ptrs(node.inputs().size(), nullptr);
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const ir::Value* v = node.inputs()[i];
    if (!v || v->has_initializer() || !v->type().is_tensor()) continue;
    if (!v->shape().has_rank())
      return unsupported("input '%s' of node %s has no known rank", v->name().c_str(), node.label().c_str());
    for (const Dim& d : v->shape().dims()) dims[i].push_back(d.is_static() ? d.value : kProbeExtent);
    ptrs[i] = &dims[i];
  }
  return concretize(node, ptrs);
}

size_t shape_cache_capacity() {
  static const size_t capacity = [] {
    const char* env = std::getenv("KILN_SHAPE_CACHE");
    if (!env || !*env) return size_t{16};
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (*end != '\0' || v < 1 || v > 4096) {
      KILN_LOG(kWarning, "KILN_SHAPE_CACHE='%s' ignored: expected a count of shapes kept per node, 1..4096 "
                         "(default 16)", env);
      return size_t{16};
    }
    return static_cast<size_t>(v);
  }();
  return capacity;
}

namespace {

// Physical memory of the machine: no value of a run can be larger (the kernel layer does not
// know the device's share; the model loader checks fixed shapes against that).
size_t machine_memory_bytes() {
  static const size_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
  }();
  return bytes;
}

// One prepared shape of a node: its twin and the fast kernel prepared for it, or no kernel
// (the twin's shapes are refused by every fast kernel: the reference kernel runs).
struct PreparedShape {
  std::vector<std::vector<int64_t>> input_dims;  // per input; empty for a non-tensor or omitted
  ConcreteNode twin;
  std::unique_ptr<Kernel> kernel;
  mutable std::atomic<uint64_t> last_use{0};
};

class ShapeSpecializedKernel final : public Kernel {
 public:
  ShapeSpecializedKernel(const ir::Node& node, DeviceKind device, const ops::KernelFn* reference,
                         std::string planned)
      : node_(node), device_(device), reference_(reference), planned_(std::move(planned)) {}

  Status run(ops::KernelContext& ctx) const override {
    std::shared_ptr<const PreparedShape> shape = find(ctx);
    if (!shape) {
      KILN_ASSIGN_OR_RETURN(shape, prepare_shape(ctx));
    }
    if (!shape->kernel) return (*reference_)(ctx);
    ops::KernelContext concrete(*shape->twin.node, ctx);
    return shape->kernel->run(concrete);
  }

  std::string implementation() const override { return "per-shape:" + planned_; }

 private:
  static bool same_dims(const PreparedShape& s, const ops::KernelContext& ctx) {
    const int n = ctx.num_inputs();
    if (static_cast<size_t>(n) != s.input_dims.size()) return false;
    for (int i = 0; i < n; ++i) {
      const Tensor* t = ctx.input(i);
      const std::vector<int64_t>& want = s.input_dims[static_cast<size_t>(i)];
      if (t ? t->dims() != want : !want.empty()) return false;
    }
    return true;
  }

  std::shared_ptr<const PreparedShape> find(const ops::KernelContext& ctx) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& s : shapes_)
      if (same_dims(*s, ctx)) {
        s->last_use.store(++clock_, std::memory_order_relaxed);
        return s;
      }
    return nullptr;
  }

  // Builds the twin and its kernel outside the lock (preparing packs weights and makes
  // primitives: milliseconds), then inserts it, evicting the least recently used shape. Two
  // threads meeting a new shape at once both prepare it; the second insert keeps the first.
  Expected<std::shared_ptr<const PreparedShape>> prepare_shape(const ops::KernelContext& ctx) const {
    auto shape = std::make_shared<PreparedShape>();
    std::vector<const std::vector<int64_t>*> dims;
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      shape->input_dims.push_back(t ? t->dims() : std::vector<int64_t>{});
    }
    for (int i = 0; i < ctx.num_inputs(); ++i)
      dims.push_back(ctx.input(i) ? &shape->input_dims[static_cast<size_t>(i)] : nullptr);
    auto twin = concretize(node_, dims);
    if (twin.ok()) {
      // An output no memory can hold is refused before a kernel is prepared for it (oneDNN
      // spends minutes making primitives for such shapes), and is not cached.
      for (const ir::Value* y : twin->node->outputs())
        if (size_t bytes = y ? ir::static_value_bytes(*y) : 0; bytes > machine_memory_bytes())
          return resource_exhausted("node %s: output '%s' (%s) needs %s, more than this machine's memory (%s): "
                                    "give smaller input shapes",
                                    node_.label().c_str(), y->name().c_str(), y->type().to_string().c_str(),
                                    ir::bytes_text(bytes).c_str(), ir::bytes_text(machine_memory_bytes()).c_str());
      shape->twin = std::move(*twin);
      // Dims inference cannot tell even now (data-dependent) leave the reference kernel.
      if (!has_open_dims(*shape->twin.node)) shape->kernel = select_kernel(*shape->twin.node, device_);
    } else {
      // Inference refused the shapes: the reference kernel runs and reports the problem.
      KILN_LOG(kDebug, "node %s: no concrete twin at these shapes: %s", node_.label().c_str(),
               twin.status().to_string().c_str());
    }
    KILN_LOG(kDebug, "node %s: prepared a new shape on %s", node_.label().c_str(),
             shape->kernel ? shape->kernel->implementation().c_str() : "the reference kernel");
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& s : shapes_)
      if (same_dims(*s, ctx)) return s;
    shape->last_use.store(++clock_, std::memory_order_relaxed);
    if (shapes_.size() >= shape_cache_capacity()) {
      size_t oldest = 0;
      for (size_t i = 1; i < shapes_.size(); ++i)
        if (shapes_[i]->last_use.load(std::memory_order_relaxed) <
            shapes_[oldest]->last_use.load(std::memory_order_relaxed))
          oldest = i;
      shapes_.erase(shapes_.begin() + static_cast<std::ptrdiff_t>(oldest));
    }
    shapes_.push_back(shape);
    return std::shared_ptr<const PreparedShape>(std::move(shape));
  }

  const ir::Node& node_;
  DeviceKind device_;
  const ops::KernelFn* reference_;
  std::string planned_;
  mutable std::mutex mutex_;
  // Shared pointers: a shape evicted while another thread runs it lives until that run ends.
  mutable std::vector<std::shared_ptr<const PreparedShape>> shapes_;
  mutable uint64_t clock_ = 0;  // guarded by mutex_
};

}  // namespace

std::unique_ptr<Kernel> make_shape_specialized_kernel(const ir::Node& node, DeviceKind device) {
  auto schema = ops::schema_for(node);
  if (!schema.ok() || !(*schema)->kernel_fn()) return nullptr;
  if (KernelRegistry::instance().candidates(node.domain(), node.op_type(), device).empty()) return nullptr;
  // Even where the compile-time probe found no fast kernel, the run-time shapes may suit one:
  // the per-shape kernel asks at each new shape (a cached refusal costs a lookup per run).
  return std::make_unique<ShapeSpecializedKernel>(node, device, &(*schema)->kernel_fn(),
                                                  plan_kernel(node, device).implementation);
}

}  // namespace kiln::kernels
