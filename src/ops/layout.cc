// Channel-blocked layout (ops/layout.h) and the kiln TransData op converting between it and
// the plain layout: schema, inference and kernel.
#include "ops/layout.h"

#include <algorithm>
#include <cstring>

#include "core/parallel.h"
#include "ops/op_util.h"

namespace kiln::ops {

bool valid_format(const std::string& format) { return format == kFormatPlain || format == kFormatBlocked; }
bool is_blocked_format(const std::string& format) { return format == kFormatBlocked; }

int64_t blocked_output_c0(const ir::Node& node) {
  if (node.domain() != kKilnDomain) return 0;
  const char* attr = node.op_type() == "FusedConv" ? "y_format"
                     : node.op_type() == "Pooling" ? "format"
                     : node.op_type() == "TransData" ? "dst_format"
                                                      : nullptr;
  if (!attr || !is_blocked_format(node.attr_string(attr, kFormatPlain))) return 0;
  return node.attr_int("c0", 0);
}

Expected<Shape> blocked_shape(const Shape& plain, int64_t c0) {
  if (c0 <= 0) return invalid_argument("channel block c0 = %lld must be positive", (long long)c0);
  if (!plain.has_rank() || plain.rank() < 3)
    return invalid_argument("a blocked layout needs a tensor [N, C, spatial...], got %s", plain.to_string().c_str());
  const Dim& c = plain[1];
  if (c.is_static() && c.value % c0 != 0)
    return invalid_argument("%s: %lld channels are not a multiple of the block %lld", plain.to_string().c_str(),
                            (long long)c.value, (long long)c0);
  std::vector<Dim> dims = plain.dims();
  dims[1] = c.is_static() ? Dim(c.value / c0) : Dim();
  dims.push_back(Dim(c0));
  return Shape(std::move(dims));
}

Expected<Shape> plain_shape(const Shape& blocked, int64_t c0) {
  if (c0 <= 0) return invalid_argument("channel block c0 = %lld must be positive", (long long)c0);
  if (!blocked.has_rank() || blocked.rank() < 4)
    return invalid_argument("a blocked tensor is [N, C1, spatial..., C0], got %s", blocked.to_string().c_str());
  const Dim& last = blocked[blocked.rank() - 1];
  if (last.is_static() && last.value != c0)
    return invalid_argument("%s: the last dim must be the block %lld", blocked.to_string().c_str(), (long long)c0);
  std::vector<Dim> dims = blocked.dims();
  dims.pop_back();
  const Dim& c1 = dims[1];
  dims[1] = c1.is_static() ? Dim(c1.value * c0) : Dim();
  return Shape(std::move(dims));
}

namespace {

// Planes per parallel task: at least ~32K elements, so a small tensor (a 7x7 map at the end
// of a CNN) is not split into tasks that cost more to hand out than to copy.
int64_t plane_grain(int64_t plane_elements) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, plane_elements));
}

// Moves elements between [N, C, P] and [N, C/c0, P, c0] (P = the spatial extent).
// `to_block`: plain -> blocked. Element size `es` bytes; one task per (n, c1) plane.
void transpose_blocks(const char* src, char* dst, int64_t n, int64_t c, int64_t p, int64_t c0, size_t es,
                      bool to_block) {
  const int64_t c1 = c / c0;
  parallel_for(0, n * c1, plane_grain(c0 * p), [&](int64_t begin, int64_t end) {
    for (int64_t nb = begin; nb < end; ++nb) {
      // The plane (n, c1) covers channels [c1*c0, c1*c0 + c0) of image n: the same bytes
      // offset in both layouts.
      const size_t base = static_cast<size_t>(nb * c0 * p) * es;
      const char* s = src + base;
      char* d = dst + base;
      for (int64_t k = 0; k < c0; ++k)
        for (int64_t i = 0; i < p; ++i) {
          const size_t plain_at = static_cast<size_t>(k * p + i) * es;
          const size_t block_at = static_cast<size_t>(i * c0 + k) * es;
          if (to_block)
            std::memcpy(d + block_at, s + plain_at, es);
          else
            std::memcpy(d + plain_at, s + block_at, es);
        }
    }
  });
}

