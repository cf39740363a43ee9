// Integer and quantised linear algebra: MatMulInteger, ConvInteger, QLinearMatMul and
// QLinearConv. Operands minus their zero points are multiplied in int32 (wrapping, as
// ONNX allows); the QLinear ops then rescale by a_scale * b_scale / y_scale, round half
// to even, add y_zero_point and saturate, as the ONNX reference implementation does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/lowp.h"
#include "ops/elementwise_common.h"
#include "ops/gemm_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

bool is_int8(DataType t) { return t == DataType::kInt8 || t == DataType::kUInt8; }

Status check_int8(const ir::Node& node, const Tensor& t, const char* what) {
  if (!is_int8(t.dtype()))
    return invalid_argument("node %s: %s must be int8 or uint8, got %s", node.label().c_str(), what,
                            t.description().c_str());
  return ok_status();
}

// Values of `t` broadcast (NumPy rules) to `dims`, as doubles. A 1-D `t` whose size is
// dims[rank-2] (> 1) is a per-row vector when `per_row` (a's zero point and scale), so it
// is read as [M, 1].
Expected<std::vector<double>> expand(const ir::Node& node, const Tensor& t, const std::vector<int64_t>& dims,
                                     bool per_row, const char* what) {
  std::vector<int64_t> td = t.dims();
  if (per_row && td.size() == 1 && dims.size() >= 2 && td[0] > 1 && td[0] == dims[dims.size() - 2])
    td.push_back(1);
  bool ok = td.size() <= dims.size();
  for (size_t i = 0; ok && i < td.size(); ++i) {
    const int64_t a = td[td.size() - 1 - i], b = dims[dims.size() - 1 - i];
    ok = a == 1 || a == b;
  }
  if (!ok)
    return invalid_argument("node %s: %s %s does not broadcast to %s", node.label().c_str(), what,
                            t.description().c_str(), dims_to_string(dims).c_str());
  const std::vector<int64_t> strides[1] = {broadcast_strides(td, dims)};
  std::vector<double> out(static_cast<size_t>(num_elements(dims)));
  for_each_broadcast(dims, strides, [&](int64_t o, const int64_t* off) {
    out[static_cast<size_t>(o)] = lowp_to_double(t.dtype(), t.raw_data(), off[0]);
  });
  return out;
}

// x - zero_point as int32 over x's dims (zero point optional, broadcast as `expand`).
Expected<std::vector<int32_t>> centred(const ir::Node& node, const Tensor& x, const Tensor* zp, bool per_row,
                                       const char* what) {
  std::vector<int32_t> out(static_cast<size_t>(x.num_elements()));
  for (int64_t i = 0; i < x.num_elements(); ++i)
    out[static_cast<size_t>(i)] = static_cast<int32_t>(lowp_to_double(x.dtype(), x.raw_data(), i));
  if (!zp) return out;
  if (zp->dtype() != x.dtype())
    return invalid_argument("node %s: %s zero point %s and operand %s differ in dtype", node.label().c_str(), what,
                            zp->description().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<double> z, expand(node, *zp, x.dims(), per_row, what));
  for (size_t i = 0; i < out.size(); ++i) out[i] -= static_cast<int32_t>(z[i]);
  return out;
}

// ---- integer matmul ---------------------------------------------------------------------

// MatMul geometry with NumPy's 1-D promotion: A as [..., M, K], B as [..., K, N].
struct MatMulGeometry {
  std::vector<int64_t> a2, b2;     // promoted operand dims
  std::vector<int64_t> batch;      // broadcast batch dims
  std::vector<int64_t> out2;       // batch + [M, N]
  std::vector<int64_t> out;        // the ONNX output dims (promoted axes dropped)
  int64_t m = 0, k = 0, n = 0;
};

