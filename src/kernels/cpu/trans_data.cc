// Kiln's TransData (plain NCHW <-> channel-blocked NC1HWC0, ops/layout.h) with the shapes fixed
// at compile time: the output is allocated through the kernel context (from the execution
// state's recycled tensors in a steady state) with the dims the prepared kernel knows, then
// filled by the layout copy. The reference kernel works the dims out and allocates by itself.
#include <memory>
#include <string>
#include <vector>

#include "kernels/kernel_registry.h"
#include "ops/layout.h"

namespace kiln::kernels {
namespace {

struct TransDataPlan {
  ops::TransDataAttrs attrs;
  DataType dtype = DataType::kUndefined;
  std::vector<int64_t> in_dims, out_dims;
};

Expected<TransDataPlan> plan_trans_data(const ir::Node& n) {
  TransDataPlan p;
  KILN_ASSIGN_OR_RETURN(p.attrs, ops::trans_data_attrs(n));
  const ir::Value* x = n.input(0);
  const ir::Value* y = n.num_outputs() == 1 ? n.output(0) : nullptr;
  if (!x || !y) return unsupported("node %s: X or Y is missing", n.label().c_str());
  if (!x->shape().is_static() || !y->shape().is_static())
    return unsupported("node %s: X %s, Y %s: open dims (static shapes only)", n.label().c_str(),
                       x->type().to_string().c_str(), y->type().to_string().c_str());
  if (x->dtype() != y->dtype())
    return unsupported("node %s: dtype changes from %s to %s", n.label().c_str(), dtype_name(x->dtype()),
                       dtype_name(y->dtype()));
  if (x->dtype() == DataType::kString || x->dtype() == DataType::kUndefined)
    return unsupported("node %s: dtype %s", n.label().c_str(), dtype_name(x->dtype()));
  p.dtype = x->dtype();
  p.in_dims = x->shape().static_dims();
  p.out_dims = y->shape().static_dims();
  if (num_elements(p.in_dims) != num_elements(p.out_dims))
    return unsupported("node %s: element counts differ", n.label().c_str());
  return p;
}

class TransDataKernel final : public Kernel {
 public:
  TransDataKernel(TransDataPlan plan, const ops::KernelFn* reference)
      : plan_(std::move(plan)), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != plan_.dtype || x->dims() != plan_.in_dims) return (*reference_)(ctx);
    // The copy writes every element (the blocked layout has no padding: C is a multiple of C0).
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan_.dtype, plan_.out_dims, TensorInit::kUninitialized));
    ops::relayout_into(*x, plan_.attrs.c0, plan_.attrs.to_block, *y);
    return ok_status();
  }
  std::string implementation() const override { return "kiln:trans_data"; }

 private:
  TransDataPlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_trans_data(const ir::Node& node) {
  return prepare_with_reference<TransDataKernel>(node, plan_trans_data);
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "TransData",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = [](const ir::Node& n) { return plan_trans_data(n).status(); },
                                    .prepare = prepare_trans_data}));

}  // namespace kiln::kernels
