// GlobalAveragePool in float32 on the plain N C S... layout and, as kiln Pooling, on the
// blocked NC1HWC0 layout (C0 of 8 or 16), summing accurately: float partial sums over short
// runs (16 or C0 independent lanes, which the compiler vectorises), added in double.
//
// Why not oneDNN's pooling, which Kiln used for it before: oneDNN averages a global window as
// one float32 running sum per lane, thousands of terms long on PP-OCRv4 rec's squeeze-excite
// blocks (24x640 and 12x640 windows at width 1280), and the rounding carried through the
// network: the recognition probabilities were 1.1e-4 from a float64 evaluation of the model,
// ONNX Runtime's 3.5e-5 and Kiln's reference kernels' 8.8e-6. The pool reads each input once,
// so it is memory-bound: the double accumulation costs nothing measurable.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/layout.h"

namespace kiln::kernels {
namespace {

// Terms per float partial sum: short enough that each lane's float rounding stays near one
// ulp of the run's sum, long enough that the double additions are few.
constexpr int64_t kRun = 64;

// The sum of x[0..n), in double.
double row_sum(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + kRun * kLanes);
    float acc[kLanes] = {};
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) acc[j] += x[i + j];
    for (; i < end; ++i) total += x[i];
    for (int j = 0; j < kLanes; ++j) total += acc[j];
  }
  return total;
}

// y[c] = the mean over `positions` of x[p * kC0 + c], for one (n, c1) of a blocked tensor.
template <int kC0>
void block_mean(const float* x, int64_t positions, float* y) {
  double total[kC0] = {};
  for (int64_t p = 0; p < positions;) {
    const int64_t end = std::min(positions, p + kRun);
    float acc[kC0] = {};
    for (; p < end; ++p)
      for (int c = 0; c < kC0; ++c) acc[c] += x[p * kC0 + c];
    for (int c = 0; c < kC0; ++c) total[c] += acc[c];
  }
  for (int c = 0; c < kC0; ++c) y[c] = static_cast<float>(total[c] / static_cast<double>(positions));
}

struct GapPlan {
  int64_t block = 0;  // C0 of a blocked input, 0: plain
  // Y's dims for the input dims the node was typed with (static), made once: a run at those
  // dims allocates nothing but Y (tests/api/hot_path_allocations_test.cc).
  std::vector<int64_t> x_dims, y_dims;
};

// Plain: [N, C, S...] -> [N, C, 1...]. Blocked: [N, C1, H, W, C0] -> [N, C1, 1, 1, C0].
std::vector<int64_t> pooled_dims(const std::vector<int64_t>& x_dims, int64_t block) {
  std::vector<int64_t> y = x_dims;
  const size_t spatial_end = block > 0 ? 4 : y.size();
  for (size_t d = 2; d < spatial_end; ++d) y[d] = 1;
  return y;
}

Expected<GapPlan> plan_gap(const ir::Node& node) {
  const std::string label = node.label();
  const bool kiln_pooling = node.domain() == ops::kKilnDomain && node.op_type() == "Pooling";
  const std::string op = kiln_pooling ? node.attr_string("mode", "") : node.op_type();
  if ((!kiln_pooling && node.domain() != ops::kOnnxDomain) || op != "GlobalAveragePool")
    return unsupported("node %s: not a GlobalAveragePool", label.c_str());
  if (node.num_inputs() != 1 || node.num_outputs() != 1 || !node.input(0) || !node.output(0))
    return unsupported("node %s: unexpected input/output count", label.c_str());
  const ir::Value* x = node.input(0);
  if (x->dtype() != DataType::kFloat32)
    return unsupported("node %s: X dtype %s: only float32", label.c_str(), dtype_name(x->dtype()));
  if (!x->shape().has_rank() || x->shape().rank() < 3)
    return unsupported("node %s: X %s: rank 3 or more only", label.c_str(), x->type().to_string().c_str());
  GapPlan plan;
  if (kiln_pooling && ops::is_blocked_format(node.attr_string("format", ops::kFormatPlain))) {
    plan.block = node.attr_int("c0", 0);
    if ((plan.block != 8 && plan.block != 16) || x->shape().rank() != 5)
      return unsupported("node %s: blocked as [N, C1, H, W, C0] with C0 8 or 16 only", label.c_str());
  }
  if (x->shape().is_static()) {
    plan.x_dims = x->shape().static_dims();
    plan.y_dims = pooled_dims(plan.x_dims, plan.block);
  }
  return plan;
}

class GlobalAveragePoolKernel final : public Kernel {
 public:
  GlobalAveragePoolKernel(GapPlan plan, const ops::KernelFn* reference) : plan_(plan), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != DataType::kFloat32 || x->rank() < 3) return (*reference_)(ctx);
    const int64_t c0 = plan_.block;
    if (c0 > 0 && (x->rank() != 5 || x->dim(4) != c0)) return (*reference_)(ctx);
    const int spatial_end = c0 > 0 ? 4 : x->rank();
    int64_t positions = 1;
    for (int d = 2; d < spatial_end; ++d) positions *= x->dim(d);
    if (positions == 0) return (*reference_)(ctx);  // the reference defines an empty window
    Tensor* y = nullptr;
    if (x->dims() == plan_.x_dims) {
      KILN_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, DataType::kFloat32, plan_.y_dims));
    } else {
      KILN_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, DataType::kFloat32, pooled_dims(x->dims(), c0)));
    }
    const float* xp = x->data<float>();
    float* yp = y->data<float>();
    const int64_t rows = x->dim(0) * x->dim(1);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (positions * std::max<int64_t>(c0, 1)));
    if (c0 == 0) {
      parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r)
          yp[r] = static_cast<float>(row_sum(xp + r * positions, positions) / static_cast<double>(positions));
      });
    } else {
      parallel_for(0, rows, grain, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          if (c0 == 16)
            block_mean<16>(xp + r * positions * 16, positions, yp + r * 16);
          else
            block_mean<8>(xp + r * positions * 8, positions, yp + r * 8);
        }
      });
    }
    return ok_status();
  }

  std::string implementation() const override { return "kiln:accurate-sum"; }

 private:
  GapPlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_gap(const ir::Node& node) {
  return prepare_with_reference<GlobalAveragePoolKernel>(node, plan_gap);
}

Status gap_applicable(const ir::Node& node) { return plan_gap(node).status(); }

}  // namespace

// Before oneDNN's pooling (priority 100), which keeps the other pools.
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "GlobalAveragePool",
                                    .device = DeviceKind::kCpu,
                                    .priority = 200,
                                    .name = "kiln",
                                    .applicable = gap_applicable,
                                    .prepare = prepare_gap}));
KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "Pooling",
                                    .device = DeviceKind::kCpu,
                                    .priority = 200,
                                    .name = "kiln",
                                    .applicable = gap_applicable,
                                    .prepare = prepare_gap}));

}  // namespace kiln::kernels
