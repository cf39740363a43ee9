// Loss ops: NegativeLogLikelihoodLoss (opsets 12, 13, 22) and SoftmaxCrossEntropyLoss
// (12, 13) with reductions none/sum/mean, ignore_index, class weights and the optional
// log_prob output. Sums accumulate in double; float16/bfloat16 run through float32.
#include <cmath>
#include <string>
#include <vector>

#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

enum class Reduction { kNone, kSum, kMean };

Expected<Reduction> read_reduction(const ir::Node& node) {
  const std::string r = node.attr_string("reduction", "mean");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  if (r == "mean") return Reduction::kMean;
  return invalid_argument("node %s: reduction must be none, sum or mean, got '%s'", node.label().c_str(), r.c_str());
}

// Output 0: [N, d1, ..., dk] for reduction none, a scalar otherwise; output 1 (log_prob of
// SoftmaxCrossEntropyLoss) has the input's shape.
Status infer_loss(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  KILN_ASSIGN_OR_RETURN(Reduction red, read_reduction(ctx.node()));
  Shape out = Shape{};
  if (red == Reduction::kNone) {
    out = Shape::unknown_rank();
    if (xt.shape.has_rank() && xt.shape.rank() >= 2) {
      std::vector<Dim> dims = xt.shape.dims();
      dims.erase(dims.begin() + 1);
      out = Shape(dims);
    }
  }
  ctx.set_output(0, xt.dtype, out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, xt.dtype, xt.shape);
  return ok_status();
}

// Negative log-likelihood of log-probabilities `logp` ([N, C, D] flattened, D = d1*...*dk)
// written to `loss` (per element for reduction none, else one value).
template <typename T>
Status nll(const ir::Node& node, const T* logp, int64_t n, int64_t c, int64_t d, const Tensor& target,
           const Tensor* weight, Reduction red, T* loss) {
  const bool has_ignore = node.has_attr("ignore_index");
  const int64_t ignore = node.attr_int("ignore_index", 0);
  double total = 0, weight_sum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t e = i * d + j;
      const int64_t t = target.element_as_int64(e);
      double l = 0, w = 0;
      if (!(has_ignore && t == ignore)) {
        if (t < 0 || t >= c)
          return invalid_argument("node %s: target %lld at element %lld is outside [0, %lld)", node.label().c_str(),
                                  (long long)t, (long long)e, (long long)c);
        w = weight ? static_cast<double>(weight->data<T>()[t]) : 1.0;
        l = -static_cast<double>(logp[(i * c + t) * d + j]) * w;
      }
      if (red == Reduction::kNone) loss[e] = static_cast<T>(l);
      total += l;
      weight_sum += w;
    }
  if (red == Reduction::kSum) *loss = static_cast<T>(total);
  if (red == Reduction::kMean) *loss = static_cast<T>(total / weight_sum);  // 0/0 = NaN when all are ignored
  return ok_status();
}

// Checks input [N, C, d...], target [N, d...] (int32/int64) and weight [C]; returns N, C, D.
Status check_loss_inputs(const ir::Node& node, const Tensor& x, const Tensor* target, const Tensor* weight,
                         int64_t* n, int64_t* c, int64_t* d) {
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kFloat64) return unsupported_dtype(node, x.dtype());
  if (x.rank() < 2)
    return invalid_argument("node %s: input must be [N, C, ...], got %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  if (!target) return invalid_argument("node %s: target is required", node.label().c_str());
  std::vector<int64_t> want = x.dims();
  want.erase(want.begin() + 1);
  if ((target->dtype() != DataType::kInt64 && target->dtype() != DataType::kInt32) || target->dims() != want)
    return invalid_argument("node %s: target must be int32/int64 %s, got %s", node.label().c_str(),
                            dims_to_string(want).c_str(), target->description().c_str());
  *n = x.dim(0);
  *c = x.dim(1);
  *d = num_elements(std::vector<int64_t>(x.dims().begin() + 2, x.dims().end()));
  if (weight && (weight->dtype() != x.dtype() || weight->dims() != std::vector<int64_t>{*c}))
    return invalid_argument("node %s: weight must be %s [%lld], got %s", node.label().c_str(), dtype_name(x.dtype()),
                            (long long)*c, weight->description().c_str());
  return ok_status();
}

Status nll_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* target = ctx.input(1);
  const Tensor* weight = ctx.input(2);
  int64_t n, c, d;
  KILN_RETURN_IF_ERROR(check_loss_inputs(node, x, target, weight, &n, &c, &d));
  KILN_ASSIGN_OR_RETURN(Reduction red, read_reduction(node));
  KILN_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output(0, x.dtype(),
                                                           red == Reduction::kNone ? target->dims()
                                                                                   : std::vector<int64_t>{}));
  Status st;
  dispatch_float(x.dtype(), [&]<typename T>() {
    st = nll<T>(node, x.data<T>(), n, c, d, *target, weight, red, loss->data<T>());
  });
  return st;
}

Status sce_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* target = ctx.input(1);
  const Tensor* weight = ctx.input(2);
  int64_t n, c, d;
  KILN_RETURN_IF_ERROR(check_loss_inputs(node, x, target, weight, &n, &c, &d));
  KILN_ASSIGN_OR_RETURN(Reduction red, read_reduction(node));
  KILN_ASSIGN_OR_RETURN(Tensor * loss, ctx.allocate_output(0, x.dtype(),
                                                           red == Reduction::kNone ? target->dims()
                                                                                   : std::vector<int64_t>{}));
  Tensor logp_storage;
  Tensor* logp = nullptr;
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(logp, ctx.allocate_output(1, x.dtype(), x.dims()));
  } else {
    KILN_ASSIGN_OR_RETURN(logp_storage, Tensor::allocate(x.dtype(), x.dims()));
    logp = &logp_storage;
  }
  Status st;
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* lp = logp->data<T>();
    // Log-softmax over the class axis (stride d).
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < d; ++j) {
        const T* s = src + i * c * d + j;
        double mx = -INFINITY;
        for (int64_t k = 0; k < c; ++k) mx = std::max(mx, static_cast<double>(s[k * d]));
        double sum = 0;
        for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(s[k * d]) - mx);
        const double lse = mx + std::log(sum);
        for (int64_t k = 0; k < c; ++k) lp[i * c * d + k * d + j] = static_cast<T>(static_cast<double>(s[k * d]) - lse);
      }
    st = nll<T>(node, lp, n, c, d, *target, weight, red, loss->data<T>());
  });
  return st;
}

}  // namespace

KILN_REGISTER_OP(OpSchema("NegativeLogLikelihoodLoss")
                     .since(12)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("ignore_index", AttrKind::kInt)
                     .attr("reduction", AttrKind::kString)
                     .infer(infer_loss)
                     .kernel(with_half_as_float(nll_kernel)));
KILN_REGISTER_OP(OpSchema("SoftmaxCrossEntropyLoss")
                     .since(12)
                     .inputs(2, 3)
                     .outputs(1, 2)
                     .attr("ignore_index", AttrKind::kInt)
                     .attr("reduction", AttrKind::kString)
                     .infer(infer_loss)
                     .kernel(with_half_as_float(sce_kernel)));

}  // namespace kiln::ops
