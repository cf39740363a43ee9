// The kernel registry and kernel selection with reference fallback.
#include "kernels/kernel_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/logging.h"
#include "kernels/prepacked_weights.h"
#include "kernels/shape_specialized_kernel.h"

namespace kiln::kernels {

std::string dtype_list(std::initializer_list<DataType> dtypes) {
  std::string out;
  size_t i = 0;
  for (DataType t : dtypes) {
    if (i) out += i + 1 == dtypes.size() ? " and " : ", ";
    out += dtype_name(t);
    ++i;
  }
  return out;
}

Status require_static_tensor(const char* what, const ir::Value* v, std::initializer_list<DataType> dtypes) {
  if (!v) return unsupported("%s is missing", what);
  if (std::find(dtypes.begin(), dtypes.end(), v->dtype()) == dtypes.end())
    return unsupported("%s dtype %s: only %s", what, dtype_name(v->dtype()), dtype_list(dtypes).c_str());
  if (!v->shape().has_rank() || !v->shape().is_static())
    return unsupported("%s %s: open dims (static shapes only)", what, v->type().to_string().c_str());
  return ok_status();
}

Status require_initializer(const char* what, const ir::Value* v, DataType dtype) {
  if (!v) return unsupported("%s is missing", what);
  if (!v->has_initializer()) return unsupported("%s is not constant (not an initializer)", what);
  if (v->initializer()->dtype() != dtype)
    return unsupported("%s dtype %s: only %s", what, dtype_name(v->initializer()->dtype()), dtype_name(dtype));
  return ok_status();
}

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry* registry = new KernelRegistry;  // never destroyed: used by static registrars
  return *registry;
}

void KernelRegistry::add(KernelFactory factory) {
  factories_.push_back(std::make_unique<KernelFactory>(std::move(factory)));
}

std::vector<const KernelFactory*> KernelRegistry::candidates(const std::string& domain, const std::string& op_type,
                                                             DeviceKind device) const {
  std::vector<const KernelFactory*> out;
  for (const auto& f : factories_)
    if (f->domain == domain && f->op_type == op_type && f->device == device) out.push_back(f.get());
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelFactory* a, const KernelFactory* b) { return a->priority > b->priority; });
  return out;
}

namespace {
// -1: no override (the environment decides); 0 or 1: set_fast_kernels_enabled's value.
std::atomic<int> fast_kernels_override{-1};
}  // namespace

bool fast_kernels_enabled() {
  int forced = fast_kernels_override.load(std::memory_order_relaxed);
  if (forced >= 0) return forced == 1;
  static const bool enabled = [] {
    const char* env = std::getenv("KILN_KERNELS");
    return !(env && std::strcmp(env, "reference") == 0);
  }();
  return enabled;
}

void set_fast_kernels_enabled(bool enabled) { fast_kernels_override.store(enabled ? 1 : 0); }

void reset_fast_kernels_enabled() { fast_kernels_override.store(-1); }

namespace {

// A factory's refusal as the report shows it, without the "node 'x' (Op): " the kernels'
// plan functions start their messages with: the report names the node already.
std::string refusal_text(const ir::Node& node, const Status& refusal) {
  std::string text = refusal.to_string();
  const std::string prefix = "node " + node.label() + ": ";
  for (size_t at; (at = text.find(prefix)) != std::string::npos;) text.erase(at, prefix.size());
  return text;
}

// Appends "name: why" to a "; "-separated list of refusals.
void add_refusal(std::string& refusals, const std::string& name, const std::string& why) {
  if (!refusals.empty()) refusals += "; ";
  refusals += name + ": " + why;
}

Status check_applicable(const KernelFactory& f, const ir::Node& node) {
  return f.applicable ? f.applicable(node) : ok_status();
}

// The first factory whose `applicable` accepts `node` as it is, or null; `refusals` (when
// given) collects why each factory tried before it said no.
const KernelFactory* first_applicable(const ir::Node& node, DeviceKind device, std::string* refusals = nullptr) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device)) {
    Status s = check_applicable(*f, node);
    if (s.ok()) return f;
    if (refusals) add_refusal(*refusals, f->name, refusal_text(node, s));
  }
  return nullptr;
}

}  // namespace

