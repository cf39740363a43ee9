// oneDNN int8 convolution kernel for ONNX ConvInteger: uint8 or int8 X [N, C, D...] (1-D, 2-D
// or 3-D), a constant uint8 or int8 W [M, C/group, k...], X's zero point a scalar (a constant,
// or given at run time), W's a constant scalar or one per output channel, int32 Y:
//
//   Y[n, m, o] = sum_{c, k} (X[n, c, o*s + k*d - p] - x_zp) * (W[m, c, k] - w_zp[m])
//                                                      (int32, wrapping; padding is x_zp)
//
// oneDNN's VNNI convolutions take int8 weights without a zero point, so W is packed once as
// int8 W': W - w_zp[m] itself when every value fits int8 (int8 W with zero point 0, uint8 W
// with zero point 128, and most others), else W - s (s = 0 for int8 W, 128 for uint8, exact)
// with z[m] = w_zp[m] - s (else z = 0). Summing over the window positions inside X only (the
// padding's X - x_zp is 0):
//
//   Y[n, m, o] = A[n, m, o] - x_zp * V[m, o] - z[m] * R[n, g(m), o]
//     A = sum X * W'            oneDNN, X as it is (padded with 0), no zero points
//     V = sum W'                over the window positions of o inside X and the channels
//     R = sum (X - x_zp)        over the same, and group g(m)'s input channels
//
// in wrapping int32. The V term runs when x_zp is not 0 (a pass over Y with the window's
// weight sums, about the work of a depthwise convolution), the R term when some z[m] is not 0
// (a channel sum of X, then the same window pass). oneDNN's own runtime source zero point is
// not used: with one it picks jit_int8, which rounds the int32 sums through float32.
//
// Exactness: oneDNN's jit_int8 and gemm convolutions convert the int32 sums to float32 and
// back (no scale is asked for, but the epilogue is a float one), which is exact while |sum| <=
// 2^24; brgconv (brgemm) stores a uint8 source's sums as they are (tests/quant/
// conv_integer_test.py, sums near 7e7). So the kernel takes any implementation when 255 *
// max_m sum |W'[m]| <= 2^24 (every partial sum, with oneDNN's +128 shift of an int8 source,
// stays below that), else only brgconv with a uint8 source, and refuses otherwise (the
// reference kernel runs, the compile report says why). And VNNI only: without it, u8 x s8 byte
// pairs are summed in saturating int16 (onednn_util.h).
//
// X and Y are plain N C D...: reordered to and from the primitive's channels-last layouts
// through the thread's workspace (onednn::LayoutBridge). Inputs other than the prepared ones
// (another shape, a W fed by the caller, a zero point that is not a scalar of X's dtype) run
// the reference kernel.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/spatial_util.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

int32_t x8_at(DataType t, const void* data, int64_t i) {
  return t == DataType::kUInt8 ? static_cast<const uint8_t*>(data)[i] : static_cast<const int8_t*>(data)[i];
}

// Spatial geometry padded to three dims (depth, height, width; unused leading dims extent 1),
// for the correction's loops.
struct Window3 {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
};

struct ConvIntegerPlan {
  std::vector<int64_t> x_dims, w_dims, y_dims;
  DataType x_dtype = DataType::kUInt8, w_dtype = DataType::kUInt8;
  int64_t group = 1;
  ops::WindowGeometry geo;
  Window3 win;
  const Tensor* x_zero_point = nullptr;  // the constant, when it is one
  const Tensor* w = nullptr;
  const Tensor* w_zero_point = nullptr;
  std::vector<int8_t> w_packed;  // W', [M, C/group, k...]
  std::vector<int32_t> z;        // w_zp[m] - s per output channel; empty when W' = W - w_zp
  std::vector<int32_t> w_sums;   // sum_c W'[m, c, k], [M, k...]
  std::vector<uint32_t> w_totals;  // sum_{c, k} W'[m, c, k], [M] (wrapping)
};

