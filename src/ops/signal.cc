// Signal processing ops: DFT (opset 17 and 20), STFT, the Hann, Hamming and Blackman
// windows and MelWeightMatrix. Transforms are computed in double precision: a radix-2
// FFT for power-of-two lengths, a direct DFT with an exact twiddle table otherwise.
#include <cmath>
#include <complex>
#include <numbers>
#include <optional>
#include <vector>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

using Complex = std::complex<double>;

// Lengths beyond this are refused: a transform of 2^31 points is not a reference-kernel job,
// and the limit keeps every index computation in range.
constexpr int64_t kMaxTransformLength = int64_t{1} << 31;

bool is_signal_float(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

Expected<int64_t> scalar_int(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.dtype() != DataType::kInt32 && t.dtype() != DataType::kInt64)
    return invalid_argument("node %s: %s must be int32 or int64, got %s", node.label().c_str(),
                            what, dtype_name(t.dtype()));
  if (t.num_elements() != 1)
    return invalid_argument("node %s: %s must be a scalar, got shape %s", node.label().c_str(),
                            what, dims_to_string(t.dims()).c_str());
  return t.element_as_int64(0);
}

Expected<double> scalar_float(const ir::Node& node, const Tensor& t, const char* what) {
  if (t.num_elements() != 1 || !(is_signal_float(t.dtype()) || dtype_is_integer(t.dtype())))
    return invalid_argument("node %s: %s must be a numeric scalar, got %s", node.label().c_str(),
                            what, t.description().c_str());
  return t.element_as_double(0);
}

// ---- transforms ----------------------------------------------------------------------

// A plan for transforms of one length and direction, reused along every line.
class Transform {
 public:
  Transform(int64_t n, bool inverse) : n_(n) {
    const double sign = inverse ? 1.0 : -1.0;
    twiddle_.resize(static_cast<size_t>(n));
    // Angles from the exact index k (k < n), so twiddles stay accurate for long lengths.
    for (int64_t k = 0; k < n; ++k) {
      double a = sign * 2.0 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n);
      twiddle_[static_cast<size_t>(k)] = Complex(std::cos(a), std::sin(a));
    }
    pow2_ = n > 0 && (n & (n - 1)) == 0;
  }

  // out[k] = sum_j in[j] * exp(sign * 2 pi i j k / n); no normalisation.
  void run(const std::vector<Complex>& in, std::vector<Complex>& out) const {
    out.assign(static_cast<size_t>(n_), Complex());
    if (pow2_) return fft(in, out);
    for (int64_t k = 0; k < n_; ++k) {
      Complex acc;
      int64_t idx = 0;  // (j * k) mod n, kept incrementally
      for (int64_t j = 0; j < n_; ++j) {
        acc += in[static_cast<size_t>(j)] * twiddle_[static_cast<size_t>(idx)];
        idx += k;
        if (idx >= n_) idx -= n_;
      }
      out[static_cast<size_t>(k)] = acc;
    }
  }

 private:
  void fft(const std::vector<Complex>& in, std::vector<Complex>& out) const {
    const size_t n = static_cast<size_t>(n_);
    for (size_t i = 0, j = 0; i < n; ++i) {  // bit-reversed copy
      out[j] = in[i];
      for (size_t bit = n >> 1; bit; bit >>= 1) {
        j ^= bit;
        if (j & bit) break;
      }
    }
    for (size_t len = 2; len <= n; len <<= 1) {
      const size_t step = n / len;
      for (size_t s = 0; s < n; s += len)
        for (size_t k = 0; k < len / 2; ++k) {
          Complex t = out[s + k + len / 2] * twiddle_[k * step];
          out[s + k + len / 2] = out[s + k] - t;
          out[s + k] += t;
        }
    }
  }

  int64_t n_;
  bool pow2_ = false;
  std::vector<Complex> twiddle_;
};

struct DftParams {
  int axis = 1;        // normalised, in [0, rank - 2]
  int64_t length = 0;  // dft_length
  bool inverse = false;
  bool onesided = false;
};