Expected<MatMulGeometry> matmul_geometry(const ir::Node& node, const std::vector<int64_t>& a,
                                         const std::vector<int64_t>& b) {
  if (a.empty() || b.empty())
    return invalid_argument("node %s: MatMul operands must have rank >= 1, got %s and %s", node.label().c_str(),
                            dims_to_string(a).c_str(), dims_to_string(b).c_str());
  MatMulGeometry g;
  g.a2 = a;
  g.b2 = b;
  if (a.size() == 1) g.a2.insert(g.a2.begin(), 1);
  if (b.size() == 1) g.b2.push_back(1);
  g.m = g.a2[g.a2.size() - 2];
  g.k = g.a2.back();
  g.n = g.b2.back();
  if (g.b2[g.b2.size() - 2] != g.k)
    return invalid_argument("node %s: inner dims differ: A %s, B %s", node.label().c_str(),
                            dims_to_string(a).c_str(), dims_to_string(b).c_str());
  KILN_ASSIGN_OR_RETURN(g.batch, broadcast_dims(node, std::vector<int64_t>(g.a2.begin(), g.a2.end() - 2),
                                                std::vector<int64_t>(g.b2.begin(), g.b2.end() - 2)));
  g.out2 = g.batch;
  g.out2.push_back(g.m);
  g.out2.push_back(g.n);
  g.out = g.batch;
  if (a.size() > 1) g.out.push_back(g.m);
  if (b.size() > 1) g.out.push_back(g.n);
  return g;
}

// C = A * B in int32 with wrapping accumulation, over broadcast batches.
std::vector<int32_t> int_matmul(const MatMulGeometry& g, const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const std::vector<int64_t> ba(g.a2.begin(), g.a2.end() - 2), bb(g.b2.begin(), g.b2.end() - 2);
  const std::vector<int64_t> strides[2] = {broadcast_strides(ba, g.batch), broadcast_strides(bb, g.batch)};
  std::vector<int32_t> c(static_cast<size_t>(num_elements(g.out2)));
  const int64_t m = g.m, n = g.n, k = g.k;
  for_each_broadcast(g.batch, strides, [&](int64_t o, const int64_t* off) {
    const int32_t* pa = a.data() + off[0] * m * k;
    const int32_t* pb = b.data() + off[1] * k * n;
    int32_t* pc = c.data() + o * m * n;
    std::vector<uint32_t> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < m; ++i) {
      std::fill(row.begin(), row.end(), 0u);
      for (int64_t p = 0; p < k; ++p) {
        const uint32_t av = static_cast<uint32_t>(pa[i * k + p]);
        const int32_t* brow = pb + p * n;
        for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += av * static_cast<uint32_t>(brow[j]);
      }
      for (int64_t j = 0; j < n; ++j) pc[i * n + j] = static_cast<int32_t>(row[static_cast<size_t>(j)]);
    }
  });
  return c;
}

// Output shape of the matmul ops during inference (unknown when the operands are not static).
Shape matmul_output_shape(const ir::Node& node, const Shape& a, const Shape& b) {
  if (!a.is_static() || !b.is_static()) {
    // Open dims (a model compiled without --input-shape): MatMul's rule keeps the rank and the
    // symbols, so the node and the ones after it get per-shape fast kernels.
    auto s = matmul_shape(node, a, b);
    return s.ok() ? *s : Shape::unknown_rank();
  }
  auto g = matmul_geometry(node, a.static_dims(), b.static_dims());
  return g.ok() ? Shape::from_static(g->out) : Shape::unknown_rank();
}

// Round half to even, then saturate to T's range (NaN to 0).
template <typename T>
T requantize(double v) {
  if (std::isnan(v)) return T(0);
  const double lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  return static_cast<T>(std::clamp(std::nearbyint(v), lo, hi));
}

// a * b / y in the scale's float type, as NumPy computes it for float16 scales.
double scale_ratio(DataType t, double a, double b, double y) {
  auto r = [t](double v) {
    if (t == DataType::kFloat16) return static_cast<double>(fp16_to_float(float_to_fp16(static_cast<float>(v))));
    if (t == DataType::kBFloat16) return static_cast<double>(bf16_to_float(float_to_bf16(static_cast<float>(v))));
    if (t == DataType::kFloat32) return static_cast<double>(static_cast<float>(v));
    return v;
  };
  return r(r(a * b) / y);
}