Expected<ConvIntegerPlan> plan_conv_integer(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "ConvInteger")
    return unsupported("node %s: not a ConvInteger", label.c_str());
  const ir::Value* x = node.input(0);
  const ir::Value* w = node.input(1);
  const ir::Value* y = node.output(0);
  if (!x || !w || !y || node.num_outputs() != 1) return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  if (!onednn::int8_sums_exact())
    return unsupported("node %s: this CPU has no VNNI (oneDNN's int8 sums would saturate)", label.c_str());
  ConvIntegerPlan p;
  KILN_RETURN_IF_ERROR(require_static_tensor("X", x, {DataType::kUInt8, DataType::kInt8}));
  KILN_RETURN_IF_ERROR(require_static_tensor("Y", y, {DataType::kInt32}));
  if (!w->has_initializer()) return unsupported("node %s: W is not constant (not an initializer)", label.c_str());
  p.w = w->initializer();
  if (!is_x8(p.w->dtype()))
    return unsupported("node %s: W dtype %s: only uint8 and int8", label.c_str(), dtype_name(p.w->dtype()));
  p.x_dtype = x->dtype();
  p.w_dtype = p.w->dtype();
  p.x_dims = x->shape().static_dims();
  p.w_dims = p.w->dims();
  p.y_dims = y->shape().static_dims();
  const size_t rank = p.x_dims.size();
  if (rank < 3 || rank > 5 || p.w_dims.size() != rank || p.y_dims.size() != rank)
    return unsupported("node %s: 1-D, 2-D and 3-D convolutions only", label.c_str());
  for (int64_t d : p.x_dims)
    if (d <= 0) return unsupported("node %s: empty input", label.c_str());
  for (int64_t d : p.w_dims)
    if (d <= 0) return unsupported("node %s: empty weights", label.c_str());
  p.group = node.attr_int("group", 1);
  const int64_t c_in = p.x_dims[1], c_out = p.w_dims[0];
  if (p.group < 1 || c_out % p.group != 0 || c_in != p.w_dims[1] * p.group)
    return unsupported("node %s: group %lld does not fit X and W", label.c_str(), static_cast<long long>(p.group));
  KILN_ASSIGN_OR_RETURN(p.geo, ops::window_geometry(node, std::vector<int64_t>(p.x_dims.begin() + 2, p.x_dims.end()),
                                                    std::vector<int64_t>(p.w_dims.begin() + 2, p.w_dims.end()),
                                                    false));
  std::vector<int64_t> expect{p.x_dims[0], c_out};
  expect.insert(expect.end(), p.geo.out.begin(), p.geo.out.end());
  if (expect != p.y_dims) return unsupported("node %s: Y does not fit the geometry", label.c_str());
  const int n = static_cast<int>(rank) - 2;
  for (int d = 0; d < n; ++d) {
    const size_t t = static_cast<size_t>(3 - n + d), du = static_cast<size_t>(d);
    p.win.in[t] = p.x_dims[du + 2];
    p.win.out[t] = p.geo.out[du];
    p.win.k[t] = p.geo.kernel[du];
    p.win.stride[t] = p.geo.strides[du];
    p.win.dilation[t] = p.geo.dilations[du];
    p.win.pad[t] = p.geo.pad_begin(d);
  }
  // X's zero point: one value of X's dtype.
  if (const ir::Value* xz = node.num_inputs() > 2 ? node.input(2) : nullptr) {
    if (xz->dtype() != p.x_dtype)
      return unsupported("node %s: x_zero_point dtype %s is not X's", label.c_str(), dtype_name(xz->dtype()));
    if (!xz->shape().has_rank() || !xz->shape().is_static() || num_elements(xz->shape().static_dims()) != 1)
      return unsupported("node %s: x_zero_point %s: a scalar only", label.c_str(), xz->type().to_string().c_str());
    if (xz->has_initializer()) p.x_zero_point = xz->initializer();
  }
  // W's zero point: a constant scalar or one per output channel.
  if (const ir::Value* wz = node.num_inputs() > 3 ? node.input(3) : nullptr) {
    if (!wz->has_initializer()) return unsupported("node %s: w_zero_point is not constant", label.c_str());
    const Tensor* t = wz->initializer();
    if (t->dtype() != p.w_dtype)
      return unsupported("node %s: w_zero_point dtype %s is not W's", label.c_str(), dtype_name(t->dtype()));
    const bool scalar = t->num_elements() == 1 && t->rank() <= 1;
    const bool per_channel = t->rank() == 1 && t->dim(0) == c_out;
    if (!scalar && !per_channel)
      return unsupported("node %s: w_zero_point %s: a scalar or one per output channel (M = %lld) only",
                         label.c_str(), t->description().c_str(), static_cast<long long>(c_out));
    p.w_zero_point = t;
  }
  return p;
}