// Output dims of a DFT of `in_dims` (last dim 1 or 2) with the given parameters.
std::vector<int64_t> dft_output_dims(const std::vector<int64_t>& in_dims, const DftParams& p) {
  std::vector<int64_t> out = in_dims;
  if (p.inverse && p.onesided) {
    out[static_cast<size_t>(p.axis)] = p.length;  // a real signal from a half spectrum
    out.back() = 1;
  } else {
    out[static_cast<size_t>(p.axis)] = p.onesided ? p.length / 2 + 1 : p.length;
    out.back() = 2;
  }
  return out;
}

// Reads the DFT parameters of the node for an input of `rank`; `signal_dim` is the input's
// extent along the axis once known (-1 when not), `length_input` / `axis_input` the values
// of the dft_length and (opset 20) axis inputs when known.
Expected<DftParams> dft_params(const ir::Node& node, int rank, int64_t signal_dim,
                               std::optional<int64_t> length_input,
                               std::optional<int64_t> axis_input) {
  DftParams p;
  if (rank < 2)
    return invalid_argument("node %s: input rank %d; DFT needs [batch, ..., 1 or 2]",
                            node.label().c_str(), rank);
  int64_t axis = node.opset() >= 20 ? axis_input.value_or(-2) : node.attr_int("axis", 1);
  // The last dim holds the real/imaginary parts, so the signal axes are [0, rank - 2].
  if (axis < -rank || axis >= rank - 1 || axis == -1)
    return invalid_argument(
        "node %s: axis %lld is out of range for input rank %d (the last dim holds the "
        "real and imaginary parts)",
        node.label().c_str(), static_cast<long long>(axis), rank);
  p.axis = static_cast<int>(axis < 0 ? axis + rank : axis);
  p.inverse = node.attr_int("inverse", 0) != 0;
  p.onesided = node.attr_int("onesided", 0) != 0;
  if (length_input) {
    p.length = *length_input;
    if (p.length <= 0 || p.length > kMaxTransformLength)
      return invalid_argument("node %s: dft_length %lld must be in [1, 2^31]", node.label().c_str(),
                              static_cast<long long>(p.length));
  } else if (signal_dim >= 0) {
    // A half spectrum of m bins is the transform of 2 * (m - 1) real samples.
    p.length = p.inverse && p.onesided ? 2 * (signal_dim - 1) : signal_dim;
    if (p.length <= 0)
      return invalid_argument(
          "node %s: the signal has %lld points along axis %d; the transform would be "
          "empty",
          node.label().c_str(), static_cast<long long>(signal_dim), p.axis);
  } else {
    p.length = -1;
  }
  return p;
}

