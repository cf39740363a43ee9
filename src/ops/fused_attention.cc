// Kiln's fused Attention (domain kiln, docs/fused-ops.md; not ONNX's Attention of the
// default domain in attention.cc): Y = MatMul(Softmax(MatMul(Q, Kt) * scale + Mask), V)
// with MatMul's batch broadcasting and NumPy broadcasting of the additive mask. Dot
// products and the weighted sum accumulate in double; scores, mask addition and softmax
// round to the element type as the unfused ops do; float16/bfloat16 run through float32
// and round those steps to the half type, as the unfused ops write half outputs.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// Shapes of one node's operands, split into batch dims and matrix dims.
struct AttentionShape {
  Shape batch;  // of Y: broadcast of the batch dims of Q, K, V and the mask
  Dim sq, sk, d, dv;
};

Shape leading(const Shape& s, int keep_last) {
  return Shape(std::vector<Dim>(s.dims().begin(), s.dims().end() - keep_last));
}

// Checks ranks and matching extents and broadcasts the batch dims (possibly symbolic).
Expected<AttentionShape> attention_shape(const ir::Node& node, const Shape& q, const Shape& k, const Shape& v,
                                         const Shape* mask) {
  const std::string label = node.label();
  const bool k_transposed = node.attr_int("k_transposed", 0) != 0;
  if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2)
    return invalid_argument("node %s: Q, K and V need rank >= 2, got %s, %s and %s", label.c_str(),
                            q.to_string().c_str(), k.to_string().c_str(), v.to_string().c_str());
  AttentionShape s;
  s.sq = q[q.rank() - 2];
  s.d = q[q.rank() - 1];
  const Dim& kd = k_transposed ? k[k.rank() - 2] : k[k.rank() - 1];
  s.sk = k_transposed ? k[k.rank() - 1] : k[k.rank() - 2];
  s.dv = v[v.rank() - 1];
  const Dim& vsk = v[v.rank() - 2];
  auto differ = [](const Dim& a, const Dim& b) { return a.is_static() && b.is_static() && a.value != b.value; };
  if (differ(s.d, kd))
    return invalid_argument("node %s: Q %s and K %s (k_transposed %d) have different head sizes", label.c_str(),
                            q.to_string().c_str(), k.to_string().c_str(), k_transposed);
  if (differ(s.sk, vsk))
    return invalid_argument("node %s: K %s (k_transposed %d) and V %s have different key lengths", label.c_str(),
                            k.to_string().c_str(), k_transposed, v.to_string().c_str());
  if (!s.sk.is_static()) s.sk = vsk;
  KILN_ASSIGN_OR_RETURN(s.batch, broadcast_shapes(node, leading(q, 2), leading(k, 2)));
  if (mask && mask->has_rank()) {
    // The mask broadcasts to [..., Sq, Sk]; its leading dims may broadcast with the batch.
    const int mr = mask->rank();
    auto fits = [](const Dim& md, const Dim& want) {
      return !md.is_static() || md.value == 1 || !want.is_static() || md.value == want.value;
    };
    if ((mr >= 1 && !fits((*mask)[mr - 1], s.sk)) || (mr >= 2 && !fits((*mask)[mr - 2], s.sq)))
      return invalid_argument("node %s: Mask %s does not broadcast to the scores [..., %s, %s]", label.c_str(),
                              mask->to_string().c_str(), s.sq.to_string().c_str(), s.sk.to_string().c_str());
    if (mr > 2) {
      KILN_ASSIGN_OR_RETURN(s.batch, broadcast_shapes(node, s.batch, leading(*mask, 2)));
    }
  }
  KILN_ASSIGN_OR_RETURN(s.batch, broadcast_shapes(node, s.batch, leading(v, 2)));
  return s;
}