Status check_scale(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DataType::kFloat32 && !dtype_is_half(t.dtype()))
    return invalid_argument("node %s: %s must be float32, float16 or bfloat16, got %s", node.label().c_str(), what,
                            t.description().c_str());
  return ok_status();
}

Status matmul_integer_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(1);
  KILN_RETURN_IF_ERROR(check_int8(node, a, "A"));
  KILN_RETURN_IF_ERROR(check_int8(node, b, "B"));
  KILN_ASSIGN_OR_RETURN(MatMulGeometry g, matmul_geometry(node, a.dims(), b.dims()));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> ca, centred(node, a, ctx.input(2), true, "a_zero_point"));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cb, centred(node, b, ctx.input(3), false, "b_zero_point"));
  const std::vector<int32_t> c = int_matmul(g, ca, cb);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt32, g.out));
  std::copy(c.begin(), c.end(), y->data<int32_t>());
  return ok_status();
}

Status infer_matmul_integer(InferContext& ctx) {
  ctx.set_output(0, DataType::kInt32, matmul_output_shape(ctx.node(), ctx.input_type(0).shape, ctx.input_type(1).shape));
  return ok_status();
}

// Inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
Status qlinear_matmul_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  const Tensor& b = *ctx.input(3);
  const Tensor& y_zp = *ctx.input(7);
  KILN_RETURN_IF_ERROR(check_int8(node, a, "a"));
  KILN_RETURN_IF_ERROR(check_int8(node, b, "b"));
  KILN_RETURN_IF_ERROR(check_int8(node, y_zp, "y_zero_point"));
  for (int i : {1, 4, 6}) KILN_RETURN_IF_ERROR(check_scale(node, *ctx.input(i), "scale"));
  KILN_ASSIGN_OR_RETURN(MatMulGeometry g, matmul_geometry(node, a.dims(), b.dims()));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> ca, centred(node, a, ctx.input(2), true, "a_zero_point"));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cb, centred(node, b, ctx.input(5), false, "b_zero_point"));
  const std::vector<int32_t> c = int_matmul(g, ca, cb);
  // Scales: a's per row ([..., M, 1]), b's per column ([..., 1, N]), y's over the output.
  std::vector<int64_t> a_rows = g.a2, b_cols = g.b2;
  a_rows.back() = 1;
  b_cols[b_cols.size() - 2] = 1;
  KILN_ASSIGN_OR_RETURN(std::vector<double> sa, expand(node, *ctx.input(1), a_rows, true, "a_scale"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> sb, expand(node, *ctx.input(4), b_cols, false, "b_scale"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> sy, expand(node, *ctx.input(6), g.out2, false, "y_scale"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> zy, expand(node, y_zp, g.out2, false, "y_zero_point"));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_zp.dtype(), g.out));
  const DataType st = ctx.input(1)->dtype();
  const std::vector<int64_t> strides[2] = {broadcast_strides(a_rows, g.out2), broadcast_strides(b_cols, g.out2)};
  dispatch_numeric(y_zp.dtype(), [&]<typename T>() {
    T* py = y->data<T>();
    for_each_broadcast(g.out2, strides, [&](int64_t o, const int64_t* off) {
      const size_t uo = static_cast<size_t>(o);
      const double ratio = scale_ratio(st, sa[static_cast<size_t>(off[0])], sb[static_cast<size_t>(off[1])], sy[uo]);
      py[o] = requantize<T>(c[uo] * ratio + zy[uo]);
    });
  });
  return ok_status();
}

Status infer_qlinear_matmul(InferContext& ctx) {
  const DataType t = ctx.has_input(7) ? ctx.input_type(7).dtype : ctx.input_type(0).dtype;
  ctx.set_output(0, t, matmul_output_shape(ctx.node(), ctx.input_type(0).shape, ctx.input_type(3).shape));
  return ok_status();
}

// ---- integer convolution ---------------------------------------------------------------