int32_t weight_zero_point(const ConvIntegerPlan& p, int64_t m) {
  if (!p.w_zero_point) return 0;
  return x8_at(p.w_dtype, p.w_zero_point->raw_data(), p.w_zero_point->num_elements() == 1 ? 0 : m);
}

// What W' subtracts from output channel m's weights: w_zp[m] when every W - w_zp fits int8,
// else s (see the file comment); and max_m sum |W'[m]|, which bounds the sums. One pass over
// W, nothing allocated: `applicable` calls it.
struct WeightShift {
  bool centred = true;  // W' = W - w_zp
  int64_t max_abs_sum = 0;
};

WeightShift weight_shift(const ConvIntegerPlan& p) {
  const int64_t c_out = p.w_dims[0], per_channel = p.w->num_elements() / c_out;
  WeightShift ws;
  for (int64_t m = 0; m < c_out && ws.centred; ++m) {
    const int32_t zp = weight_zero_point(p, m);
    for (int64_t i = m * per_channel; i < (m + 1) * per_channel && ws.centred; ++i) {
      const int32_t v = x8_at(p.w_dtype, p.w->raw_data(), i) - zp;
      ws.centred = v >= -128 && v <= 127;
    }
  }
  const int32_t s = p.w_dtype == DataType::kUInt8 ? 128 : 0;
  for (int64_t m = 0; m < c_out; ++m) {
    const int32_t shift = ws.centred ? weight_zero_point(p, m) : s;
    int64_t sum = 0;
    for (int64_t i = m * per_channel; i < (m + 1) * per_channel; ++i) {
      const int32_t v = x8_at(p.w_dtype, p.w->raw_data(), i) - shift;
      sum += v < 0 ? -v : v;
    }
    ws.max_abs_sum = std::max(ws.max_abs_sum, sum);
  }
  return ws;
}

// Whether no sum can pass 2^24, exact through float32 (oneDNN's int8 epilogue): bytes of
// magnitude <= 255 (after oneDNN's +128 shift of an int8 source) times max_m sum |W'[m]|.
bool sums_fit_float(const WeightShift& shift) { return 255 * shift.max_abs_sum <= (int64_t{1} << 24); }

// When sums may pass 2^24, only brgconv keeps them exact, and only on a uint8 source (measured;
// oneDNN 2.6 offers it for 2-D convolutions of one group): refused with the bound otherwise,
// without creating a primitive (`applicable`). prepare() then also requires oneDNN to pick it.
Status require_exact_sums(const ir::Node& node, const ConvIntegerPlan& p, const WeightShift& shift) {
  if (sums_fit_float(shift)) return ok_status();
  if (p.x_dtype != DataType::kUInt8 || p.x_dims.size() != 4 || p.group != 1)
    return unsupported("node %s: sums may pass 2^24 (255 x %lld), exact in oneDNN's brgconv only, which takes "
                       "a uint8 X in a 2-D convolution of one group",
                       node.label().c_str(), static_cast<long long>(shift.max_abs_sum));
  return ok_status();
}