// One DFT along `p.axis` of `x` ([..., 1 or 2]). The result has x's float dtype.
Expected<Tensor> dft(const ir::Node& node, const Tensor& x, const DftParams& p) {
  if (!is_signal_float(x.dtype()))
    return invalid_argument("node %s: input must be a float tensor, got %s", node.label().c_str(),
                            dtype_name(x.dtype()));
  const std::vector<int64_t>& dims = x.dims();
  const int64_t parts = dims.back();
  if (parts != 1 && parts != 2)
    return invalid_argument(
        "node %s: the last dim of the input must be 1 (real) or 2 (complex), got %lld",
        node.label().c_str(), static_cast<long long>(parts));
  std::vector<int64_t> out_dims = dft_output_dims(dims, p);
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::allocate(x.dtype(), out_dims), "node %s",
                        node.label().c_str());
  if (y.num_elements() == 0 || x.num_elements() == 0) return y;

  const size_t ax = static_cast<size_t>(p.axis);
  const int64_t n_in = dims[ax];
  const int64_t n_out = out_dims[ax];
  int64_t outer = 1, inner = 1;  // lines are indexed by (outer, inner) around the axis
  for (size_t d = 0; d < ax; ++d) outer *= dims[d];
  for (size_t d = ax + 1; d + 1 < dims.size(); ++d) inner *= dims[d];
  const int64_t parts_out = out_dims.back();

  Transform plan(p.length, p.inverse);
  const double scale = p.inverse ? 1.0 / static_cast<double>(p.length) : 1.0;
  std::vector<Complex> line(static_cast<size_t>(p.length)), result;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::fill(line.begin(), line.end(), Complex());
      auto in_at = [&](int64_t j) {
        int64_t base = ((o * n_in + j) * inner + i) * parts;
        return Complex(x.element_as_double(base), parts == 2 ? x.element_as_double(base + 1) : 0.0);
      };
      if (p.inverse && p.onesided) {
        // Rebuild the full Hermitian spectrum from bins 0 .. length/2 (zero past the input),
        // as numpy.fft.irfft does: the imaginary parts of bin 0 and of the Nyquist bin drop.
        const int64_t half = p.length / 2 + 1;
        for (int64_t k = 0; k < half && k < n_in; ++k) line[static_cast<size_t>(k)] = in_at(k);
        line[0] = Complex(line[0].real(), 0.0);
        if (p.length % 2 == 0) {
          Complex& nyq = line[static_cast<size_t>(p.length / 2)];
          nyq = Complex(nyq.real(), 0.0);
        }
        for (int64_t k = half; k < p.length; ++k)
          line[static_cast<size_t>(k)] = std::conj(line[static_cast<size_t>(p.length - k)]);
      } else {
        for (int64_t j = 0; j < n_in && j < p.length; ++j) line[static_cast<size_t>(j)] = in_at(j);
      }
      plan.run(line, result);
      for (int64_t k = 0; k < n_out; ++k) {
        int64_t base = ((o * n_out + k) * inner + i) * parts_out;
        Complex v = result[static_cast<size_t>(k)] * scale;
        store_double(y, base, v.real());
        if (parts_out == 2) store_double(y, base + 1, v.imag());
      }
    }
  }
  return y;
}

