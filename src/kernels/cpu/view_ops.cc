// Reshape, Flatten, Squeeze and Unsqueeze with the shapes fixed at compile time: the output is
// the input's storage under other dims, which the prepared kernel knows already, so a run only
// checks the input's dims and hands the view out (KernelContext::set_output_view: in a
// recycled tensor object, so a steady-state execution allocates nothing). The reference
// kernels work the dims out from the attributes and shape inputs at every run.
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

// The dims of a value whose type is a static tensor shape, or nothing.
bool static_dims_of(const ir::Value* v, std::vector<int64_t>* dims) {
  if (!v || !v->type().is_tensor() || !v->shape().is_static() || v->dtype() == DataType::kUndefined) return false;
  *dims = v->shape().static_dims();
  return true;
}

struct ViewPlan {
  std::vector<int64_t> in_dims, out_dims;
};

// Applicable when input 0 and output 0 have static shapes of one dtype and element count, and
// every other input (Reshape's shape, Squeeze's and Unsqueeze's axes) is a constant: then the
// compile-time output dims are the ones the reference kernel would compute.
Expected<ViewPlan> plan_view(const ir::Node& n) {
  ViewPlan p;
  if (n.num_inputs() < 1 || n.num_outputs() != 1)
    return unsupported("node %s: %d inputs and %d outputs, expected 1 or more and 1", n.label().c_str(),
                       n.num_inputs(), n.num_outputs());
  if (!static_dims_of(n.input(0), &p.in_dims))
    return unsupported("node %s: data %s: open dims (static shapes only)", n.label().c_str(),
                       n.input(0) ? n.input(0)->type().to_string().c_str() : "missing");
  if (!static_dims_of(n.output(0), &p.out_dims))
    return unsupported("node %s: output %s: open dims (static shapes only)", n.label().c_str(),
                       n.output(0) ? n.output(0)->type().to_string().c_str() : "missing");
  if (n.input(0)->dtype() != n.output(0)->dtype())
    return unsupported("node %s: dtype changes from %s to %s", n.label().c_str(), dtype_name(n.input(0)->dtype()),
                       dtype_name(n.output(0)->dtype()));
  if (n.input(0)->dtype() == DataType::kString) return unsupported("node %s: dtype string", n.label().c_str());
  if (num_elements(p.in_dims) != num_elements(p.out_dims))
    return unsupported("node %s: element counts differ: %s to %s", n.label().c_str(), dims_to_string(p.in_dims).c_str(),
                       dims_to_string(p.out_dims).c_str());
  for (int i = 1; i < n.num_inputs(); ++i)
    if (n.input(i) && !n.input(i)->has_initializer())
      return unsupported("node %s: input %d is computed at run time (not a constant)", n.label().c_str(), i);
  return p;
}

class ViewKernel final : public Kernel {
 public:
  ViewKernel(ViewPlan plan, const ops::KernelFn* reference) : plan_(std::move(plan)), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x || x->dims() != plan_.in_dims) return (*reference_)(ctx);
    ctx.set_output_view(0, *x, plan_.out_dims);
    return ok_status();
  }
  std::string implementation() const override { return "kiln:view"; }

 private:
  ViewPlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_view(const ir::Node& node) {
  return prepare_with_reference<ViewKernel>(node, plan_view);
}

KernelFactory view_factory(const char* op) {
  return KernelFactory{.domain = ops::kOnnxDomain,
                       .op_type = op,
                       .device = DeviceKind::kCpu,
                       .priority = 100,
                       .name = "kiln",
                       .applicable = [](const ir::Node& n) { return plan_view(n).status(); },
                       .prepare = prepare_view};
}

}  // namespace

KILN_REGISTER_KERNEL(view_factory("Reshape"));
KILN_REGISTER_KERNEL(view_factory("Flatten"));
KILN_REGISTER_KERNEL(view_factory("Squeeze"));
KILN_REGISTER_KERNEL(view_factory("Unsqueeze"));

}  // namespace kiln::kernels
