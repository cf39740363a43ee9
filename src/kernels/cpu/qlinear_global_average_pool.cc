// Kernel for kiln QLinearGlobalAveragePool (ops/qlinear_global_average_pool.cc): the global
// average pool of an int8 network on its uint8 / int8 values, plain [N, C, S...] or
// channels-last [N, 1, H, W, C]. The sums are exact int32 (positions * 255 < 2^31 is checked
// at prepare), over channel runs of a channels-last image (the compiler widens and adds 64
// bytes per instruction) or per row of a plain one; the requantisation is the reference's
// (ops/qlinear_global_average_pool.h), once per channel, so the kernel equals the reference
// kernel bit for bit. Parallel over images and channel runs.
//
// The scales and zero points are read at prepare; other inputs than the prepared constants,
// and other dims, run the reference kernel.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/qlinear_global_average_pool.h"

namespace kiln::kernels {
namespace {

// Channels per parallel task of a channels-last image: one run of int32 sums in registers
// and L1, and enough tasks for two threads on ResNet-50's 2048 channels.
constexpr int64_t kChannelRun = 256;

const Tensor* constant_input(const ir::Node& node, int i) {
  const ir::Value* v = static_cast<size_t>(i) < node.inputs().size() ? node.input(i) : nullptr;
  return v && v->has_initializer() ? v->initializer() : nullptr;
}

struct QGapPlan {
  DataType dtype = DataType::kUInt8;
  std::vector<int64_t> x_dims;
  ops::QGapShape shape;
  ops::QGapParams params;
  std::vector<Tensor> constants;  // inputs 1..4 as prepared (undefined where absent)
};

Expected<QGapPlan> plan_qgap(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "QLinearGlobalAveragePool")
    return unsupported("node %s: not a kiln QLinearGlobalAveragePool", label.c_str());
  const ir::Value* x = node.input(0);
  KILN_RETURN_IF_ERROR(require_static_tensor("X", x, {DataType::kUInt8, DataType::kInt8}));
  QGapPlan p;
  p.dtype = x->dtype();
  p.x_dims = x->shape().static_dims();
  for (int i = 1; i <= 4; ++i) {
    const ir::Value* v = static_cast<size_t>(i) < node.inputs().size() ? node.input(i) : nullptr;
    if (v && !v->has_initializer())
      return unsupported("node %s: input %d must be a constant (initializer)", label.c_str(), i);
    const Tensor* t = constant_input(node, i);
    p.constants.push_back(t ? *t : Tensor());
  }
  KILN_ASSIGN_OR_RETURN(p.shape, ops::qgap_shape(node, p.x_dims));
  if (p.shape.positions <= 0 || p.shape.c <= 0)
    return unsupported("node %s: empty X (the reference defines it)", label.c_str());
  if (p.shape.positions > (int64_t{1} << 23))
    return unsupported("node %s: %lld positions: int32 sums only up to 2^23", label.c_str(),
                       (long long)p.shape.positions);
  KILN_ASSIGN_OR_RETURN(p.params, ops::qgap_params(node, constant_input(node, 1), constant_input(node, 2),
                                                   constant_input(node, 3), constant_input(node, 4), p.dtype,
                                                   p.shape.positions));
  return p;
}

// Y for channels [c_begin, c_end) of image n.
template <typename T>
void pool_channels_last(const QGapPlan& p, const T* x, T* y, int64_t n, int64_t c_begin, int64_t c_end) {
  const ops::QGapShape& s = p.shape;
  int32_t sums[kChannelRun] = {};
  const int64_t width = c_end - c_begin;
  const T* row = x + n * s.positions * s.c + c_begin;
  for (int64_t pos = 0; pos < s.positions; ++pos, row += s.c)
    for (int64_t c = 0; c < width; ++c) sums[c] += row[c];
  const int64_t centre = int64_t{p.params.x_zero_point} * s.positions;
  for (int64_t c = 0; c < width; ++c) y[n * s.c + c_begin + c] = ops::qgap_quantize<T>(sums[c] - centre, p.params);
}

// Y for rows [begin, end) (n * C + c) of a plain X.
template <typename T>
void pool_rows(const QGapPlan& p, const T* x, T* y, int64_t begin, int64_t end) {
  const int64_t positions = p.shape.positions;
  const int64_t centre = int64_t{p.params.x_zero_point} * positions;
  for (int64_t r = begin; r < end; ++r) {
    const T* row = x + r * positions;
    int32_t sum = 0;
    for (int64_t i = 0; i < positions; ++i) sum += row[i];
    y[r] = ops::qgap_quantize<T>(sum - centre, p.params);
  }
}

class QLinearGlobalAveragePoolKernel final : public Kernel {
 public:
  QLinearGlobalAveragePoolKernel(QGapPlan plan, const ops::KernelFn* reference)
      : plan_(std::move(plan)), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
    const Tensor* x = ctx.input(0);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, plan_.dtype, plan_.shape.y_dims, TensorInit::kUninitialized));
    if (plan_.dtype == DataType::kUInt8)
      pool(x->data<uint8_t>(), y->data<uint8_t>());
    else
      pool(x->data<int8_t>(), y->data<int8_t>());
    return ok_status();
  }

  std::string implementation() const override { return "kiln:int32-sum"; }

 private:
  bool inputs_as_prepared(const ops::KernelContext& ctx) const {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != plan_.dtype || x->dims() != plan_.x_dims) return false;
    for (size_t i = 0; i < plan_.constants.size(); ++i) {
      const Tensor* t = ctx.input(static_cast<int>(i) + 1);
      const Tensor& c = plan_.constants[i];
      if (!c.defined() ? t != nullptr : (!t || t->raw_data() != c.raw_data())) return false;
    }
    return true;
  }

  template <typename T>
  void pool(const T* x, T* y) const {
    const ops::QGapShape& s = plan_.shape;
    if (s.channels_last) {
      const int64_t runs = (s.c + kChannelRun - 1) / kChannelRun;
      parallel_for(0, s.n * runs, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t c_begin = (t % runs) * kChannelRun;
          pool_channels_last(plan_, x, y, t / runs, c_begin, std::min(s.c, c_begin + kChannelRun));
        }
      });
    } else {
      const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / s.positions);
      parallel_for(0, s.n * s.c, grain, [&](int64_t b, int64_t e) { pool_rows(plan_, x, y, b, e); });
    }
  }

  QGapPlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_qgap(const ir::Node& node) {
  return prepare_with_reference<QLinearGlobalAveragePoolKernel>(node, plan_qgap);
}

Status qgap_applicable(const ir::Node& node) { return plan_qgap(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "QLinearGlobalAveragePool",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = qgap_applicable,
                                    .prepare = prepare_qgap}));

}  // namespace kiln::kernels