struct IntConv {
  int64_t batch = 0, c_in = 0, c_out = 0, group = 1;
  std::vector<int64_t> in, kernel;  // spatial extents of X and W
  WindowGeometry geo;
  std::vector<int64_t> out_dims() const {
    std::vector<int64_t> d{batch, c_out};
    d.insert(d.end(), geo.out.begin(), geo.out.end());
    return d;
  }
};

Expected<IntConv> int_conv_shape(const ir::Node& node, const std::vector<int64_t>& x, const std::vector<int64_t>& w) {
  const std::string label = node.label();
  if (x.size() < 3 || w.size() != x.size())
    return invalid_argument("node %s: X %s and W %s must have the same rank >= 3", label.c_str(),
                            dims_to_string(x).c_str(), dims_to_string(w).c_str());
  IntConv cs;
  cs.group = node.attr_int("group", 1);
  cs.batch = x[0];
  cs.c_in = x[1];
  cs.c_out = w[0];
  if (cs.group < 1 || cs.c_out % cs.group != 0 || cs.c_in != w[1] * cs.group)
    return invalid_argument("node %s: X %s, W %s and group %lld do not match", label.c_str(),
                            dims_to_string(x).c_str(), dims_to_string(w).c_str(), (long long)cs.group);
  cs.in.assign(x.begin() + 2, x.end());
  cs.kernel.assign(w.begin() + 2, w.end());
  KILN_ASSIGN_OR_RETURN(cs.geo, window_geometry(node, cs.in, cs.kernel, false));
  return cs;
}

// Direct convolution of centred int32 operands; wrapping int32 accumulation.
std::vector<int32_t> int_conv(const IntConv& cs, const std::vector<int32_t>& x, const std::vector<int32_t>& w) {
  const int rank = cs.geo.rank();
  const int64_t in_size = num_elements(cs.in), out_size = num_elements(cs.geo.out);
  const int64_t k_size = num_elements(cs.kernel);
  // For each (output position, kernel position): the input offset, or -1 in the padding.
  std::vector<int64_t> src(static_cast<size_t>(out_size * k_size));
  std::vector<int64_t> oi(static_cast<size_t>(rank)), ki(static_cast<size_t>(rank));
  for (int64_t o = 0; o < out_size; ++o) {
    for (int64_t r = o, d = rank - 1; d >= 0; --d) {
      oi[static_cast<size_t>(d)] = r % cs.geo.out[static_cast<size_t>(d)];
      r /= cs.geo.out[static_cast<size_t>(d)];
    }
    for (int64_t kk = 0; kk < k_size; ++kk) {
      for (int64_t r = kk, d = rank - 1; d >= 0; --d) {
        ki[static_cast<size_t>(d)] = r % cs.kernel[static_cast<size_t>(d)];
        r /= cs.kernel[static_cast<size_t>(d)];
      }
      int64_t off = 0;
      for (int d = 0; d < rank && off >= 0; ++d) {
        const size_t du = static_cast<size_t>(d);
        const int64_t pos = oi[du] * cs.geo.strides[du] - cs.geo.pad_begin(d) + ki[du] * cs.geo.dilations[du];
        off = pos < 0 || pos >= cs.in[du] ? -1 : off * cs.in[du] + pos;
      }
      src[static_cast<size_t>(o * k_size + kk)] = off;
    }
  }
  const int64_t cin_g = cs.c_in / cs.group, cout_g = cs.c_out / cs.group;
  std::vector<int32_t> y(static_cast<size_t>(cs.batch * cs.c_out * out_size));
  parallel_for(0, cs.batch * cs.c_out, 1, [&](int64_t begin, int64_t end) {
    for (int64_t bm = begin; bm < end; ++bm) {
      const int64_t nb = bm / cs.c_out, m = bm % cs.c_out, g = m / cout_g;
      for (int64_t o = 0; o < out_size; ++o) {
        uint32_t acc = 0;
        for (int64_t c = 0; c < cin_g; ++c) {
          const int32_t* xc = x.data() + (nb * cs.c_in + g * cin_g + c) * in_size;
          const int32_t* wc = w.data() + (m * cin_g + c) * k_size;
          const int64_t* s = src.data() + o * k_size;
          for (int64_t kk = 0; kk < k_size; ++kk)
            if (s[kk] >= 0) acc += static_cast<uint32_t>(xc[s[kk]]) * static_cast<uint32_t>(wc[kk]);
        }
        y[static_cast<size_t>(bm * out_size + o)] = static_cast<int32_t>(acc);
      }
    }
  });
  return y;
}