Status dft_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  std::optional<int64_t> length, axis;
  if (ctx.has_input(1)) {
    KILN_ASSIGN_OR_RETURN(length, scalar_int(node, *ctx.input(1), "dft_length"));
  }
  if (node.opset() >= 20 && ctx.has_input(2)) {
    KILN_ASSIGN_OR_RETURN(axis, scalar_int(node, *ctx.input(2), "axis"));
  }
  if (x.rank() < 2)
    return invalid_argument("node %s: input %s; DFT needs [batch, ..., 1 or 2]",
                            node.label().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(DftParams p, dft_params(node, x.rank(), -1, length, axis));
  if (p.length < 0) {
    int64_t n = x.dim(p.axis);
    KILN_ASSIGN_OR_RETURN(p, dft_params(node, x.rank(), n, length, axis));
  }
  KILN_ASSIGN_OR_RETURN(Tensor y, dft(node, x, p));
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status infer_dft(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& t = ctx.input_type(0);
  if (t.dtype != DataType::kUndefined && !is_signal_float(t.dtype))
    return invalid_argument("node %s: input must be a float tensor, got %s",
                            ctx.node().label().c_str(), dtype_name(t.dtype));
  if (!t.shape.has_rank()) {
    ctx.set_output(0, t.dtype, Shape());
    return ok_status();
  }
  const int rank = t.shape.rank();
  std::optional<int64_t> length, axis;
  bool length_known = !ctx.has_input(1), axis_known = ctx.node().opset() < 20 || !ctx.has_input(2);
  if (ctx.has_input(1)) {
    if (auto v = constant_ints(ctx, 1); v && v->size() == 1) {
      length = (*v)[0];
      length_known = true;
    }
  }
  if (ctx.node().opset() >= 20 && ctx.has_input(2)) {
    if (auto v = constant_ints(ctx, 2); v && v->size() == 1) {
      axis = (*v)[0];
      axis_known = true;
    }
  }
  if (!axis_known) {
    ctx.set_output(0, t.dtype, unknown_dims(rank));
    return ok_status();
  }
  KILN_ASSIGN_OR_RETURN(DftParams p, dft_params(ctx.node(), rank, -1, length, axis));
  Shape out = t.shape;
  const Dim& sig = t.shape[p.axis];
  if (length_known && p.length < 0 && sig.is_static()) {
    KILN_ASSIGN_OR_RETURN(p, dft_params(ctx.node(), rank, sig.value, length, axis));
  }
  const Dim& last = t.shape[rank - 1];
  if (last.is_static() && last.value != 1 && last.value != 2)
    return invalid_argument(
        "node %s: the last dim of the input must be 1 (real) or 2 (complex), got %lld",
        ctx.node().label().c_str(), static_cast<long long>(last.value));
  if (p.length > 0) {
    out[p.axis] = p.inverse && p.onesided ? p.length : (p.onesided ? p.length / 2 + 1 : p.length);
  } else {
    out[p.axis] = Dim();
  }
  out[rank - 1] = p.inverse && p.onesided ? 1 : 2;
  ctx.set_output(0, t.dtype, out);
  return ok_status();
}

// ---- STFT ----------------------------------------------------------------------------

struct StftParams {
  int64_t step = 0, frame_length = 0, frames = 0, bins = 0;
};

Expected<StftParams> stft_params(const ir::Node& node, int64_t signal_length, int64_t step,
                                 std::optional<int64_t> window_length,
                                 std::optional<int64_t> frame_length, bool onesided) {
  StftParams p;
  if (step <= 0)
    return invalid_argument("node %s: frame_step %lld must be positive", node.label().c_str(),
                            static_cast<long long>(step));
  p.step = step;
  if (frame_length && window_length && *frame_length != *window_length)
    return invalid_argument("node %s: frame_length %lld differs from the window length %lld",
                            node.label().c_str(), static_cast<long long>(*frame_length),
                            static_cast<long long>(*window_length));
  if (!frame_length && !window_length)
    return invalid_argument("node %s: STFT needs a window or a frame_length", node.label().c_str());
  p.frame_length = frame_length ? *frame_length : *window_length;
  if (p.frame_length <= 0 || p.frame_length > kMaxTransformLength)
    return invalid_argument("node %s: frame length %lld must be in [1, 2^31]", node.label().c_str(),
                            static_cast<long long>(p.frame_length));
  if (signal_length >= 0) {
    if (p.frame_length > signal_length)
      return invalid_argument("node %s: frame length %lld is longer than the signal (%lld)",
                              node.label().c_str(), static_cast<long long>(p.frame_length),
                              static_cast<long long>(signal_length));
    p.frames = 1 + (signal_length - p.frame_length) / step;
  } else {
    p.frames = -1;
  }
  p.bins = onesided ? p.frame_length / 2 + 1 : p.frame_length;
  return p;
}

Status stft_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!is_signal_float(x.dtype()) || x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    return invalid_argument("node %s: signal must be float [batch, length, 1 or 2], got %s",
                            node.label().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(int64_t step, scalar_int(node, *ctx.input(1), "frame_step"));
  const Tensor* window = ctx.input(2);
  std::optional<int64_t> window_length, frame_length;
  if (window) {
    if (window->rank() != 1 || !is_signal_float(window->dtype()))
      return invalid_argument("node %s: window must be a 1-D float tensor, got %s",
                              node.label().c_str(), window->description().c_str());
    window_length = window->dim(0);
  }
  if (ctx.has_input(3)) {
    KILN_ASSIGN_OR_RETURN(frame_length, scalar_int(node, *ctx.input(3), "frame_length"));
  }
  const bool onesided = node.attr_int("onesided", 1) != 0;
  KILN_ASSIGN_OR_RETURN(StftParams p,
                        stft_params(node, x.dim(1), step, window_length, frame_length, onesided));
  const int64_t batch = x.dim(0), parts = x.dim(2);
  KILN_ASSIGN_OR_RETURN(Tensor y, Tensor::allocate(x.dtype(), {batch, p.frames, p.bins, 2}),
                        "node %s", node.label().c_str());
  Transform plan(p.frame_length, false);
  std::vector<Complex> frame(static_cast<size_t>(p.frame_length)), result;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < p.frames; ++f) {
      for (int64_t j = 0; j < p.frame_length; ++j) {
        int64_t base = (b * x.dim(1) + f * p.step + j) * parts;
        double w = window ? window->element_as_double(j) : 1.0;
        frame[static_cast<size_t>(j)] =
            Complex(x.element_as_double(base), parts == 2 ? x.element_as_double(base + 1) : 0.0) *
            w;
      }
      plan.run(frame, result);
      for (int64_t k = 0; k < p.bins; ++k) {
        int64_t base = ((b * p.frames + f) * p.bins + k) * 2;
        store_double(y, base, result[static_cast<size_t>(k)].real());
        store_double(y, base + 1, result[static_cast<size_t>(k)].imag());
      }
    }
  }
  ctx.set_output(0, std::move(y));
  return ok_status();
}

