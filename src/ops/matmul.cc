// MatMul (NumPy semantics: batch broadcasting, 1-D operands) and Gemm (transA/transB,
// alpha/beta, unidirectionally broadcast C), ONNX opsets 1..23, on the shared GEMM.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "ops/gemm_util.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// GEMM for the integer types MatMul and Gemm accept: the same i-k-j order, single thread,
// wrapping arithmetic done in the unsigned type as ONNX Runtime and NumPy do.
template <typename T>
void gemm_integer(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                  const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  using U = std::make_unsigned_t<T>;
  for (int64_t i = 0; i < m; ++i) {
    T* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) crow[j] = beta == T(0) ? T(0) : static_cast<T>(U(beta) * U(crow[j]));
    for (int64_t p = 0; p < k; ++p) {
      const U av = U(alpha) * U(trans_a ? a[p * lda + i] : a[i * lda + p]);
      for (int64_t j = 0; j < n; ++j) {
        const U bv = U(trans_b ? b[j * ldb + p] : b[p * ldb + j]);
        crow[j] = static_cast<T>(U(crow[j]) + av * bv);
      }
    }
  }
}

template <typename T>
void any_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
              const T* b, int64_t ldb, T beta, T* c, int64_t ldc, bool parallel) {
  if constexpr (std::is_floating_point_v<T>) {
    gemm<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parallel);
  } else {
    gemm_integer<T>(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// Calls fn.template operator()<T>() for the MatMul/Gemm element types.
template <typename Fn>
bool dispatch_matmul(DataType t, Fn&& fn) {
  switch (t) {
    case DataType::kFloat32: fn.template operator()<float>(); return true;
    case DataType::kFloat64: fn.template operator()<double>(); return true;
    case DataType::kInt32: fn.template operator()<int32_t>(); return true;
    case DataType::kInt64: fn.template operator()<int64_t>(); return true;
    case DataType::kUInt32: fn.template operator()<uint32_t>(); return true;
    case DataType::kUInt64: fn.template operator()<uint64_t>(); return true;
    default: return false;
  }
}

}  // namespace

// ---- MatMul ------------------------------------------------------------------------

Expected<Shape> matmul_shape(const ir::Node& node, const Shape& a, const Shape& b) {
  const std::string label = node.label();
  if (!a.has_rank() || !b.has_rank()) return Shape::unknown_rank();
  if (a.rank() < 1 || b.rank() < 1)
    return invalid_argument("node %s: MatMul operands must have rank >= 1, got %s and %s", label.c_str(),
                            a.to_string().c_str(), b.to_string().c_str());
  Shape a2 = a.rank() == 1 ? Shape({Dim(1), a[0]}) : a;
  Shape b2 = b.rank() == 1 ? Shape({b[0], Dim(1)}) : b;
  const Dim& ka = a2[a2.rank() - 1];
  const Dim& kb = b2[b2.rank() - 2];
  if (ka.is_static() && kb.is_static() && ka.value != kb.value)
    return invalid_argument("node %s: inner dims differ: A %s, B %s", label.c_str(), a.to_string().c_str(),
                            b.to_string().c_str());
  Shape batch_a(std::vector<Dim>(a2.dims().begin(), a2.dims().end() - 2));
  Shape batch_b(std::vector<Dim>(b2.dims().begin(), b2.dims().end() - 2));
  KILN_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(node, batch_a, batch_b));
  if (a.rank() > 1) out.dims().push_back(a2[a2.rank() - 2]);
  if (b.rank() > 1) out.dims().push_back(b2[b2.rank() - 1]);
  return out;
}

namespace {

Status infer_matmul(InferContext& ctx) {
  const ir::TensorType& a = ctx.input_type(0);
  const ir::TensorType& b = ctx.input_type(1);
  KILN_ASSIGN_OR_RETURN(Shape out, matmul_shape(ctx.node(), a.shape, b.shape));
  ctx.set_output(0, a.dtype, std::move(out));
  return ok_status();
}

Status matmul_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  if (a.dtype() != b.dtype())
    return invalid_argument("node %s: operand dtypes differ: %s and %s", node.label().c_str(),
                            dtype_name(a.dtype()), dtype_name(b.dtype()));
  KILN_ASSIGN_OR_RETURN(Shape out_shape, matmul_shape(node, a.shape(), b.shape()));
  std::vector<int64_t> a_dims = a.dims(), b_dims = b.dims();
  if (a_dims.size() == 1) a_dims.insert(a_dims.begin(), 1);
  if (b_dims.size() == 1) b_dims.push_back(1);
  const int64_t m = a_dims[a_dims.size() - 2], k = a_dims.back(), n = b_dims.back();
  std::vector<int64_t> batch_a(a_dims.begin(), a_dims.end() - 2), batch_b(b_dims.begin(), b_dims.end() - 2);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> batch, broadcast_dims(node, batch_a, batch_b));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, a.dtype(), out_shape.static_dims()));
  if (y->num_elements() == 0) return ok_status();
  // Offsets of each batch's matrix in A and B (0 stride along broadcast dims).
  const std::vector<int64_t> stride_a = broadcast_strides(batch_a, batch), stride_b = broadcast_strides(batch_b, batch);
  const int64_t batches = num_elements(batch);
  bool ok = dispatch_matmul(a.dtype(), [&]<typename T>() {
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* py = y->data<T>();
    const std::vector<int64_t> strides[2] = {stride_a, stride_b};
    for_each_broadcast(batch, strides, [&](int64_t o, const int64_t* off) {
      any_gemm<T>(false, false, m, n, k, T(1), pa + off[0] * m * k, k, pb + off[1] * k * n, n, T(0),
                  py + o * m * n, n, true);
    });
    (void)batches;
  });
  if (!ok) return unsupported_dtype(node, a.dtype());
  return ok_status();
}