// W', z and V's per-tap weight sums (see the file comment).
void pack_weights(ConvIntegerPlan& p, const WeightShift& shift) {
  const int64_t c_out = p.w_dims[0], per_channel = p.w->num_elements() / c_out;
  const int32_t s = p.w_dtype == DataType::kUInt8 ? 128 : 0;
  const int64_t cin_g = p.w_dims[1], k_size = per_channel / cin_g;
  p.w_packed.resize(static_cast<size_t>(p.w->num_elements()));
  p.w_sums.assign(static_cast<size_t>(c_out * k_size), 0);
  std::vector<int32_t> z(static_cast<size_t>(c_out));
  bool any = false;
  for (int64_t m = 0; m < c_out; ++m) {
    const int32_t zp = weight_zero_point(p, m), sub = shift.centred ? zp : s;
    for (int64_t i = m * per_channel; i < (m + 1) * per_channel; ++i) {
      const int32_t v = x8_at(p.w_dtype, p.w->raw_data(), i) - sub;
      p.w_packed[static_cast<size_t>(i)] = static_cast<int8_t>(v);
      p.w_sums[static_cast<size_t>(m * k_size + (i - m * per_channel) % k_size)] += v;
    }
    z[static_cast<size_t>(m)] = zp - sub;
    any = any || zp != sub;
  }
  if (any) p.z = std::move(z);
  p.w_totals.assign(static_cast<size_t>(c_out), 0);
  for (int64_t m = 0; m < c_out; ++m)
    for (int64_t k = 0; k < k_size; ++k)
      p.w_totals[static_cast<size_t>(m)] += static_cast<uint32_t>(p.w_sums[static_cast<size_t>(m * k_size + k)]);
}

class OnednnConvIntegerKernel final : public Kernel {
 public:
  OnednnConvIntegerKernel(ConvIntegerPlan p, const ops::KernelFn* ref) : reference(ref), plan(std::move(p)) {}
  // Packs W', picks an exact oneDNN implementation and plans the workspace (prepare_planned).
  Status init(const ir::Node& node);
  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return impl; }

  // Y -= x_zp * V (see the file comment).
  void subtract_zero_point_term(int32_t x_zp, int32_t* y) const;
  // Y -= z[m] * R, with `ws` holding correction_bytes.
  void subtract_weight_zero_point_term(const void* x, int32_t x_zp, int32_t* y, char* ws) const;

  const ops::KernelFn* reference = nullptr;
  ConvIntegerPlan plan;
  std::string impl;
  dnnl::convolution_forward conv;
  onednn::LayoutBridge layouts;
  memory weights;
  std::shared_ptr<void> weights_buffer;
  size_t correction_bytes = 0, window_sums_offset = 0;
};

Status OnednnConvIntegerKernel::run(ops::KernelContext& ctx) const {
  const ir::Node& node = ctx.node();
  const Tensor* x = ctx.input(0);
  const Tensor* w = ctx.input(1);
  const Tensor* xz = node.num_inputs() > 2 ? ctx.input(2) : nullptr;
  const Tensor* wz = node.num_inputs() > 3 ? ctx.input(3) : nullptr;
  const bool as_prepared =
      x && x->dtype() == plan.x_dtype && x->dims() == plan.x_dims && w && w->raw_data() == plan.w->raw_data() &&
      (node.num_inputs() > 2 && node.input(2) ? xz && xz->dtype() == plan.x_dtype && xz->num_elements() == 1 : !xz) &&
      (!plan.x_zero_point || xz->raw_data() == plan.x_zero_point->raw_data()) &&
      (plan.w_zero_point ? wz && wz->raw_data() == plan.w_zero_point->raw_data() : !wz);
  if (!as_prepared) return (*reference)(ctx);
  const int32_t x_zp = xz ? x8_at(xz->dtype(), xz->raw_data(), 0) : 0;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt32, plan.y_dims, TensorInit::kUninitialized));
  const size_t ws_bytes = std::max(layouts.workspace_bytes, correction_bytes);
  char* ws = static_cast<char*>(onednn::thread_workspace(ws_bytes));
  if (!ws && ws_bytes > 0)
    return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(), ws_bytes);
  try {
    layouts.run(conv, onednn::Args{{DNNL_ARG_WEIGHTS, &weights}}, ws, x->raw_data(), y->raw_data(),
                onednn::thread_stream());
  } catch (const dnnl::error& e) {
    return internal_error("node %s: oneDNN int8 convolution failed: %s", node.label().c_str(), e.what());
  }
  if (x_zp != 0) subtract_zero_point_term(x_zp, y->data<int32_t>());
  // The workspace is free again: oneDNN is done with it.
  if (!plan.z.empty()) subtract_weight_zero_point_term(x->raw_data(), x_zp, y->data<int32_t>(), ws);
  return ok_status();
}