Status infer_attention(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  for (int i = 0; i < 3; ++i)
    if (!ctx.has_input(i)) return invalid_argument("node %s: input %d is required", node.label().c_str(), i);
  const DataType dt = ctx.input_type(0).dtype;
  for (int i = 0; i < 4; ++i) {
    if (!ctx.has_input(i)) continue;
    const DataType t = ctx.input_type(i).dtype;
    if (t == DataType::kUndefined) continue;
    if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kFloat16 && t != DataType::kBFloat16)
      return invalid_argument("node %s: input %d has dtype %s; float types expected", node.label().c_str(), i,
                              dtype_name(t));
    if (dt != DataType::kUndefined && t != dt)
      return invalid_argument("node %s: input %d has dtype %s, Q has %s", node.label().c_str(), i, dtype_name(t),
                              dtype_name(dt));
  }
  const Shape& q = ctx.input_type(0).shape;
  const Shape& k = ctx.input_type(1).shape;
  const Shape& v = ctx.input_type(2).shape;
  if (!q.has_rank() || !k.has_rank() || !v.has_rank()) {
    ctx.set_output(0, dt, Shape::unknown_rank());
    return ok_status();
  }
  const Shape* mask = ctx.has_input(3) ? &ctx.input_type(3).shape : nullptr;
  if (mask && !mask->has_rank()) {
    // An unknown-rank mask may add batch dims: only the matrix dims are known.
    KILN_RETURN_IF_ERROR(attention_shape(node, q, k, v, nullptr).status());
    ctx.set_output(0, dt, Shape::unknown_rank());
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(AttentionShape s, attention_shape(node, q, k, v, mask));
  std::vector<Dim> dims = s.batch.dims();
  dims.push_back(s.sq);
  dims.push_back(s.dv);
  ctx.set_output(0, dt, Shape(std::move(dims)));
  return ok_status();
}

template <typename T>
void attention_forward(const T* q, const T* k, const T* v, const T* mask, T* y, const std::vector<int64_t>& batch,
                       const std::vector<int64_t> (&strides)[4], int64_t mask_row_stride, int64_t mask_col_stride,
                       int64_t sq, int64_t sk, int64_t d, int64_t dv, bool k_transposed, double scale,
                       DataType storage) {
  // The dtype the unfused ops store their outputs in: T, or a half type run as float.
  auto rnd = [storage](T x) -> T {
    if constexpr (std::is_same_v<T, float>) {
      if (storage == DataType::kFloat16) return fp16_to_float(float_to_fp16(x));
      if (storage == DataType::kBFloat16) return bf16_to_float(float_to_bf16(x));
    }
    return x;
  };
  // Batch offsets (in matrices' elements) of each input for every output batch.
  const int64_t nb = num_elements(batch);
  std::vector<int64_t> offs(static_cast<size_t>(nb * 4));
  for_each_broadcast(batch, strides, [&](int64_t o, const int64_t* off) {
    for (int i = 0; i < 4; ++i) offs[static_cast<size_t>(o * 4 + i)] = off[i];
  });
  const T scale_t = static_cast<T>(scale);
  parallel_for(0, nb * sq, 1, [&](int64_t r0, int64_t r1) {
    std::vector<T> p(static_cast<size_t>(sk));
    std::vector<double> acc(static_cast<size_t>(dv));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / sq, i = r % sq;
      const int64_t* off = &offs[static_cast<size_t>(b * 4)];
      const T* qi = q + off[0] + i * d;
      const T* kb = k + off[1];
      const T* vb = v + off[2];
      T* yi = y + (b * sq + i) * dv;
      if (sk == 0) {
        std::fill(yi, yi + dv, T(0));
        continue;
      }
      // Each step is rounded to T where the unfused op writes its output: with BERT's
      // -10000 mask the float32 sum quantises the scores, and the fused op must agree.
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (int64_t t = 0; t < d; ++t)
          dot += static_cast<double>(qi[t]) * (k_transposed ? kb[t * sk + j] : kb[j * d + t]);
        T s = rnd(rnd(static_cast<T>(dot)) * scale_t);                                  // MatMul, then Mul(scale)
        if (mask) s = rnd(s + mask[off[3] + i * mask_row_stride + j * mask_col_stride]);  // Add(mask)
        p[static_cast<size_t>(j)] = s;
      }
      // Softmax as the ONNX reference kernel computes it (a row of only -inf gives NaN).
      T m = p[0];
      for (int64_t j = 1; j < sk; ++j)
        if (p[static_cast<size_t>(j)] > m) m = p[static_cast<size_t>(j)];
      double sum = 0;
      for (int64_t j = 0; j < sk; ++j) {
        const T e = std::exp(p[static_cast<size_t>(j)] - m);
        p[static_cast<size_t>(j)] = e;
        sum += static_cast<double>(e);
      }
      const T inv = static_cast<T>(1.0 / sum);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < sk; ++j) {
        const double w = static_cast<double>(rnd(p[static_cast<size_t>(j)] * inv));
        const T* vj = vb + j * dv;
        for (int64_t c = 0; c < dv; ++c) acc[static_cast<size_t>(c)] += w * static_cast<double>(vj[c]);
      }
      for (int64_t c = 0; c < dv; ++c) yi[c] = static_cast<T>(acc[static_cast<size_t>(c)]);
    }
  });
}