Status infer_stft(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& t = ctx.input_type(0);
  if (t.dtype != DataType::kUndefined && !is_signal_float(t.dtype))
    return invalid_argument("node %s: signal must be a float tensor, got %s",
                            ctx.node().label().c_str(), dtype_name(t.dtype));
  if (t.shape.has_rank() && t.shape.rank() != 3)
    return invalid_argument("node %s: signal must be [batch, length, 1 or 2], got %s",
                            ctx.node().label().c_str(), t.shape.to_string().c_str());
  Shape out = unknown_dims(4);
  out[3] = 2;
  if (t.shape.has_rank()) out[0] = t.shape[0];
  std::optional<int64_t> window_length, frame_length, step;
  if (ctx.has_input(2)) {
    const Shape& ws = ctx.input_type(2).shape;
    if (ws.has_rank() && ws.rank() == 1 && ws[0].is_static()) window_length = ws[0].value;
  }
  if (ctx.has_input(3)) {
    if (auto v = constant_ints(ctx, 3); v && v->size() == 1) frame_length = (*v)[0];
  }
  if (auto v = constant_ints(ctx, 1); v && v->size() == 1) step = (*v)[0];
  const bool length_known = ctx.has_input(3) ? frame_length.has_value() : window_length.has_value();
  if (step && length_known) {
    int64_t signal = t.shape.has_rank() && t.shape[1].is_static() ? t.shape[1].value : -1;
    KILN_ASSIGN_OR_RETURN(StftParams p,
                          stft_params(ctx.node(), signal, *step, window_length, frame_length,
                                      ctx.node().attr_int("onesided", 1) != 0));
    if (p.frames >= 0) out[1] = p.frames;
    out[2] = p.bins;
  }
  ctx.set_output(0, t.dtype, out);
  return ok_status();
}

// ---- windows -------------------------------------------------------------------------

Expected<DataType> output_datatype(const ir::Node& node) {
  int64_t v = node.attr_int("output_datatype", static_cast<int64_t>(DataType::kFloat32));
  DataType t = static_cast<DataType>(v);
  if (!dtype_is_valid(static_cast<int32_t>(v)) || !(is_signal_float(t) || dtype_is_integer(t)))
    return invalid_argument("node %s: output_datatype %lld is not a numeric type",
                            node.label().c_str(), static_cast<long long>(v));
  return t;
}

// Generalised cosine window: sum_k a_k cos(2 pi k n / N) with alternating signs.
template <size_t K>
Status window_kernel(KernelContext& ctx, const double (&a)[K]) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(DataType dtype, output_datatype(node));
  KILN_ASSIGN_OR_RETURN(int64_t size, scalar_int(node, *ctx.input(0), "size"));
  if (size < 0)
    return invalid_argument("node %s: size %lld is negative", node.label().c_str(),
                            (long long)size);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype, {size}));
  const bool periodic = node.attr_int("periodic", 1) != 0;
  const int64_t denom = periodic ? size : size - 1;
  for (int64_t n = 0; n < size; ++n) {
    // A symmetric window of one point is [1], as numpy.hanning(1) gives.
    double v = 1.0;
    if (denom > 0) {
      v = 0.0;
      for (size_t k = 0; k < K; ++k) {
        double c = std::cos(2.0 * std::numbers::pi * static_cast<double>(k) *
                            static_cast<double>(n) / static_cast<double>(denom));
        v += (k % 2 ? -a[k] : a[k]) * c;
      }
    }
    store_double(*y, n, v);
  }
  return ok_status();
}