// Calls fn(k, i) for each window position of output (od, oh, ow) inside X: k the flat kernel
// position, i the flat input position.
template <typename Fn>
inline void for_each_tap(const Window3& w, int64_t od, int64_t oh, int64_t ow, Fn&& fn) {
  for (int64_t kd = 0; kd < w.k[0]; ++kd) {
    const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dilation[0];
    if (id < 0 || id >= w.in[0]) continue;
    for (int64_t kh = 0; kh < w.k[1]; ++kh) {
      const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dilation[1];
      if (ih < 0 || ih >= w.in[1]) continue;
      for (int64_t kw = 0; kw < w.k[2]; ++kw) {
        const int64_t iw = ow * w.stride[2] - w.pad[2] + kw * w.dilation[2];
        if (iw >= 0 && iw < w.in[2]) fn((kd * w.k[1] + kh) * w.k[2] + kw, (id * w.in[1] + ih) * w.in[2] + iw);
      }
    }
  }
}

// The outputs whose window lies inside X along dim d (all taps in bounds): [lo, hi).
void inner_range(const Window3& w, int d, int64_t* lo, int64_t* hi) {
  const int64_t span = (w.k[d] - 1) * w.dilation[d];
  *lo = std::min(w.out[d], (w.pad[d] + w.stride[d] - 1) / w.stride[d]);
  const int64_t last = w.in[d] - 1 - span + w.pad[d];  // o * stride <= last
  *hi = last < 0 ? 0 : std::min(w.out[d], last / w.stride[d] + 1);
  if (*hi < *lo) *hi = *lo;
}

void OnednnConvIntegerKernel::subtract_zero_point_term(int32_t x_zp, int32_t* y) const {
  const Window3& w = plan.win;
  const int64_t batch = plan.x_dims[0], c_out = plan.w_dims[0];
  const int64_t k_size = w.k[0] * w.k[1] * w.k[2], out_size = w.out[0] * w.out[1] * w.out[2];
  const uint32_t zp = static_cast<uint32_t>(x_zp);
  int64_t lo[3], hi[3];
  for (int d = 0; d < 3; ++d) inner_range(w, d, &lo[d], &hi[d]);
  // Per output channel and row: V[m, o] once, for every image of the batch. Inside X (most
  // outputs) V is the sum of all of W'[m]; only the border's windows are summed tap by tap.
  parallel_for(0, c_out * w.out[0] * w.out[1], 1, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t oh = row % w.out[1], od = row / w.out[1] % w.out[0], m = row / (w.out[1] * w.out[0]);
      const int32_t* sums = plan.w_sums.data() + m * k_size;
      const bool inner_row = od >= lo[0] && od < hi[0] && oh >= lo[1] && oh < hi[1];
      const int64_t row_start = (od * w.out[1] + oh) * w.out[2];
      for (int64_t n = 0; n < batch; ++n) {
        uint32_t* ys = reinterpret_cast<uint32_t*>(y) + (n * c_out + m) * out_size + row_start;
        int64_t ow = 0;
        while (ow < w.out[2]) {
          if (inner_row && ow == lo[2] && lo[2] < hi[2]) {
            const uint32_t full = zp * plan.w_totals[static_cast<size_t>(m)];
            for (; ow < hi[2]; ++ow) ys[ow] -= full;
            continue;
          }
          uint32_t v = 0;
          for_each_tap(w, od, oh, ow, [&](int64_t k, int64_t) { v += static_cast<uint32_t>(sums[k]); });
          ys[ow] -= zp * v;
          ++ow;
        }
      }
    }
  });
}

