// Pooling (ONNX opsets 1..23): MaxPool (with the optional Indices output, dilations,
// ceil_mode, storage_order), AveragePool (count_include_pad, ceil_mode, dilations),
// LpPool, GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

enum class PoolKind { kMax, kAverage, kLp };


Status infer_pool(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  if (!xt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    if (ctx.num_outputs() > 1) ctx.set_output(1, DataType::kInt64, Shape::unknown_rank());
    return ok_status();
  }
  if (xt.shape.rank() < 3)
    return invalid_argument("node %s: input has rank %d, expected >= 3 (N x C x D1 ...)",
                            ctx.node().label().c_str(), xt.shape.rank());
  KILN_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(ctx.node(), spatial_extents(xt.shape), {}, true));
  std::vector<Dim> dims{xt.shape[0], xt.shape[1]};
  for (size_t d = 0; d < g.out.size(); ++d)
    dims.push_back(window_output_dim(ctx.node(), xt.shape[static_cast<int>(d) + 2], g, d));
  ctx.set_output(0, xt.dtype, Shape(dims));
  if (ctx.num_outputs() > 1) ctx.set_output(1, DataType::kInt64, Shape(dims));
  return ok_status();
}

// One N x C plane at a time: for every output position, walk the window (a box of
// kernel positions, dilated) and combine the inputs inside the image.
template <typename T, PoolKind kKind>
void pool_planes(const T* x, T* y, int64_t* indices, int64_t planes, const std::vector<int64_t>& in,
                 const WindowGeometry& g, bool count_include_pad, int64_t p, bool column_major) {
  const int n = g.rank();
  int64_t in_size = 1, out_size = 1, kernel_size = 1;
  for (int64_t v : in) in_size *= v;
  for (int64_t v : g.out) out_size *= v;
  for (int64_t v : g.kernel) kernel_size *= v;
  // Index strides of the Indices output: row-major, or column-major over the spatial dims.
  std::vector<int64_t> index_stride(static_cast<size_t>(n), 1);
  if (column_major) {
    for (int d = 1; d < n; ++d) index_stride[d] = index_stride[d - 1] * in[d - 1];
  } else {
    for (int d = n - 2; d >= 0; --d) index_stride[d] = index_stride[d + 1] * in[d + 1];
  }
  parallel_for(0, planes, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> start(static_cast<size_t>(n)), kc(static_cast<size_t>(n));
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * in_size;
      for (int64_t o = 0; o < out_size; ++o) {
        int64_t rem = o, counted = 1;
        for (int d = n - 1; d >= 0; --d) {
          const int64_t od = rem % g.out[d];
          rem /= g.out[d];
          start[d] = od * g.strides[d] - g.pad_begin(d);
          // Window positions counted in the divisor: inside the padded (or plain) input.
          const int64_t lo = count_include_pad ? -g.pad_begin(d) : 0;
          const int64_t hi = in[d] + (count_include_pad ? g.pad_end(d) : 0);
          int64_t c = 0;
          for (int64_t j = 0; j < g.kernel[d]; ++j) {
            const int64_t i = start[d] + j * g.dilations[d];
            c += i >= lo && i < hi;
          }
          counted *= c;
        }
        double acc = 0;
        T best = std::numeric_limits<T>::lowest();
        if constexpr (std::is_floating_point_v<T>) best = -std::numeric_limits<T>::infinity();
        int64_t best_index = -1;
        std::fill(kc.begin(), kc.end(), 0);
        for (int64_t kpos = 0; kpos < kernel_size; ++kpos) {
          int64_t offset = 0, index = 0;
          bool inside = true;
          for (int d = 0; d < n; ++d) {
            const int64_t i = start[d] + kc[d] * g.dilations[d];
            if (i < 0 || i >= in[d]) {
              inside = false;
              break;
            }
            offset = offset * in[d] + i;
            index += i * index_stride[d];
          }
          if (inside) {
            const T v = xp[offset];
            if constexpr (kKind == PoolKind::kMax) {
              if (v > best || best_index < 0) {
                best = v;
                best_index = index;
              }
            } else if constexpr (kKind == PoolKind::kAverage) {
              acc += static_cast<double>(v);
            } else {
              acc += std::pow(std::fabs(static_cast<double>(v)), static_cast<double>(p));
            }
          }
          for (int d = n - 1; d >= 0; --d) {
            if (++kc[d] < g.kernel[d]) break;
            kc[d] = 0;
          }
        }
        T* dst = y + pl * out_size + o;
        if constexpr (kKind == PoolKind::kMax) {
          *dst = best;
          if (indices) indices[pl * out_size + o] = best_index < 0 ? -1 : pl * in_size + best_index;
        } else if constexpr (kKind == PoolKind::kAverage) {
          *dst = counted > 0 ? static_cast<T>(acc / static_cast<double>(counted)) : T(0);
        } else {
          *dst = static_cast<T>(std::pow(acc, 1.0 / static_cast<double>(p)));
        }
      }
    }
  });
}