// Specialised 4-byte copy, the case every float32 model hits (memcpy of 4 bytes per element
// above is correct but slow).
void transpose_blocks_f32(const float* src, float* dst, int64_t n, int64_t c, int64_t p, int64_t c0,
                          bool to_block) {
  const int64_t c1 = c / c0;
  parallel_for(0, n * c1, plane_grain(c0 * p), [&](int64_t begin, int64_t end) {
    for (int64_t nb = begin; nb < end; ++nb) {
      const float* s = src + nb * c0 * p;
      float* d = dst + nb * c0 * p;
      if (to_block) {
        for (int64_t i = 0; i < p; ++i)
          for (int64_t k = 0; k < c0; ++k) d[i * c0 + k] = s[k * p + i];
      } else {
        for (int64_t k = 0; k < c0; ++k)
          for (int64_t i = 0; i < p; ++i) d[k * p + i] = s[i * c0 + k];
      }
    }
  });
}

}  // namespace

void relayout_into(const Tensor& src, int64_t c0, bool to_block, Tensor& out) {
  const std::vector<int64_t>& plain_dims = to_block ? src.dims() : out.dims();
  int64_t p = 1;
  for (size_t i = 2; i < plain_dims.size(); ++i) p *= plain_dims[i];
  if (out.num_elements() == 0) return;
  if (src.dtype() == DataType::kFloat32)
    transpose_blocks_f32(src.data<float>(), out.data<float>(), plain_dims[0], plain_dims[1], p, c0, to_block);
  else
    transpose_blocks(static_cast<const char*>(src.raw_data()), static_cast<char*>(out.raw_data()), plain_dims[0],
                     plain_dims[1], p, c0, dtype_bytes(src.dtype(), 1), to_block);
}

namespace {

Expected<Tensor> relayout(const Tensor& src, int64_t c0, bool to_block) {
  if (src.dtype() == DataType::kString) return invalid_argument("a string tensor has no blocked layout");
  KILN_ASSIGN_OR_RETURN(Shape out_shape, to_block ? blocked_shape(src.shape(), c0) : plain_shape(src.shape(), c0));
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(src.dtype(), out_shape.static_dims()));
  relayout_into(src, c0, to_block, out);
  return out;
}

}  // namespace

Expected<Tensor> to_blocked(const Tensor& plain, int64_t c0) { return relayout(plain, c0, true); }
Expected<Tensor> to_plain(const Tensor& blocked, int64_t c0) { return relayout(blocked, c0, false); }

namespace {

bool blocked_at(const std::vector<bool>& mask, int i) {
  return i < static_cast<int>(mask.size()) && mask[static_cast<size_t>(i)];
}

int64_t c0_at(const std::vector<int64_t>& c0s, int i) { return i < static_cast<int>(c0s.size()) ? c0s[static_cast<size_t>(i)] : 0; }

}  // namespace

Status infer_on_plain_view(InferContext& ctx, int64_t c0, const std::vector<bool>& blocked_inputs,
                           bool blocked_output, const std::function<Status(InferContext&)>& plain_infer) {
  std::vector<int64_t> input_c0(static_cast<size_t>(ctx.num_inputs()), 0);
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (blocked_at(blocked_inputs, i)) input_c0[static_cast<size_t>(i)] = c0;
  return infer_on_plain_view(ctx, input_c0, blocked_output ? c0 : 0, plain_infer);
}

Status infer_on_plain_view(InferContext& ctx, const std::vector<int64_t>& input_c0, int64_t output_c0,
                           const std::function<Status(InferContext&)>& plain_infer) {
  const ir::Node& node = ctx.node();
  std::vector<ir::TensorType> plain(static_cast<size_t>(ctx.num_inputs()));
  std::vector<const ir::TensorType*> types;
  std::vector<const Tensor*> constants;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) {
      types.push_back(nullptr);
      constants.push_back(nullptr);
      continue;
    }
    ir::TensorType& t = plain[static_cast<size_t>(i)];
    t = ctx.input_type(i);
    const int64_t c0 = c0_at(input_c0, i);
    if (c0 > 0 && t.shape.has_rank()) {
      Expected<Shape> ps = plain_shape(t.shape, c0);
      if (!ps.ok()) return invalid_argument("node %s: input %d: %s", node.label().c_str(), i, ps.status().message().c_str());
      t.shape = *ps;
    }
    types.push_back(&t);
    constants.push_back(c0 > 0 ? nullptr : ctx.input_constant(i));
  }
  InferContext inner(node, types, constants);
  KILN_RETURN_IF_ERROR(plain_infer(inner));
  for (int o = 0; o < ctx.num_outputs(); ++o) {
    ir::TensorType y = inner.output(o);
    if (o == 0 && output_c0 > 0 && y.shape.has_rank()) {
      Expected<Shape> bs = blocked_shape(y.shape, output_c0);
      if (!bs.ok()) return invalid_argument("node %s: output: %s", node.label().c_str(), bs.status().message().c_str());
      y.shape = *bs;
    }
    ctx.set_output(o, y.dtype, y.shape);
  }
  return ok_status();
}