void OnednnConvIntegerKernel::subtract_weight_zero_point_term(const void* x, int32_t x_zp, int32_t* y,
                                                              char* ws) const {
  const ConvIntegerPlan& p = plan;
  const Window3& w = p.win;
  const int64_t batch = p.x_dims[0], c_out = p.w_dims[0], groups = p.group;
  const int64_t cin_g = p.x_dims[1] / groups, cout_g = c_out / groups;
  const int64_t in_size = w.in[0] * w.in[1] * w.in[2], out_size = w.out[0] * w.out[1] * w.out[2];
  // 1. Channel sums per group, S[n, g, i] = sum_c X[n, g * cin_g + c, i] - cin_g * x_zp (wrapping).
  uint32_t* sums = reinterpret_cast<uint32_t*>(ws);
  const bool u8 = p.x_dtype == DataType::kUInt8;
  const uint32_t centre = static_cast<uint32_t>(cin_g) * static_cast<uint32_t>(x_zp);
  parallel_for(0, batch * groups, 1, [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      uint32_t* s = sums + ng * in_size;
      std::fill(s, s + in_size, 0u - centre);
      for (int64_t c = 0; c < cin_g; ++c) {
        const int64_t base = (ng * cin_g + c) * in_size;  // (n * C + g * cin_g + c) * in_size
        if (u8) {
          const uint8_t* row = static_cast<const uint8_t*>(x) + base;
          for (int64_t i = 0; i < in_size; ++i) s[i] += row[i];
        } else {
          const int8_t* row = static_cast<const int8_t*>(x) + base;
          for (int64_t i = 0; i < in_size; ++i) s[i] += static_cast<uint32_t>(static_cast<int32_t>(row[i]));
        }
      }
    }
  });
  // 2. Window sums R[n, g, o] over the window positions inside X.
  uint32_t* r = reinterpret_cast<uint32_t*>(ws + window_sums_offset);
  parallel_for(0, batch * groups * w.out[0] * w.out[1], 1, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t oh = row % w.out[1], od = row / w.out[1] % w.out[0], ng = row / (w.out[1] * w.out[0]);
      const uint32_t* s = sums + ng * in_size;
      uint32_t* out = r + row * w.out[2];
      for (int64_t ow = 0; ow < w.out[2]; ++ow) {
        uint32_t acc = 0;
        for_each_tap(w, od, oh, ow, [&](int64_t, int64_t i) { acc += s[i]; });
        out[ow] = acc;
      }
    }
  });
  // 3. Y[n, m, o] -= z[m] * R[n, g(m), o].
  const uint32_t* z = reinterpret_cast<const uint32_t*>(p.z.data());
  parallel_for(0, batch * c_out, 1, [&](int64_t b, int64_t e) {
    for (int64_t nm = b; nm < e; ++nm) {
      const int64_t m = nm % c_out, n = nm / c_out;
      const uint32_t zm = z[m];
      if (zm == 0) continue;
      const uint32_t* rs = r + (n * groups + m / cout_g) * out_size;
      uint32_t* ys = reinterpret_cast<uint32_t*>(y) + nm * out_size;
      for (int64_t o = 0; o < out_size; ++o) ys[o] -= zm * rs[o];
    }
  });
}