template <PoolKind kKind>
Status pool_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.rank() < 3)
    return invalid_argument("node %s: input has rank %d (%s), expected >= 3 (N x C x D1 ...)", node.label().c_str(),
                            x.rank(), dims_to_string(x.dims()).c_str());
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  KILN_ASSIGN_OR_RETURN(WindowGeometry g, window_geometry(node, in, {}, true));
  // Opset < 10 had no dilations on pooling; AveragePool gained them only at 19.
  const int64_t storage_order = node.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1)
    return invalid_argument("node %s: storage_order must be 0 or 1, got %lld", node.label().c_str(),
                            (long long)storage_order);
  const int64_t p = node.attr_int("p", 2);
  if (kKind == PoolKind::kLp && p < 1)
    return invalid_argument("node %s: p must be >= 1, got %lld", node.label().c_str(), (long long)p);
  std::vector<int64_t> out_dims{x.dim(0), x.dim(1)};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  int64_t* indices = nullptr;
  if (kKind == PoolKind::kMax && ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(Tensor * idx, ctx.allocate_output(1, DataType::kInt64, out_dims));
    indices = idx->data<int64_t>();
  }
  if (y->num_elements() == 0) return ok_status();
  const bool include_pad = node.attr_int("count_include_pad", 0) != 0;
  const int64_t planes = x.dim(0) * x.dim(1);
  auto run = [&]<typename T>() {
    pool_planes<T, kKind>(x.data<T>(), y->data<T>(), indices, planes, in, g, include_pad, p, storage_order == 1);
  };
  bool ok = dispatch_float(x.dtype(), run);
  if (!ok && kKind == PoolKind::kMax) {
    if (x.dtype() == DataType::kInt8) {
      run.template operator()<int8_t>();
      ok = true;
    } else if (x.dtype() == DataType::kUInt8) {
      run.template operator()<uint8_t>();
      ok = true;
    }
  }
  if (!ok) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

// ---- Global pooling ------------------------------------------------------------------

Status infer_global_pool(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  if (!xt.shape.has_rank()) {
    ctx.set_output(0, xt.dtype, Shape::unknown_rank());
    return ok_status();
  }
  if (xt.shape.rank() < 2)
    return invalid_argument("node %s: input has rank %d, expected >= 2 (N x C ...)", ctx.node().label().c_str(),
                            xt.shape.rank());
  std::vector<Dim> dims{xt.shape[0], xt.shape[1]};
  dims.resize(static_cast<size_t>(xt.shape.rank()), Dim(1));
  ctx.set_output(0, xt.dtype, Shape(dims));
  return ok_status();
}

