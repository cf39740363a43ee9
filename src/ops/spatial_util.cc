// Window geometry for conv and pooling, and the half-precision conversion wrapper.
#include "ops/spatial_util.h"

#include <algorithm>

namespace kiln::ops {

std::vector<int64_t> spatial_extents(const Shape& shape) {
  std::vector<int64_t> out;
  for (int i = 2; i < shape.rank(); ++i) out.push_back(shape[i].is_static() ? shape[i].value : -1);
  return out;
}

Expected<WindowGeometry> window_geometry(const ir::Node& node, const std::vector<int64_t>& in,
                                         std::vector<int64_t> kernel, bool allow_ceil_mode) {
  const std::string label_str = node.label();
  const char* label = label_str.c_str();
  const size_t n = in.size();
  if (n == 0) return invalid_argument("node %s: input needs at least one spatial dim (rank >= 3)", label);
  WindowGeometry g;
  std::vector<int64_t> attr_kernel = node.attr_ints("kernel_shape");
  if (kernel.empty()) {
    if (!node.has_attr("kernel_shape"))
      return invalid_argument("node %s is missing required attribute 'kernel_shape'", label);
    kernel = attr_kernel;
  } else if (node.has_attr("kernel_shape") && attr_kernel != kernel) {
    return invalid_argument("node %s: kernel_shape %s does not match the weight's spatial dims %s", label,
                            dims_to_string(attr_kernel).c_str(), dims_to_string(kernel).c_str());
  }
  if (kernel.size() != n)
    return invalid_argument("node %s: kernel_shape has %zu dims, input has %zu spatial dims", label,
                            kernel.size(), n);
  g.kernel = kernel;
  g.strides = node.attr_ints("strides", std::vector<int64_t>(n, 1));
  g.dilations = node.attr_ints("dilations", std::vector<int64_t>(n, 1));
  g.pads = node.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (g.strides.size() != n)
    return invalid_argument("node %s: strides has %zu values, expected %zu", label, g.strides.size(), n);
  if (g.dilations.size() != n)
    return invalid_argument("node %s: dilations has %zu values, expected %zu", label, g.dilations.size(), n);
  if (g.pads.size() != 2 * n)
    return invalid_argument("node %s: pads has %zu values, expected %zu", label, g.pads.size(), 2 * n);
  for (size_t d = 0; d < n; ++d) {
    if (g.kernel[d] < 1) return invalid_argument("node %s: kernel extent %lld < 1", label, (long long)g.kernel[d]);
    if (g.strides[d] < 1) return invalid_argument("node %s: stride %lld < 1", label, (long long)g.strides[d]);
    if (g.dilations[d] < 1)
      return invalid_argument("node %s: dilation %lld < 1", label, (long long)g.dilations[d]);
  }
  for (int64_t p : g.pads)
    if (p < 0) return invalid_argument("node %s: negative pad %lld", label, (long long)p);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  const bool ceil_mode = allow_ceil_mode && node.attr_int("ceil_mode", 0) != 0;
  g.out.assign(n, -1);
  for (size_t d = 0; d < n; ++d) {
    const int64_t dk = (g.kernel[d] - 1) * g.dilations[d] + 1;
    const int64_t s = g.strides[d];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      if (in[d] < 0) continue;
      const int64_t out = (in[d] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (out - 1) * s + dk - in[d]);
      const int64_t small = total / 2;
      g.pads[d] = auto_pad == "SAME_UPPER" ? small : total - small;
      g.pads[d + n] = total - g.pads[d];
      g.out[d] = out;
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET") {
      if (auto_pad == "VALID") g.pads[d] = g.pads[d + n] = 0;
      if (in[d] < 0) continue;
      const int64_t span = in[d] + g.pads[d] + g.pads[d + n] - dk;
      if (span < 0)
        return invalid_argument("node %s: window %lld (dilated) is larger than padded input %lld on spatial dim %zu",
                                label, (long long)dk, (long long)(in[d] + g.pads[d] + g.pads[d + n]), d);
      int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
      // As PyTorch: the last window must start inside the input or its begin padding.
      if (ceil_mode && (out - 1) * s >= in[d] + g.pads[d]) --out;
      g.out[d] = out;
    } else {
      return invalid_argument("node %s: unknown auto_pad '%s'", label, auto_pad.c_str());
    }
    if (g.out[d] < 1)
      return invalid_argument("node %s: output extent %lld on spatial dim %zu is not positive", label,
                              (long long)g.out[d], d);
  }
  return g;
}