// x_zero_point is per tensor; w_zero_point per tensor or per output channel.
Expected<std::vector<int32_t>> centred_weight(const ir::Node& node, const Tensor& w, const Tensor* zp) {
  if (zp && zp->num_elements() != 1 && !(zp->rank() == 1 && zp->dim(0) == w.dim(0)))
    return invalid_argument("node %s: w_zero_point %s must be a scalar or have one value per output channel (%lld)",
                            node.label().c_str(), zp->description().c_str(), (long long)w.dim(0));
  if (!zp || zp->num_elements() == 1) return centred(node, w, zp, false, "w_zero_point");
  const Tensor zcol = zp->reshaped({w.dim(0), 1});
  const Tensor flat = w.reshaped({w.dim(0), w.num_elements() / std::max<int64_t>(w.dim(0), 1)});
  return centred(node, flat, &zcol, false, "w_zero_point");
}

Expected<std::vector<int32_t>> centred_input(const ir::Node& node, const Tensor& x, const Tensor* zp) {
  if (zp && zp->num_elements() != 1)
    return invalid_argument("node %s: x_zero_point %s must be a scalar", node.label().c_str(),
                            zp->description().c_str());
  return centred(node, x, zp, false, "x_zero_point");
}

Status conv_integer_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  KILN_RETURN_IF_ERROR(check_int8(node, x, "x"));
  KILN_RETURN_IF_ERROR(check_int8(node, w, "w"));
  KILN_ASSIGN_OR_RETURN(IntConv cs, int_conv_shape(node, x.dims(), w.dims()));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cx, centred_input(node, x, ctx.input(2)));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cw, centred_weight(node, w, ctx.input(3)));
  const std::vector<int32_t> r = int_conv(cs, cx, cw);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt32, cs.out_dims()));
  std::copy(r.begin(), r.end(), y->data<int32_t>());
  return ok_status();
}

// Output shape of the conv ops during inference (rank only when shapes are not static).
Shape conv_output_shape(const ir::Node& node, const Shape& x, const Shape& w) {
  if (!x.is_static() || !w.is_static()) return x.has_rank() ? unknown_dims(x.rank()) : Shape::unknown_rank();
  auto cs = int_conv_shape(node, x.static_dims(), w.static_dims());
  return cs.ok() ? Shape::from_static(cs->out_dims()) : Shape::unknown_rank();
}

Status infer_conv_integer(InferContext& ctx) {
  ctx.set_output(0, DataType::kInt32, conv_output_shape(ctx.node(), ctx.input_type(0).shape, ctx.input_type(1).shape));
  return ok_status();
}