// ---- Gemm --------------------------------------------------------------------------

struct GemmDims {
  Dim m, n, k_a, k_b;
};

GemmDims gemm_dims(const ir::Node& node, const Shape& a, const Shape& b) {
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  GemmDims d;
  d.m = ta ? a[1] : a[0];
  d.k_a = ta ? a[0] : a[1];
  d.k_b = tb ? b[1] : b[0];
  d.n = tb ? b[0] : b[1];
  return d;
}

Status check_gemm_ranks(const ir::Node& node, const Shape& a, const Shape& b) {
  if (a.rank() != 2 || b.rank() != 2)
    return invalid_argument("node %s: A and B must be 2-D, got %s and %s", node.label().c_str(),
                            a.to_string().c_str(), b.to_string().c_str());
  return ok_status();
}

Status infer_gemm(InferContext& ctx) {
  const ir::TensorType& a = ctx.input_type(0);
  const ir::TensorType& b = ctx.input_type(1);
  if (!a.shape.has_rank() || !b.shape.has_rank()) {
    ctx.set_output(0, a.dtype, Shape({Dim(), Dim()}));
    return ok_status();
  }
  KILN_RETURN_IF_ERROR(check_gemm_ranks(ctx.node(), a.shape, b.shape));
  GemmDims d = gemm_dims(ctx.node(), a.shape, b.shape);
  if (d.k_a.is_static() && d.k_b.is_static() && d.k_a.value != d.k_b.value)
    return invalid_argument("node %s: inner dims differ: A %s, B %s (transA %lld, transB %lld)",
                            ctx.node().label().c_str(), a.shape.to_string().c_str(), b.shape.to_string().c_str(),
                            (long long)ctx.node().attr_int("transA", 0), (long long)ctx.node().attr_int("transB", 0));
  ctx.set_output(0, a.dtype, Shape({d.m, d.n}));
  return ok_status();
}

Status gemm_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  const Tensor* c = ctx.input(2);
  const std::string label = node.label();
  KILN_RETURN_IF_ERROR(check_gemm_ranks(node, a.shape(), b.shape()));
  if (a.dtype() != b.dtype() || (c && c->dtype() != a.dtype()))
    return invalid_argument("node %s: operand dtypes differ: A %s, B %s%s%s", label.c_str(), dtype_name(a.dtype()),
                            dtype_name(b.dtype()), c ? ", C " : "", c ? dtype_name(c->dtype()) : "");
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const int64_t m = ta ? a.dim(1) : a.dim(0), k = ta ? a.dim(0) : a.dim(1);
  const int64_t kb = tb ? b.dim(1) : b.dim(0), n = tb ? b.dim(0) : b.dim(1);
  if (k != kb)
    return invalid_argument("node %s: inner dims differ: A %s, B %s (transA %d, transB %d)", label.c_str(),
                            dims_to_string(a.dims()).c_str(), dims_to_string(b.dims()).c_str(), ta, tb);
  if (c) {
    // C broadcasts to (M, N) in one direction only.
    if (c->rank() > 2) return invalid_argument("node %s: C has rank %d > 2", label.c_str(), c->rank());
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> bc, broadcast_dims(node, {m, n}, c->dims()));
    if (bc != std::vector<int64_t>{m, n})
      return invalid_argument("node %s: C %s does not broadcast to [%lld,%lld]", label.c_str(),
                              dims_to_string(c->dims()).c_str(), (long long)m, (long long)n);
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, a.dtype(), {m, n}));
  const double alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  bool ok = dispatch_matmul(a.dtype(), [&]<typename T>() {
    T* py = y->data<T>();
    if (c) {
      const std::vector<int64_t> cs = broadcast_strides(c->dims(), {m, n});
      const T* pc = c->data<T>();
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) py[i * n + j] = pc[i * cs[0] + j * cs[1]];
    }
    any_gemm<T>(ta, tb, m, n, k, static_cast<T>(alpha), a.data<T>(), a.dim(1), b.data<T>(), b.dim(1),
                c ? static_cast<T>(beta) : T(0), py, n, true);
  });
  if (!ok) return unsupported_dtype(node, a.dtype());
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("MatMul").since(1).inputs(2, 2).outputs(1, 1).infer(infer_matmul).kernel(
    with_half_as_float(matmul_kernel)));
// Opsets 1-6 require C and broadcast it only when broadcast=1; the unidirectional
// broadcasting of later opsets covers both cases (broadcast=0 means C is already (M, N)).
KILN_REGISTER_OP(OpSchema("Gemm")
                     .since(1, 6)
                     .inputs(3, 3)
                     .outputs(1, 1)
                     .attr("alpha", AttrKind::kFloat)
                     .attr("beta", AttrKind::kFloat)
                     .attr("broadcast", AttrKind::kInt)
                     .attr("transA", AttrKind::kInt)
                     .attr("transB", AttrKind::kInt)
                     .infer(infer_gemm)
                     .kernel(with_half_as_float(gemm_kernel)));
// Opset 7 dropped the broadcast attribute; opset 11 made C optional.
KILN_REGISTER_OP(OpSchema("Gemm")
                     .since(7)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("alpha", AttrKind::kFloat)
                     .attr("beta", AttrKind::kFloat)
                     .attr("transA", AttrKind::kInt)
                     .attr("transB", AttrKind::kInt)
                     .infer(infer_gemm)
                     .kernel(with_half_as_float(gemm_kernel)));

}  // namespace kiln::ops