std::unique_ptr<Kernel> select_kernel(const ir::Node& node, DeviceKind device) {
  if (!fast_kernels_enabled()) return nullptr;
  if (has_open_dims(node)) return make_shape_specialized_kernel(node, device);
  std::string refusals;  // of the factories tried, for the debug log
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device)) {
    if (Status s = check_applicable(*f, node); !s.ok()) {
      add_refusal(refusals, f->name, refusal_text(node, s));
      continue;
    }
    const PrepackedSource prepacked(node);  // weights `kiln compile` packed into the model
    auto k = f->prepare(node);
    if (k.ok() && *k) {
      if (!refusals.empty())
        KILN_LOG(kDebug, "node %s: kernel '%s' chosen after %s", node.label().c_str(), f->name.c_str(),
                 refusals.c_str());
      return std::move(*k);
    }
    // What applicable() cannot see: oneDNN has no primitive for it, an unpackable weight.
    add_refusal(refusals, f->name,
                k.ok() ? std::string("prepare gave no kernel") : "prepare: " + refusal_text(node, k.status()));
  }
  if (!refusals.empty())
    KILN_LOG(kDebug, "node %s runs on its reference kernel: %s", node.label().c_str(), refusals.c_str());
  return nullptr;
}

KernelPlan plan_kernel(const ir::Node& node, DeviceKind device) {
  KernelPlan plan;
  if (!fast_kernels_enabled()) {
    plan.reason = "fast kernels are off (KILN_KERNELS=reference or --reference-kernels)";
    return plan;
  }
  const auto candidates = KernelRegistry::instance().candidates(node.domain(), node.op_type(), device);
  if (candidates.empty()) {
    plan.reason = "no fast kernel for this op";
    return plan;
  }
  if (!has_open_dims(node)) {
    if (const KernelFactory* f = first_applicable(node, device, &plan.reason)) {
      plan.implementation = f->name;
      plan.reason.clear();  // the refusals of higher-priority factories are no fallback's reason
    }
    return plan;
  }
  auto probe = probe_twin(node);
  if (!probe.ok()) {
    // The probe cannot stand for the run-time shapes (unnamed dims whose extents relate in
    // ways it does not know): the kernel is chosen per shape when the node runs.
    plan.implementation = candidates.front()->name;
    plan.per_shape = true;
    plan.reason = "chosen per shape at run time (" + probe.status().message() + ")";
    return plan;
  }
  if (has_open_dims(*probe->node)) {
    // Its output dims depend on values computed at run time (a Reshape's computed target),
    // which a twin at the run's input dims does not know either; fixed shapes would let
    // constant folding compute them.
    plan.shape_related = true;
    plan.reason = "open dims: its output shape depends on values computed at run time";
    return plan;
  }
  std::string refusals;
  if (const KernelFactory* f = first_applicable(*probe->node, device, &refusals)) {
    plan.implementation = f->name;
    plan.per_shape = true;
    return plan;
  }
  // No fast kernel takes the node at representative extents; with the shapes fixed at
  // compile time, constant folding may still make it take it (a Reshape's computed target).
  plan.shape_related = true;
  plan.reason = "open dims: at representative extents " + refusals;
  return plan;
}

std::string planned_implementation(const ir::Node& node, DeviceKind device) {
  return plan_kernel(node, device).implementation;
}

bool has_fast_kernel(const ir::Node& node, DeviceKind device) {
  if (!has_open_dims(node)) return first_applicable(node, device) != nullptr;
  auto probe = probe_twin(node);
  return probe.ok() && !has_open_dims(*probe->node) && first_applicable(*probe->node, device) != nullptr;
}

}  // namespace kiln::kernels