constexpr double kHann[] = {0.5, 0.5};
constexpr double kHamming[] = {25.0 / 46.0, 21.0 / 46.0};
constexpr double kBlackman[] = {0.42, 0.5, 0.08};

Status infer_window(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType dtype, output_datatype(ctx.node()));
  Shape out = unknown_dims(1);
  if (auto v = constant_ints(ctx, 0); v && v->size() == 1 && (*v)[0] >= 0) out[0] = (*v)[0];
  ctx.set_output(0, dtype, out);
  return ok_status();
}

// ---- MelWeightMatrix -----------------------------------------------------------------

Status mel_weight_matrix_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(DataType dtype, output_datatype(node));
  KILN_ASSIGN_OR_RETURN(int64_t num_mel_bins, scalar_int(node, *ctx.input(0), "num_mel_bins"));
  KILN_ASSIGN_OR_RETURN(int64_t dft_length, scalar_int(node, *ctx.input(1), "dft_length"));
  KILN_ASSIGN_OR_RETURN(int64_t sample_rate, scalar_int(node, *ctx.input(2), "sample_rate"));
  KILN_ASSIGN_OR_RETURN(double lower, scalar_float(node, *ctx.input(3), "lower_edge_hertz"));
  KILN_ASSIGN_OR_RETURN(double upper, scalar_float(node, *ctx.input(4), "upper_edge_hertz"));
  if (num_mel_bins <= 0 || dft_length <= 0 || sample_rate <= 0 ||
      num_mel_bins > kMaxTransformLength || dft_length > kMaxTransformLength)
    return invalid_argument(
        "node %s: num_mel_bins (%lld), dft_length (%lld) and sample_rate (%lld) must be "
        "positive",
        node.label().c_str(), (long long)num_mel_bins, (long long)dft_length,
        (long long)sample_rate);
  if (!(lower >= 0 && upper > lower))
    return invalid_argument("node %s: need 0 <= lower_edge_hertz (%g) < upper_edge_hertz (%g)",
                            node.label().c_str(), lower, upper);
  const int64_t spectrogram_bins = dft_length / 2 + 1;
  KILN_ASSIGN_OR_RETURN(Tensor * y,
                        ctx.allocate_output(0, dtype, {spectrogram_bins, num_mel_bins}));
  // The mel edges of the band are computed in the precision of the edge inputs and the
  // band split into num_mel_bins + 2 steps, as the ONNX reference does; the expected
  // matrices come from it and the triangle corners are floor()ed, so this matters.
  const bool single = ctx.input(3)->dtype() != DataType::kFloat64;
  auto to_mel = [&](double hz) {
    return single
               ? static_cast<double>(2595.0f * std::log10(1.0f + static_cast<float>(hz) / 700.0f))
               : 2595.0 * std::log10(1.0 + hz / 700.0);
  };
  const double low_mel = to_mel(lower), high_mel = to_mel(upper);
  const double mel_step = single ? static_cast<double>(static_cast<float>(high_mel - low_mel) /
                                                       static_cast<float>(num_mel_bins + 2))
                                 : (high_mel - low_mel) / static_cast<double>(num_mel_bins + 2);
  std::vector<int64_t> bins(static_cast<size_t>(num_mel_bins + 2));
  for (int64_t i = 0; i < num_mel_bins + 2; ++i) {
    double hz =
        700.0 * (std::pow(10.0, (static_cast<double>(i) * mel_step + low_mel) / 2595.0) - 1.0);
    bins[static_cast<size_t>(i)] = static_cast<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
  }
  std::vector<double> w(static_cast<size_t>(spectrogram_bins * num_mel_bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> Expected<double*> {
    if (j < 0 || j >= spectrogram_bins)
      return invalid_argument(
          "node %s: mel band %lld reaches spectrogram bin %lld, past the %lld bins of "
          "dft_length %lld (upper_edge_hertz above sample_rate / 2?)",
          node.label().c_str(), (long long)i, (long long)j, (long long)spectrogram_bins,
          (long long)dft_length);
    return &w[static_cast<size_t>(j * num_mel_bins + i)];
  };
  for (int64_t i = 0; i < num_mel_bins; ++i) {
    const int64_t left = bins[static_cast<size_t>(i)], center = bins[static_cast<size_t>(i + 1)],
                  right = bins[static_cast<size_t>(i + 2)];
    if (center == left) {
      KILN_ASSIGN_OR_RETURN(double* p, at(center, i));
      *p = 1.0;
    } else {
      for (int64_t j = left; j <= center; ++j) {
        KILN_ASSIGN_OR_RETURN(double* p, at(j, i));
        *p = static_cast<double>(j - left) / static_cast<double>(center - left);
      }
    }
    for (int64_t j = center; j < right; ++j) {
      KILN_ASSIGN_OR_RETURN(double* p, at(j, i));
      *p = static_cast<double>(right - j) / static_cast<double>(right - center);
    }
  }
  for (size_t k = 0; k < w.size(); ++k) store_double(*y, static_cast<int64_t>(k), w[k]);
  return ok_status();
}

Status infer_mel_weight_matrix(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType dtype, output_datatype(ctx.node()));
  Shape out = unknown_dims(2);
  if (auto v = constant_ints(ctx, 1); v && v->size() == 1 && (*v)[0] > 0) out[0] = (*v)[0] / 2 + 1;
  if (auto v = constant_ints(ctx, 0); v && v->size() == 1 && (*v)[0] > 0) out[1] = (*v)[0];
  ctx.set_output(0, dtype, out);
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("DFT")
                     .since(17, 19)
                     .inputs(1, 2)
                     .outputs(1, 1)
                     .attr("axis", ir::AttrKind::kInt)
                     .attr("inverse", ir::AttrKind::kInt)
                     .attr("onesided", ir::AttrKind::kInt)
                     .infer(infer_dft)
                     .kernel(dft_kernel));