Status OnednnConvIntegerKernel::init(const ir::Node& node) {
  ConvIntegerPlan& p = plan;
  const WeightShift shift = weight_shift(p);
  KILN_RETURN_IF_ERROR(require_exact_sums(node, p, shift));
  pack_weights(p, shift);
  const bool any_exact = sums_fit_float(shift);
  const int rank = static_cast<int>(p.x_dims.size());
  try {
    onednn::CreationThreadsScope threads;
    const onednn::ConvWindow cw = onednn::conv_window(p.geo);
    const memory::dims w_dims = onednn::grouped_weight_dims(p.w_dims, p.group);
    const auto s8 = memory::data_type::s8, s32 = memory::data_type::s32;
    const auto x8 = p.x_dtype == DataType::kUInt8 ? memory::data_type::u8 : s8;
    layouts.user_src = memory::desc(onednn::to_dims(p.x_dims), x8, onednn::plain_tag(rank));
    layouts.user_dst = memory::desc(onednn::to_dims(p.y_dims), s32, onednn::plain_tag(rank));
    const memory::desc user_w(w_dims, s8, onednn::plain_tag(static_cast<int>(w_dims.size())));
    const memory::desc any_src(onednn::to_dims(p.x_dims), x8, memory::format_tag::any);
    const memory::desc any_dst(onednn::to_dims(p.y_dims), s32, memory::format_tag::any);
    const memory::desc any_w(w_dims, s8, memory::format_tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                         any_src, any_w, any_dst, cw.strides, cw.dilations, cw.pad_l, cw.pad_r);
    // oneDNN's implementations in its order of preference: the first exact one that is not its
    // reference (no fast kernel).
    dnnl::convolution_forward::primitive_desc pd(desc, attr, onednn::cpu_engine());
    std::string offered;
    for (;;) {
      const std::string name = onednn::implementation_name(pd);
      const bool fast = name.rfind("onednn:ref", 0) != 0;
      if (fast && (any_exact || name.rfind("onednn:brgconv", 0) == 0)) {
        impl = name;
        break;
      }
      offered += (offered.empty() ? "" : ", ") + name;
      if (!pd.next_impl()) break;
    }
    if (impl.empty()) {
      if (!any_exact)
        return unsupported("node %s: sums may pass 2^24 (255 x %lld) and oneDNN offers no brgconv, only %s, "
                           "which round them through float32",
                           node.label().c_str(), static_cast<long long>(shift.max_abs_sum), offered.c_str());
      return unsupported("node %s: oneDNN offers only %s", node.label().c_str(), offered.c_str());
    }
    conv = dnnl::convolution_forward(pd);
    layouts.plan(pd.src_desc(), pd.dst_desc(), pd.scratchpad_desc().get_size());
    weights_buffer = onednn::pack_shared_here(user_w, p.w_packed.data(), pd.weights_desc());
    weights = memory(pd.weights_desc(), onednn::cpu_engine(), weights_buffer.get());
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no int8 convolution for it: %s", node.label().c_str(), e.what());
  }
  if (!p.z.empty()) {
    const Window3& w = p.win;
    const int64_t groups_total = p.x_dims[0] * p.group;
    const size_t sums = static_cast<size_t>(groups_total * w.in[0] * w.in[1] * w.in[2]) * sizeof(uint32_t);
    window_sums_offset = onednn::align64(sums);
    correction_bytes =
        window_sums_offset + static_cast<size_t>(groups_total * w.out[0] * w.out[1] * w.out[2]) * sizeof(uint32_t);
  }
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_conv_integer(const ir::Node& node) {
  return onednn::prepare_planned<OnednnConvIntegerKernel>(node, plan_conv_integer);
}

Status conv_integer_applicable(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(ConvIntegerPlan p, plan_conv_integer(node));
  return require_exact_sums(node, p, weight_shift(p));
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "ConvInteger",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = conv_integer_applicable,
                                    .prepare = prepare_conv_integer}));

}  // namespace kiln::kernels