Dim window_output_dim(const ir::Node& node, const Dim& in, const WindowGeometry& g, size_t d) {
  if (g.out[d] >= 0) return Dim(g.out[d]);
  if (in.symbol.empty()) return Dim();
  const size_t n = g.kernel.size();
  const int64_t dk = (g.kernel[d] - 1) * g.dilations[d] + 1;
  const int64_t s = g.strides[d];
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")  // ceil(in / s)
    return s == 1 ? in : Dim::symbolic(str_format("ceil(%s/%lld)", in.symbol.c_str(), (long long)s));
  const int64_t pb = auto_pad == "VALID" ? 0 : g.pads[d], pe = auto_pad == "VALID" ? 0 : g.pads[d + n];
  const bool ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  if (s == 1 && pb + pe == dk - 1) return in;
  return Dim::symbolic(str_format("win(%s,k%lld,s%lld,p%lld+%lld%s)", in.symbol.c_str(), (long long)dk,
                                  (long long)s, (long long)pb, (long long)pe, ceil_mode ? ",ceil" : ""));
}

Status check_float_input(const ir::Node& node, const Tensor& t, const char* what, int min_rank) {
  if (t.rank() < min_rank)
    return invalid_argument("node %s: %s has rank %d (%s), expected rank >= %d", node.label().c_str(), what,
                            t.rank(), dims_to_string(t.dims()).c_str(), min_rank);
  if (t.dtype() != DataType::kFloat32 && t.dtype() != DataType::kFloat64)
    return unsupported("node %s: %s has dtype %s; float32 and float64 are supported", node.label().c_str(), what,
                       dtype_name(t.dtype()));
  return ok_status();
}

Status unsupported_dtype(const ir::Node& node, DataType t) {
  return unsupported("node %s: dtype %s is not supported by the reference kernel", node.label().c_str(),
                     dtype_name(t));
}

namespace {

bool is_half(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

Tensor half_to_float(const Tensor& t) {
  Tensor out = Tensor::make(DataType::kFloat32, t.dims());
  const uint16_t* src = static_cast<const uint16_t*>(t.raw_data());
  float* dst = out.data<float>();
  for (int64_t i = 0; i < t.num_elements(); ++i)
    dst[i] = t.dtype() == DataType::kFloat16 ? fp16_to_float(src[i]) : bf16_to_float(src[i]);
  return out;
}

Tensor float_to_half(const Tensor& t, DataType to) {
  Tensor out = Tensor::make(to, t.dims());
  const float* src = t.data<float>();
  uint16_t* dst = static_cast<uint16_t*>(out.raw_data());
  for (int64_t i = 0; i < t.num_elements(); ++i)
    dst[i] = to == DataType::kFloat16 ? float_to_fp16(src[i]) : float_to_bf16(src[i]);
  return out;
}

}  // namespace

KernelFn with_half_as_float(KernelFn fn) {
  return [fn](KernelContext& ctx) -> Status {
    const Tensor* x = ctx.input(0);
    if (!x || !is_half(x->dtype())) return fn(ctx);
    const DataType half = x->dtype();
    std::vector<RuntimeValue> converted(static_cast<size_t>(ctx.num_inputs()));
    std::vector<const RuntimeValue*> inputs(static_cast<size_t>(ctx.num_inputs()), nullptr);
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const Tensor* t = ctx.input(i);
      if (t && is_half(t->dtype())) {
        converted[static_cast<size_t>(i)] = half_to_float(*t);
        inputs[static_cast<size_t>(i)] = &converted[static_cast<size_t>(i)];
      } else {
        inputs[static_cast<size_t>(i)] = ctx.value(i);
      }
    }
    std::vector<RuntimeValue> outputs(static_cast<size_t>(ctx.num_outputs()));
    KernelContext inner(ctx.node(), std::move(inputs), &outputs, ctx.subgraphs());
    KILN_RETURN_IF_ERROR(fn(inner));
    for (int i = 0; i < ctx.num_outputs(); ++i) {
      RuntimeValue& v = outputs[static_cast<size_t>(i)];
      if (v.is_tensor() && v.tensor().dtype() == DataType::kFloat32)
        ctx.set_output(i, float_to_half(v.tensor(), half));
      else
        ctx.set_output_value(i, std::move(v));
    }
    return ok_status();
  };
}

std::vector<int64_t> dims_or_unknown(const Shape& s) {
  std::vector<int64_t> d;
  for (const Dim& x : s.dims()) d.push_back(x.is_static() ? x.value : -1);
  return d;
}

}  // namespace kiln::ops