Status attention_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  for (int i = 0; i < 3; ++i)
    if (!ctx.input(i)) return invalid_argument("node %s: input %d is required", node.label().c_str(), i);
  const Tensor& q = *ctx.input(0);
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const Tensor* mask = ctx.input(3);
  KILN_RETURN_IF_ERROR(check_float_input(node, q, "Q", 2));
  const char* names[4] = {"Q", "K", "V", "Mask"};
  for (int i = 1; i < 4; ++i) {
    const Tensor* t = ctx.input(i);
    if (t && t->dtype() != q.dtype())
      return invalid_argument("node %s: %s has dtype %s, Q has %s", node.label().c_str(), names[i],
                              dtype_name(t->dtype()), dtype_name(q.dtype()));
  }
  Shape mask_shape = mask ? mask->shape() : Shape();
  KILN_ASSIGN_OR_RETURN(AttentionShape s,
                        attention_shape(node, q.shape(), k.shape(), v.shape(), mask ? &mask_shape : nullptr));
  const std::vector<int64_t> batch = s.batch.static_dims();
  const int64_t sq = s.sq.value, sk = s.sk.value, d = s.d.value, dv = s.dv.value;
  std::vector<int64_t> out_dims = batch;
  out_dims.push_back(sq);
  out_dims.push_back(dv);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, q.dtype(), out_dims));
  if (y->num_elements() == 0) return ok_status();
  auto batch_strides = [&](const std::vector<int64_t>& dims, int64_t matrix) {
    std::vector<int64_t> st = broadcast_strides(std::vector<int64_t>(dims.begin(), dims.end() - 2), batch);
    for (int64_t& x : st) x *= matrix;
    return st;
  };
  std::vector<int64_t> strides[4] = {batch_strides(q.dims(), sq * d), batch_strides(k.dims(), sk * d),
                                     batch_strides(v.dims(), sk * dv), std::vector<int64_t>(batch.size(), 0)};
  int64_t mask_row = 0, mask_col = 0;
  if (mask) {
    std::vector<int64_t> full = batch;
    full.push_back(sq);
    full.push_back(sk);
    const std::vector<int64_t> ms = broadcast_strides(mask->dims(), full);
    strides[3].assign(ms.begin(), ms.end() - 2);
    mask_row = ms[ms.size() - 2];
    mask_col = ms.back();
  }
  const bool k_transposed = node.attr_int("k_transposed", 0) != 0;
  const double scale = node.attr_float("scale", 1.0f);
  dispatch_float(q.dtype(), [&]<typename T>() {
    attention_forward<T>(q.data<T>(), k.data<T>(), v.data<T>(), mask ? mask->data<T>() : nullptr, y->data<T>(), batch,
                         strides, mask_row, mask_col, sq, sk, d, dv, k_transposed, scale, node.input(0)->dtype());
  });
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Attention", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(3, 4)
                     .outputs(1, 1)
                     .attr("scale", AttrKind::kFloat)
                     .attr("k_transposed", AttrKind::kInt)
                     .infer(infer_attention)
                     .kernel(with_half_as_float(attention_kernel))
                     .doc("MatMul(Softmax(MatMul(Q, Kt) * scale + Mask), V) (docs/fused-ops.md)"));

}  // namespace kiln::ops
