// The kernel registry and kernel selection with reference fallback.
#include "kernels/kernel_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/logging.h"
#include "kernels/shape_specialized_kernel.h"

namespace kiln::kernels {

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

// The first factory whose `applicable` accepts `node` as it is, or null.
const KernelFactory* first_applicable(const ir::Node& node, DeviceKind device) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device))
    if (!f->applicable || f->applicable(node)) return f;
  return nullptr;
}

}  // namespace

std::unique_ptr<Kernel> select_kernel(const ir::Node& node, DeviceKind device) {
  if (!fast_kernels_enabled()) return nullptr;
  if (has_open_dims(node)) return make_shape_specialized_kernel(node, device);
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device)) {
    if (f->applicable && !f->applicable(node)) continue;
    auto k = f->prepare(node);
    if (k.ok() && *k) return std::move(*k);
    if (!k.ok())
      KILN_LOG(kDebug, "node %s: kernel '%s' not used: %s", node.label().c_str(), f->name.c_str(),
               k.status().to_string().c_str());
  }
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
    if (const KernelFactory* f = first_applicable(node, device)) plan.implementation = f->name;
    else plan.reason = "no fast kernel accepts its dtypes, shapes or attributes";
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
  if (const KernelFactory* f = first_applicable(*probe->node, device)) {
    plan.implementation = f->name;
    plan.per_shape = true;
    return plan;
  }
  // No fast kernel takes the node at representative extents; with the shapes fixed at
  // compile time, constant folding may still make it take it (a Reshape's computed target).
  plan.shape_related = true;
  plan.reason = "open dims: no fast kernel accepts the node at representative extents";
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
