// Fast kernels: registered per (op, domain, device) with a priority, prepared once per node
// when a model loads, then run many times.
//
//   KILN_REGISTER_KERNEL(KernelFactory{
//       .domain = "", .op_type = "Conv", .device = DeviceKind::kCpu, .priority = 100,
//       .name = "onednn",
//       .applicable = [](const ir::Node& n) { return plan_conv(n).status(); },
//       .prepare = [](const ir::Node& n) -> Expected<std::unique_ptr<Kernel>> { ... }});
//
// Selection (select_kernel) tries the factories of a node's op in priority order: the first
// whose `applicable` accepts the node and whose `prepare` succeeds wins. When none does, the
// node runs on its op's reference kernel (src/ops), which the compile report names as a
// reference fallback, with each factory's refusal ("onednn: W is not constant (not an
// initializer)"). A prepared kernel holds everything it needs (pre-packed weights, oneDNN
// primitives); run() takes the same KernelContext as a reference kernel, never
// modifies the kernel (GraphExecutor runs one model from several threads at once), and
// allocates nothing but its outputs (through ctx.allocate_output, which the runtime serves
// from the execution arena).
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "ops/registry.h"

namespace kiln::kernels {

enum class DeviceKind { kCpu };

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Computes the node's outputs. Thread-safe: concurrent runs share nothing mutable.
  virtual Status run(ops::KernelContext& ctx) const = 0;
  // What runs, for the compile report and the profiler, e.g. "onednn:jit:avx512_core".
  virtual std::string implementation() const = 0;
};

struct KernelFactory {
  std::string domain;  // "" for ai.onnx, ops::kKilnDomain for Kiln's fused ops
  std::string op_type;
  DeviceKind device = DeviceKind::kCpu;
  int priority = 0;  // higher is tried first
  std::string name;  // short family name, e.g. "onednn", "avx512"
  // Cheap check on the typed node (dtypes, static shapes where required, attributes): no
  // allocation of weights, no primitive creation. OK accepts the node; an error's message
  // says precisely why not ("W is not an initializer (constant weights)", "dtype int64: only
  // float32"), since the compile report and `kiln inspect --nodes` show it to users. Null
  // accepts every node.
  std::function<Status(const ir::Node&)> applicable;
  // Builds the prepared kernel: validates attributes, pre-packs constant weights (read from
  // the node's initializer inputs), creates primitives. An error means "not this kernel":
  // selection then tries the next factory and logs the reason at debug level.
  std::function<Expected<std::unique_ptr<Kernel>>(const ir::Node&)> prepare;
};

// For `applicable` checks, the common refusal: OK when `v` is a tensor of one of `dtypes`
// with a static shape, else why not, naming the value by `what`: "X is missing", "X dtype
// int64: only float32 and bfloat16", "X float32[?,3,32,32]: open dims".
Status require_static_tensor(const char* what, const ir::Value* v, std::initializer_list<DataType> dtypes);
// OK when `v` is an initializer of `dtype` (weights a kernel packs once, at prepare), else
// why not: "W is missing", "W is not constant (not an initializer)", "W dtype float16: only
// float32".
Status require_initializer(const char* what, const ir::Value* v, DataType dtype);
// "float32", "float32 and bfloat16", "float32, float16 and bfloat16".
std::string dtype_list(std::initializer_list<DataType> dtypes);

class KernelRegistry {
 public:
  static KernelRegistry& instance();
  void add(KernelFactory factory);
  // The factories for this op, highest priority first.
  std::vector<const KernelFactory*> candidates(const std::string& domain, const std::string& op_type,
                                               DeviceKind device) const;

 private:
  std::vector<std::unique_ptr<KernelFactory>> factories_;
};

struct KernelRegistrar {
  explicit KernelRegistrar(KernelFactory f) { KernelRegistry::instance().add(std::move(f)); }
};

// The prepare function of a kernel made from a plan of the node (its `plan_fn(node)`,
// Expected<Plan>) and the op's reference kernel, which the kernel falls back to on inputs
// other than the prepared ones: `new KernelT(std::move(plan), &reference)`.
template <typename KernelT, typename PlanFn>
Expected<std::unique_ptr<Kernel>> prepare_with_reference(const ir::Node& node, PlanFn plan_fn) {
  KILN_ASSIGN_OR_RETURN(auto plan, plan_fn(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", node.label().c_str());
  return std::unique_ptr<Kernel>(new KernelT(std::move(plan), &schema->kernel_fn()));
}

// Whether fast kernels are used at all: false when the environment sets
// KILN_KERNELS=reference (for debugging a kernel against the reference, and for `kiln compare`).
bool fast_kernels_enabled();
// Overrides the environment for the rest of the process (or until called again): false
// makes every node run on its reference kernel, true selects fast kernels even under
// KILN_KERNELS=reference. Read when an executor is prepared, so executors prepared before
// the call keep their kernels. For the CLI (--reference-kernels, `kiln compare --kernels`)
// and tests.
void set_fast_kernels_enabled(bool enabled);
// Drops the override: the environment decides again.
void reset_fast_kernels_enabled();

// The fast kernel for `node`, or null when the node runs on its reference kernel. A node
// with open dims (kernels/shape_specialized_kernel.h) whose op has fast kernels gets a kernel
// that selects and prepares the fast kernel per concrete input shape when it runs.
std::unique_ptr<Kernel> select_kernel(const ir::Node& node, DeviceKind device = DeviceKind::kCpu);

// What `node` will run on and why, without preparing anything (compile report, `kiln
// inspect --nodes`, layout decisions).
struct KernelPlan {
  std::string implementation = "reference";  // the fast kernel family ("onednn"), or "reference"
  bool per_shape = false;      // open dims: prepared per concrete shape at run time
  bool shape_related = false;  // reference because of open dims that fixed shapes would remove
  // Why the reference kernel, when it is: each candidate's refusal, "name: why", joined
  // by "; " (e.g. "onednn: W is not an initializer (constant weights); simd: dtype int64").
  std::string reason;
};
KernelPlan plan_kernel(const ir::Node& node, DeviceKind device = DeviceKind::kCpu);

// The implementation `node` would run with, without preparing anything: the first applicable
// factory's name (for a node with open dims: at representative extents), or "reference".
std::string planned_implementation(const ir::Node& node, DeviceKind device = DeviceKind::kCpu);

// Whether some fast kernel's `applicable` accepts `node` (for a node with open dims: at
// representative extents), whatever fast_kernels_enabled() says: what the target offers, for compile-time decisions (layout_assignment) that must not
// depend on a debugging switch.
bool has_fast_kernel(const ir::Node& node, DeviceKind device = DeviceKind::kCpu);

// What the CPU's fast kernels can do with bfloat16, for compile-time precision decisions
// (compiler/passes/precision_assignment.cc): AMX-BF16 tiles, AVX512-BF16 dot products.
struct Bf16Support {
  bool amx = false;
  bool avx512 = false;
};
Bf16Support cpu_bf16_support();

}  // namespace kiln::kernels

// Variadic: the factory's braced initializer holds commas.
#define KILN_REGISTER_KERNEL(...) \
  static ::kiln::kernels::KernelRegistrar KILN_CONCAT(kiln_kernel_registrar_, __COUNTER__)(__VA_ARGS__)
