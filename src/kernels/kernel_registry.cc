// The kernel registry and kernel selection with reference fallback.
#include "kernels/kernel_registry.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/logging.h"

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

std::unique_ptr<Kernel> select_kernel(const ir::Node& node, DeviceKind device) {
  if (!fast_kernels_enabled()) return nullptr;
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

std::string planned_implementation(const ir::Node& node, DeviceKind device) {
  if (fast_kernels_enabled())
    for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device))
      if (!f->applicable || f->applicable(node)) return f->name;
  return "reference";
}

bool has_fast_kernel(const ir::Node& node, DeviceKind device) {
  for (const KernelFactory* f : KernelRegistry::instance().candidates(node.domain(), node.op_type(), device))
    if (!f->applicable || f->applicable(node)) return true;
  return false;
}

}  // namespace kiln::kernels
