// Assorted math ops: Swish (opset 24), Shrink (9), CumProd (26) and Det (11, 22).
// float16/bfloat16 run through float32.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "ops/elementwise_common.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// ---- Swish / Shrink --------------------------------------------------------------------------

Status swish_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kFloat64) return unsupported_dtype(node, x.dtype());
  const double alpha = node.attr_float("alpha", 1.0f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_float(x.dtype(), [&]<typename T>() {
    map_elements(x.data<T>(), y->data<T>(), x.num_elements(),
                 [alpha](T v) { return static_cast<T>(v / (1.0 + std::exp(-alpha * v))); });
  });
  return ok_status();
}

Status shrink_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeFloat | kTypeInts));
  const double lambd = node.attr_float("lambd", 0.5f);
  const double bias = node.attr_float("bias", 0.0f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_types<kTypeFloat | kTypeInts>(x.dtype(), [&]<typename T>() {
    map_elements(x.data<T>(), y->data<T>(), x.num_elements(), [&](T v) {
      const double d = static_cast<double>(v);
      const double r = d < -lambd ? d + bias : d > lambd ? d - bias : 0.0;
      if constexpr (std::is_floating_point_v<T>)
        return static_cast<T>(r);
      else
        return double_to_int<T>(r);
    });
  });
  return ok_status();
}

// ---- CumProd ---------------------------------------------------------------------------------

Status cumprod_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor* axis_t = ctx.input(1);
  if (!axis_t) return invalid_argument("node %s: axis input is missing", node.label().c_str());
  if ((axis_t->dtype() != DataType::kInt32 && axis_t->dtype() != DataType::kInt64) || axis_t->num_elements() != 1 ||
      axis_t->rank() > 1)
    return invalid_argument("node %s: axis must be an int32/int64 scalar, got %s", node.label().c_str(),
                            axis_t->description().c_str());
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeFloat | kTypeInts));
  if (x.rank() == 0) return invalid_argument("node %s: input must have rank >= 1", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, axis_t->element_as_int64(0), x.rank()));
  const bool exclusive = node.attr_int("exclusive", 0) != 0;
  const bool reverse = node.attr_int("reverse", 0) != 0;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  const int64_t dim = x.dim(axis);
  const int64_t outer = num_elements(std::vector<int64_t>(x.dims().begin(), x.dims().begin() + axis));
  const int64_t inner = num_elements(std::vector<int64_t>(x.dims().begin() + axis + 1, x.dims().end()));
  dispatch_types<kTypeFloat | kTypeInts>(x.dtype(), [&]<typename T>() {
    // Integer products wrap modulo 2^64 (then to T), never signed-overflow UB.
    using Acc = std::conditional_t<std::is_floating_point_v<T>, T, uint64_t>;
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t in = 0; in < inner; ++in) {
        Acc acc = Acc(1);
        for (int64_t s = 0; s < dim; ++s) {
          const int64_t j = reverse ? dim - 1 - s : s;
          const int64_t at = (o * dim + j) * inner + in;
          if (exclusive) {
            dst[at] = static_cast<T>(acc);
            acc = static_cast<Acc>(acc * static_cast<Acc>(src[at]));
          } else {
            acc = static_cast<Acc>(acc * static_cast<Acc>(src[at]));
            dst[at] = static_cast<T>(acc);
          }
        }
      }
  });
  return ok_status();
}

// ---- Det -------------------------------------------------------------------------------------

Status infer_det(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  Shape out = Shape::unknown_rank();
  if (xt.shape.has_rank()) {
    if (xt.shape.rank() < 2)
      return invalid_argument("node %s: input must have rank >= 2, got %s", ctx.node().label().c_str(),
                              xt.shape.to_string().c_str());
    out = Shape(std::vector<Dim>(xt.shape.dims().begin(), xt.shape.dims().end() - 2));
  }
  ctx.set_output(0, xt.dtype, out);
  return ok_status();
}

Status det_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_float_input(node, x, "input X", 2));
  const int64_t m = x.dim(x.rank() - 1);
  if (x.dim(x.rank() - 2) != m)
    return invalid_argument("node %s: input %s is not a batch of square matrices", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(),
                                                        std::vector<int64_t>(x.dims().begin(), x.dims().end() - 2)));
  const int64_t mats = y->num_elements();
  dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<double> a(static_cast<size_t>(m * m));
    for (int64_t b = 0; b < mats; ++b) {
      for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = x.data<T>()[b * m * m + i];
      // LU decomposition with partial pivoting; det = sign * prod(diag(U)).
      double det = 1;
      for (int64_t c = 0; c < m && det != 0; ++c) {
        int64_t piv = c;
        for (int64_t r = c + 1; r < m; ++r)
          if (std::abs(a[static_cast<size_t>(r * m + c)]) > std::abs(a[static_cast<size_t>(piv * m + c)])) piv = r;
        const double pv = a[static_cast<size_t>(piv * m + c)];
        if (pv == 0) {
          det = 0;
          break;
        }
        if (piv != c) {
          for (int64_t k = 0; k < m; ++k) std::swap(a[static_cast<size_t>(c * m + k)], a[static_cast<size_t>(piv * m + k)]);
          det = -det;
        }
        det *= pv;
        for (int64_t r = c + 1; r < m; ++r) {
          const double f = a[static_cast<size_t>(r * m + c)] / pv;
          if (f == 0) continue;
          for (int64_t k = c; k < m; ++k) a[static_cast<size_t>(r * m + k)] -= f * a[static_cast<size_t>(c * m + k)];
        }
      }
      y->data<T>()[b] = static_cast<T>(det);
    }
  });
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Swish")
                     .since(24)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("alpha", AttrKind::kFloat)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(swish_kernel)));
KILN_REGISTER_OP(OpSchema("Shrink")
                     .since(9)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("bias", AttrKind::kFloat)
                     .attr("lambd", AttrKind::kFloat)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(shrink_kernel)));
KILN_REGISTER_OP(OpSchema("CumProd")
                     .since(26)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .attr("exclusive", AttrKind::kInt)
                     .attr("reverse", AttrKind::kInt)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(cumprod_kernel)));
KILN_REGISTER_OP(OpSchema("Det")
                     .since(11)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .infer(infer_det)
                     .kernel(with_half_as_float(det_kernel)));

}  // namespace kiln::ops