Status run_on_plain_view(KernelContext& ctx, int64_t c0, const std::vector<bool>& blocked_inputs,
                         bool blocked_output, const std::function<Status(KernelContext&)>& plain_kernel) {
  std::vector<int64_t> input_c0(static_cast<size_t>(ctx.num_inputs()), 0);
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (blocked_at(blocked_inputs, i)) input_c0[static_cast<size_t>(i)] = c0;
  return run_on_plain_view(ctx, input_c0, blocked_output ? c0 : 0, plain_kernel);
}

Status run_on_plain_view(KernelContext& ctx, const std::vector<int64_t>& input_c0, int64_t output_c0,
                         const std::function<Status(KernelContext&)>& plain_kernel) {
  const ir::Node& node = ctx.node();
  std::vector<RuntimeValue> plain(static_cast<size_t>(ctx.num_inputs()));
  std::vector<const RuntimeValue*> inputs;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const int64_t c0 = c0_at(input_c0, i);
    if (c0 <= 0 || !ctx.input(i)) {
      inputs.push_back(ctx.value(i));
      continue;
    }
    Expected<Tensor> t = to_plain(*ctx.input(i), c0);
    if (!t.ok()) return invalid_argument("node %s: input %d: %s", node.label().c_str(), i, t.status().message().c_str());
    plain[static_cast<size_t>(i)] = std::move(*t);
    inputs.push_back(&plain[static_cast<size_t>(i)]);
  }
  std::vector<RuntimeValue> outputs(static_cast<size_t>(ctx.num_outputs()));
  KernelContext inner(node, std::move(inputs), &outputs, ctx.subgraphs());
  KILN_RETURN_IF_ERROR(plain_kernel(inner));
  for (int o = 0; o < ctx.num_outputs(); ++o) {
    RuntimeValue& v = outputs[static_cast<size_t>(o)];
    if (o == 0 && output_c0 > 0 && v.is_tensor()) {
      KILN_ASSIGN_OR_RETURN(Tensor y, to_blocked(v.tensor(), output_c0));
      ctx.set_output(o, std::move(y));
    } else {
      ctx.set_output_value(o, std::move(v));
    }
  }
  return ok_status();
}

Expected<TransDataAttrs> trans_data_attrs(const ir::Node& node) {
  const std::string src = node.attr_string("src_format", "");
  const std::string dst = node.attr_string("dst_format", "");
  if (!valid_format(src) || !valid_format(dst) || src == dst)
    return invalid_argument("node %s: src_format '%s' and dst_format '%s' must be %s and %s, one each way",
                            node.label().c_str(), src.c_str(), dst.c_str(), kFormatPlain, kFormatBlocked);
  TransDataAttrs a;
  a.to_block = is_blocked_format(dst);
  a.c0 = node.attr_int("c0", 0);
  if (a.c0 <= 0 || a.c0 > 64)
    return invalid_argument("node %s: c0 = %lld, expected a block of 1..64 channels", node.label().c_str(),
                            (long long)a.c0);
  return a;
}

namespace {

Status infer_trans_data(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(TransDataAttrs a, trans_data_attrs(node));
  const ir::TensorType& in = ctx.input_type(0);
  if (!in.shape.has_rank()) {
    ctx.set_output(0, in.dtype, Shape::unknown_rank());
    return ok_status();
  }
  Expected<Shape> out = a.to_block ? blocked_shape(in.shape, a.c0) : plain_shape(in.shape, a.c0);
  if (!out.ok()) return invalid_argument("node %s: %s", node.label().c_str(), out.status().message().c_str());
  ctx.set_output(0, in.dtype, *out);
  return ok_status();
}

Status trans_data_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(TransDataAttrs a, trans_data_attrs(node));
  const Tensor* x = ctx.input(0);
  if (!x) return invalid_argument("node %s: input X is missing", node.label().c_str());
  Expected<Tensor> y = a.to_block ? to_blocked(*x, a.c0) : to_plain(*x, a.c0);
  if (!y.ok()) return invalid_argument("node %s: %s", node.label().c_str(), y.status().message().c_str());
  ctx.set_output(0, std::move(*y));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("TransData", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("src_format", ir::AttrKind::kString)
                     .required_attr("dst_format", ir::AttrKind::kString)
                     .required_attr("c0", ir::AttrKind::kInt)
                     .infer(infer_trans_data)
                     .kernel(trans_data_kernel)
                     .doc("Y = X moved between the NCHW and NC1HWC0 layouts (docs/fused-ops.md)"));

}  // namespace kiln::ops