template <PoolKind kKind>
Status global_pool_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (x.rank() < 2)
    return invalid_argument("node %s: input has rank %d, expected >= 2 (N x C ...)", node.label().c_str(), x.rank());
  std::vector<int64_t> out_dims{x.dim(0), x.dim(1)};
  out_dims.resize(static_cast<size_t>(x.rank()), 1);
  const int64_t p = node.attr_int("p", 2);
  if (kKind == PoolKind::kLp && p < 1)
    return invalid_argument("node %s: p must be >= 1, got %lld", node.label().c_str(), (long long)p);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), out_dims));
  const int64_t planes = x.dim(0) * x.dim(1);
  if (planes == 0) return ok_status();
  const int64_t size = x.num_elements() / planes;
  if (size == 0)
    return invalid_argument("node %s: input %s has no spatial elements", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  bool ok = dispatch_float(x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    parallel_for(0, planes, 16, [&](int64_t p0, int64_t p1) {
      for (int64_t pl = p0; pl < p1; ++pl) {
        const T* row = src + pl * size;
        if constexpr (kKind == PoolKind::kMax) {
          T best = row[0];
          for (int64_t i = 1; i < size; ++i) best = row[i] > best ? row[i] : best;
          dst[pl] = best;
        } else if constexpr (kKind == PoolKind::kAverage) {
          double acc = 0;
          for (int64_t i = 0; i < size; ++i) acc += row[i];
          dst[pl] = static_cast<T>(acc / static_cast<double>(size));
        } else {
          double acc = 0;
          for (int64_t i = 0; i < size; ++i) acc += std::pow(std::fabs(static_cast<double>(row[i])), double(p));
          dst[pl] = static_cast<T>(std::pow(acc, 1.0 / double(p)));
        }
      }
    });
  });
  if (!ok) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

OpSchema pool_schema(const char* name, int64_t first, int64_t last = kMaxOpset) {
  return OpSchema(name)
      .since(first, last)
      .inputs(1, 1)
      .outputs(1, 1)
      .attr("auto_pad", AttrKind::kString)
      .required_attr("kernel_shape", AttrKind::kInts)
      .attr("pads", AttrKind::kInts)
      .attr("strides", AttrKind::kInts)
      .infer(infer_pool);
}

}  // namespace

// MaxPool 8 added Indices and storage_order; 10 added ceil_mode and dilations; 12 int8/uint8.
KILN_REGISTER_OP(pool_schema("MaxPool", 1, 7).kernel(with_half_as_float(pool_kernel<PoolKind::kMax>)));
KILN_REGISTER_OP(pool_schema("MaxPool", 8)
                     .outputs(1, 2)
                     .attr("storage_order", AttrKind::kInt)
                     .attr("ceil_mode", AttrKind::kInt)
                     .attr("dilations", AttrKind::kInts)
                     .kernel(with_half_as_float(pool_kernel<PoolKind::kMax>)));
// AveragePool 7 added count_include_pad; 10 ceil_mode; 19 dilations.
KILN_REGISTER_OP(pool_schema("AveragePool", 1)
                     .attr("count_include_pad", AttrKind::kInt)
                     .attr("ceil_mode", AttrKind::kInt)
                     .attr("dilations", AttrKind::kInts)
                     .kernel(with_half_as_float(pool_kernel<PoolKind::kAverage>)));
// LpPool 18 added ceil_mode and dilations.
KILN_REGISTER_OP(pool_schema("LpPool", 1)
                     .attr("p", AttrKind::kInt)
                     .attr("ceil_mode", AttrKind::kInt)
                     .attr("dilations", AttrKind::kInts)
                     .kernel(with_half_as_float(pool_kernel<PoolKind::kLp>)));
KILN_REGISTER_OP(OpSchema("GlobalAveragePool").since(1).inputs(1, 1).outputs(1, 1).infer(infer_global_pool).kernel(
    with_half_as_float(global_pool_kernel<PoolKind::kAverage>)));
KILN_REGISTER_OP(OpSchema("GlobalMaxPool").since(1).inputs(1, 1).outputs(1, 1).infer(infer_global_pool).kernel(
    with_half_as_float(global_pool_kernel<PoolKind::kMax>)));
KILN_REGISTER_OP(OpSchema("GlobalLpPool")
                     .since(1)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("p", AttrKind::kInt)
                     .infer(infer_global_pool)
                     .kernel(with_half_as_float(global_pool_kernel<PoolKind::kLp>)));

}  // namespace kiln::ops