// Inputs: x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
Status qlinear_conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(3);
  const Tensor& w_scale = *ctx.input(4);
  const Tensor& y_zp = *ctx.input(7);
  const Tensor* bias = ctx.input(8);
  KILN_RETURN_IF_ERROR(check_int8(node, x, "x"));
  KILN_RETURN_IF_ERROR(check_int8(node, w, "w"));
  KILN_RETURN_IF_ERROR(check_int8(node, y_zp, "y_zero_point"));
  for (int i : {1, 4, 6}) KILN_RETURN_IF_ERROR(check_scale(node, *ctx.input(i), "scale"));
  for (int i : {1, 6, 7})
    if (ctx.input(i)->num_elements() != 1)
      return invalid_argument("node %s: input %d must be a scalar, got %s", node.label().c_str(), i,
                              ctx.input(i)->description().c_str());
  KILN_ASSIGN_OR_RETURN(IntConv cs, int_conv_shape(node, x.dims(), w.dims()));
  if (w_scale.num_elements() != 1 && w_scale.num_elements() != cs.c_out)
    return invalid_argument("node %s: w_scale %s must be a scalar or have %lld values", node.label().c_str(),
                            w_scale.description().c_str(), (long long)cs.c_out);
  if (bias && (bias->dtype() != DataType::kInt32 || bias->num_elements() != cs.c_out))
    return invalid_argument("node %s: B must be int32 with %lld values, got %s", node.label().c_str(),
                            (long long)cs.c_out, bias->description().c_str());
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cx, centred_input(node, x, ctx.input(2)));
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> cw, centred_weight(node, w, ctx.input(5)));
  const std::vector<int32_t> r = int_conv(cs, cx, cw);
  const double sx = lowp_to_double(ctx.input(1)->dtype(), ctx.input(1)->raw_data(), 0);
  const double sy = lowp_to_double(ctx.input(6)->dtype(), ctx.input(6)->raw_data(), 0);
  const double zy = lowp_to_double(y_zp.dtype(), y_zp.raw_data(), 0);
  const DataType st = ctx.input(1)->dtype();
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, y_zp.dtype(), cs.out_dims()));
  const int64_t out_size = num_elements(cs.geo.out);
  dispatch_numeric(y_zp.dtype(), [&]<typename T>() {
    T* py = y->data<T>();
    for (int64_t bm = 0; bm < cs.batch * cs.c_out; ++bm) {
      const int64_t m = bm % cs.c_out;
      const double sw = lowp_to_double(w_scale.dtype(), w_scale.raw_data(), w_scale.num_elements() == 1 ? 0 : m);
      const double ratio = scale_ratio(st, sx, sw, sy);
      const int32_t b = bias ? bias->data<int32_t>()[m] : 0;
      for (int64_t o = bm * out_size; o < (bm + 1) * out_size; ++o) {
        const int32_t acc = static_cast<int32_t>(static_cast<uint32_t>(r[static_cast<size_t>(o)]) + static_cast<uint32_t>(b));
        py[o] = requantize<T>(acc * ratio + zy);
      }
    }
  });
  return ok_status();
}

Status infer_qlinear_conv(InferContext& ctx) {
  const DataType t = ctx.has_input(7) ? ctx.input_type(7).dtype : ctx.input_type(0).dtype;
  ctx.set_output(0, t, conv_output_shape(ctx.node(), ctx.input_type(0).shape, ctx.input_type(3).shape));
  return ok_status();
}

OpSchema conv_like(const char* name, int min_in, int max_in) {
  return OpSchema(name)
      .since(10)
      .inputs(min_in, max_in)
      .outputs(1, 1)
      .attr("auto_pad", AttrKind::kString)
      .attr("dilations", AttrKind::kInts)
      .attr("group", AttrKind::kInt)
      .attr("kernel_shape", AttrKind::kInts)
      .attr("pads", AttrKind::kInts)
      .attr("strides", AttrKind::kInts);
}

KILN_REGISTER_OP(OpSchema("MatMulInteger")
                     .since(10)
                     .inputs(2, 4)
                     .outputs(1, 1)
                     .infer(infer_matmul_integer)
                     .kernel(matmul_integer_kernel));
// Opset 21 added float16/bfloat16 scales; the computation is the same.
KILN_REGISTER_OP(OpSchema("QLinearMatMul")
                     .since(10)
                     .inputs(8, 8)
                     .outputs(1, 1)
                     .infer(infer_qlinear_matmul)
                     .kernel(qlinear_matmul_kernel));
KILN_REGISTER_OP(conv_like("ConvInteger", 2, 4).infer(infer_conv_integer).kernel(conv_integer_kernel));
KILN_REGISTER_OP(conv_like("QLinearConv", 8, 9).infer(infer_qlinear_conv).kernel(qlinear_conv_kernel));

}  // namespace
}  // namespace kiln::ops