KILN_REGISTER_OP(OpSchema("DFT")
                     .since(20)
                     .inputs(1, 3)
                     .outputs(1, 1)
                     .attr("inverse", ir::AttrKind::kInt)
                     .attr("onesided", ir::AttrKind::kInt)
                     .infer(infer_dft)
                     .kernel(dft_kernel));
KILN_REGISTER_OP(OpSchema("STFT")
                     .since(17)
                     .inputs(2, 4)
                     .outputs(1, 1)
                     .attr("onesided", ir::AttrKind::kInt)
                     .infer(infer_stft)
                     .kernel(stft_kernel));
KILN_REGISTER_OP(OpSchema("HannWindow")
                     .since(17)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("output_datatype", ir::AttrKind::kInt)
                     .attr("periodic", ir::AttrKind::kInt)
                     .infer(infer_window)
                     .kernel([](KernelContext& ctx) { return window_kernel(ctx, kHann); }));
KILN_REGISTER_OP(OpSchema("HammingWindow")
                     .since(17)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("output_datatype", ir::AttrKind::kInt)
                     .attr("periodic", ir::AttrKind::kInt)
                     .infer(infer_window)
                     .kernel([](KernelContext& ctx) { return window_kernel(ctx, kHamming); }));
KILN_REGISTER_OP(OpSchema("BlackmanWindow")
                     .since(17)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("output_datatype", ir::AttrKind::kInt)
                     .attr("periodic", ir::AttrKind::kInt)
                     .infer(infer_window)
                     .kernel([](KernelContext& ctx) { return window_kernel(ctx, kBlackman); }));
KILN_REGISTER_OP(OpSchema("MelWeightMatrix")
                     .since(17)
                     .inputs(5, 5)
                     .outputs(1, 1)
                     .attr("output_datatype", ir::AttrKind::kInt)
                     .infer(infer_mel_weight_matrix)
                     .kernel(mel_weight_matrix_kernel));

}  // namespace
}  // namespace kiln::ops
