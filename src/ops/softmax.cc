// Softmax, LogSoftmax and Hardmax. Before opset 13 the input is coerced to 2-D at `axis`
// (default 1) and each row of the flattened [outer, rest] matrix is normalised; from 13
// the op runs along the single dim `axis` (default -1).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// One row of n elements at stride `inner`.
template <typename T, SoftmaxKind kKind>
void normalize_row(const T* src, T* dst, int64_t n, int64_t inner) {
  T m = src[0];
  int64_t arg = 0;
  for (int64_t i = 1; i < n; ++i) {
    const T v = src[i * inner];
    if (v > m) {
      m = v;
      arg = i;
    }
  }
  if constexpr (kKind == SoftmaxKind::kHardmax) {
    for (int64_t i = 0; i < n; ++i) dst[i * inner] = i == arg ? T(1) : T(0);
    return;
  } else {
    // Shift by the maximum so that exp never overflows (a row of only -inf gives NaN, as
    // the same formula does in NumPy).
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T e = std::exp(src[i * inner] - m);
      if constexpr (kKind == SoftmaxKind::kSoftmax) dst[i * inner] = e;
      sum += static_cast<double>(e);
    }
    if constexpr (kKind == SoftmaxKind::kSoftmax) {
      const T inv = static_cast<T>(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) dst[i * inner] *= inv;
    } else {
      const T lse = static_cast<T>(std::log(sum));
      for (int64_t i = 0; i < n; ++i) dst[i * inner] = src[i * inner] - m - lse;
    }
  }
}

// [outer, n, inner] view of the input for the node's opset and axis.
struct SoftmaxGeometry {
  int64_t outer = 1, n = 1, inner = 1;
};

Expected<SoftmaxGeometry> geometry(const ir::Node& node, const std::vector<int64_t>& dims) {
  const int rank = static_cast<int>(dims.size());
  const bool coerce_2d = node.opset() < 13;
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", coerce_2d ? 1 : -1), rank));
  SoftmaxGeometry g;
  for (int i = 0; i < axis; ++i) g.outer *= dims[static_cast<size_t>(i)];
  if (coerce_2d) {
    for (int i = axis; i < rank; ++i) g.n *= dims[static_cast<size_t>(i)];
  } else {
    g.n = dims[static_cast<size_t>(axis)];
    for (int i = axis + 1; i < rank; ++i) g.inner *= dims[static_cast<size_t>(i)];
  }
  return g;
}

template <SoftmaxKind kKind>
Status softmax_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeFloats));
  KILN_ASSIGN_OR_RETURN(SoftmaxGeometry g, geometry(node, x.dims()));
  Tensor xf = half_to_float(x);
  Tensor yf = Tensor::make(xf.dtype(), x.dims());
  if (g.n > 0) {
    dispatch_types<kTypeFloat>(xf.dtype(), [&]<typename T>() {
      const T* src = xf.data<T>();
      T* dst = yf.data<T>();
      const int64_t rows = g.outer * g.inner;
      parallel_for(0, rows, std::max<int64_t>(1, kElementwiseGrain / g.n), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t off = (r / g.inner) * g.n * g.inner + (r % g.inner);
          normalize_row<T, kKind>(src + off, dst + off, g.n, g.inner);
        }
      });
    });
  }
  ctx.set_output(0, dtype_is_half(x.dtype()) ? float_to_half(yf, x.dtype()) : yf);
  return ok_status();
}

Status infer_softmax(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::Node& node = ctx.node();
  const ir::TensorType& in = ctx.input_type(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, in.dtype, kTypeFloats));
  if (in.shape.has_rank())
    KILN_RETURN_IF_ERROR(normalize_axis(node, node.attr_int("axis", node.opset() < 13 ? 1 : -1), in.shape.rank())
                             .status());
  ctx.set_output(0, in.dtype, in.shape);
  return ok_status();
}

int register_softmax_ops() {
  struct Entry {
    const char* name;
    KernelFn kernel;
  };
  const Entry entries[] = {
      {"Softmax", &softmax_kernel<SoftmaxKind::kSoftmax>},
      {"LogSoftmax", &softmax_kernel<SoftmaxKind::kLogSoftmax>},
      {"Hardmax", &softmax_kernel<SoftmaxKind::kHardmax>},
  };
  for (const Entry& e : entries) {
    // Two schemas because the semantics of `axis` changed at 13.
    OpRegistry::instance().add(OpSchema(e.name)
                                   .since(1, 12)
                                   .inputs(1, 1)
                                   .outputs(1, 1)
                                   .attr("axis", ir::AttrKind::kInt)
                                   .infer(infer_softmax)
                                   .kernel(e.kernel));
    OpRegistry::instance().add(OpSchema(e.name)
                                   .since(13)
                                   .inputs(1, 1)
                                   .outputs(1, 1)
                                   .attr("axis", ir::AttrKind::kInt)
                                   .infer(infer_softmax)
                                   .kernel(e.kernel));
  }
  return 6;
}

[[maybe_unused]] const int kRegistered = register_softmax_ops();

}  // namespace
}  // namespace kiln::ops
