// Recurrent layers (ONNX opsets 7..27): RNN, GRU (linear_before_reset) and LSTM
// (peepholes, input_forget), forward / reverse / bidirectional, sequence_lens, initial
// states, clip, custom activations, and layout 1 (batch first, opset 14). The input
// projection of all steps is one GEMM; each step adds a GEMM with the recurrence weights.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/gemm_util.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

enum class CellKind { kRnn, kGru, kLstm };

int gate_count(CellKind k) { return k == CellKind::kRnn ? 1 : k == CellKind::kGru ? 3 : 4; }
// Activations per direction: RNN f; GRU f, g; LSTM f, g, h.
int activation_count(CellKind k) { return k == CellKind::kRnn ? 1 : k == CellKind::kGru ? 2 : 3; }

Expected<int> num_directions(const ir::Node& node) {
  const std::string d = node.attr_string("direction", "forward");
  if (d == "forward" || d == "reverse") return 1;
  if (d == "bidirectional") return 2;
  return invalid_argument("node %s: direction '%s' is not forward, reverse or bidirectional", node.label().c_str(),
                          d.c_str());
}

// ---- Activations ---------------------------------------------------------------------

enum class ActFn { kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu,
                   kSoftsign, kSoftplus };

struct Activation {
  ActFn fn = ActFn::kTanh;
  double alpha = 0, beta = 0;

  double operator()(double x) const {
    switch (fn) {
      case ActFn::kRelu: return std::max(x, 0.0);
      case ActFn::kTanh: return std::tanh(x);
      case ActFn::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
      case ActFn::kAffine: return alpha * x + beta;
      case ActFn::kLeakyRelu: return x >= 0 ? x : alpha * x;
      case ActFn::kThresholdedRelu: return x > alpha ? x : 0.0;
      case ActFn::kScaledTanh: return alpha * std::tanh(beta * x);
      case ActFn::kHardSigmoid: return std::clamp(alpha * x + beta, 0.0, 1.0);
      case ActFn::kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case ActFn::kSoftsign: return x / (1 + std::fabs(x));
      case ActFn::kSoftplus: return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
    }
    return x;
  }
};

// The activations of every direction, in order (num_directions * activation_count). Alpha
// and beta values are consumed in order by the functions that take them; missing ones
// fall back to the functions' ONNX defaults.
Expected<std::vector<Activation>> read_activations(const ir::Node& node, CellKind kind, int dirs) {
  const std::string label = node.label();
  std::vector<std::string> names;
  if (const ir::Attribute* a = node.attr("activations")) names = a->strings;
  const int per_dir = activation_count(kind);
  if (names.empty()) {
    static const char* kDefaults[3][3] = {{"Tanh"}, {"Sigmoid", "Tanh"}, {"Sigmoid", "Tanh", "Tanh"}};
    for (int d = 0; d < dirs; ++d)
      for (int i = 0; i < per_dir; ++i) names.push_back(kDefaults[static_cast<int>(kind)][i]);
  } else if (static_cast<int>(names.size()) == per_dir && dirs == 2) {
    names.insert(names.end(), names.begin(), names.end());
  }
  if (static_cast<int>(names.size()) != per_dir * dirs)
    return invalid_argument("node %s: %zu activations given, expected %d", label.c_str(), names.size(),
                            per_dir * dirs);
  const std::vector<float> alphas = node.attr_floats("activation_alpha");
  const std::vector<float> betas = node.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<Activation> acts;
  for (const std::string& raw : names) {
    std::string n = raw;
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    Activation a;
    double default_alpha = 0, default_beta = 0;
    bool uses_alpha = true, uses_beta = false;
    if (n == "relu") {
      a.fn = ActFn::kRelu, uses_alpha = false;
    } else if (n == "tanh") {
      a.fn = ActFn::kTanh, uses_alpha = false;
    } else if (n == "sigmoid") {
      a.fn = ActFn::kSigmoid, uses_alpha = false;
    } else if (n == "affine") {
      a.fn = ActFn::kAffine, default_alpha = 1.0, uses_beta = true;
    } else if (n == "leakyrelu") {
      a.fn = ActFn::kLeakyRelu, default_alpha = 0.01;
    } else if (n == "thresholdedrelu") {
      a.fn = ActFn::kThresholdedRelu, default_alpha = 1.0;
    } else if (n == "scaledtanh") {
      a.fn = ActFn::kScaledTanh, default_alpha = 1.0, default_beta = 1.0, uses_beta = true;
    } else if (n == "hardsigmoid") {
      a.fn = ActFn::kHardSigmoid, default_alpha = 0.2, default_beta = 0.5, uses_beta = true;
    } else if (n == "elu") {
      a.fn = ActFn::kElu, default_alpha = 1.0;
    } else if (n == "softsign") {
      a.fn = ActFn::kSoftsign, uses_alpha = false;
    } else if (n == "softplus") {
      a.fn = ActFn::kSoftplus, uses_alpha = false;
    } else {
      return invalid_argument("node %s: unknown activation '%s'", label.c_str(), raw.c_str());
    }
    a.alpha = uses_alpha && ai < alphas.size() ? static_cast<double>(alphas[ai++]) : default_alpha;
    a.beta = uses_beta && bi < betas.size() ? static_cast<double>(betas[bi++]) : default_beta;
    acts.push_back(a);
  }
  return acts;
}

// ---- Inference -------------------------------------------------------------------------

template <CellKind kKind>
Status infer_recurrent(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const ir::TensorType& xt = ctx.input_type(0);
  KILN_ASSIGN_OR_RETURN(int dirs, num_directions(node));
  const int64_t layout = node.attr_int("layout", 0);
  if (layout != 0 && layout != 1)
    return invalid_argument("node %s: layout must be 0 or 1, got %lld", label.c_str(), (long long)layout);
  if (xt.shape.has_rank() && xt.shape.rank() != 3)
    return invalid_argument("node %s: X has rank %d, expected 3", label.c_str(), xt.shape.rank());
  Dim hidden;
  if (node.has_attr("hidden_size")) {
    hidden = Dim(node.attr_int("hidden_size", 0));
  } else if (ctx.has_input(2) && ctx.input_type(2).shape.has_rank() && ctx.input_type(2).shape.rank() == 3) {
    hidden = ctx.input_type(2).shape[2];
  }
  Dim seq, batch;
  if (xt.shape.has_rank()) {
    seq = xt.shape[layout == 0 ? 0 : 1];
    batch = xt.shape[layout == 0 ? 1 : 0];
  }
  const Dim d(dirs);
  if (layout == 0) {
    ctx.set_output(0, xt.dtype, Shape({seq, d, batch, hidden}));
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, xt.dtype, Shape({d, batch, hidden}));
  } else {
    ctx.set_output(0, xt.dtype, Shape({batch, seq, d, hidden}));
    for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, xt.dtype, Shape({batch, d, hidden}));
  }
  return ok_status();
}

// ---- Kernel ----------------------------------------------------------------------------

// Swaps the two leading axes of a [a, b, rest] tensor into [b, a, rest].
template <typename T>
std::vector<T> swap_leading(const T* src, int64_t a, int64_t b, int64_t rest) {
  std::vector<T> out(static_cast<size_t>(a * b * rest));
  for (int64_t i = 0; i < a; ++i)
    for (int64_t j = 0; j < b; ++j) std::copy(src + (i * b + j) * rest, src + (i * b + j + 1) * rest,
                                              out.data() + (j * a + i) * rest);
  return out;
}

struct RecurrentParams {
  CellKind kind;
  int64_t seq, batch, input, hidden;
  int dirs;
  bool reverse_only;
  bool linear_before_reset;
  bool input_forget;
  double clip;  // <= 0: none
  std::vector<Activation> acts;
};

template <typename T>
void run_recurrent(const RecurrentParams& p, const T* x, const T* w, const T* r, const T* bias,
                   const std::vector<int64_t>& lens, const T* init_h, const T* init_c, const T* peep, T* y,
                   T* y_h, T* y_c) {
  const int64_t S = p.seq, B = p.batch, I = p.input, H = p.hidden;
  const int G = gate_count(p.kind);
  const int64_t GH = G * H;
  const int per_dir = activation_count(p.kind);
  std::vector<T> xproj(static_cast<size_t>(S * B * GH)), hproj(static_cast<size_t>(B * GH)),
      rh(static_cast<size_t>(B * H)), rhproj(static_cast<size_t>(B * H));
  std::vector<T> h(static_cast<size_t>(B * H)), c(static_cast<size_t>(B * H)), gate(static_cast<size_t>(GH));
  auto clip = [&](double v) { return p.clip > 0 ? std::clamp(v, -p.clip, p.clip) : v; };
  for (int dir = 0; dir < p.dirs; ++dir) {
    const bool reverse = p.reverse_only || dir == 1;
    const T* wd = w + dir * GH * I;
    const T* rd = r + dir * GH * H;
    const T* wb = bias ? bias + dir * 2 * GH : nullptr;
    const T* rb = bias ? wb + GH : nullptr;
    const T* pd = peep ? peep + dir * 3 * H : nullptr;
    const Activation* act = &p.acts[static_cast<size_t>(dir * per_dir)];
    // Input projection of every step: [S*B, I] x W^T.
    if (S * B > 0) gemm<T>(false, true, S * B, GH, I, T(1), x, I, wd, I, T(0), xproj.data(), GH);
    for (int64_t i = 0; i < B * H; ++i) {
      h[i] = init_h ? init_h[dir * B * H + i] : T(0);
      c[i] = init_c ? init_c[dir * B * H + i] : T(0);
    }
    for (int64_t s = 0; s < S; ++s) {
      if (B > 0) gemm<T>(false, true, B, GH, H, T(1), h.data(), H, rd, H, T(0), hproj.data(), GH);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t len = lens[static_cast<size_t>(b)];
        if (s >= len) continue;
        const int64_t t = reverse ? len - 1 - s : s;
        const T* xp = xproj.data() + (t * B + b) * GH;
        const T* hp = hproj.data() + b * GH;
        T* hb = h.data() + b * H;
        T* cb = c.data() + b * H;
        auto pre = [&](int g, int64_t j, bool with_rec) {
          double v = static_cast<double>(xp[g * H + j]);
          if (with_rec) v += static_cast<double>(hp[g * H + j]);
          if (wb) v += static_cast<double>(wb[g * H + j]);
          if (rb && with_rec) v += static_cast<double>(rb[g * H + j]);
          return v;
        };
        switch (p.kind) {
          case CellKind::kRnn:
            for (int64_t j = 0; j < H; ++j) hb[j] = static_cast<T>(act[0](clip(pre(0, j, true))));
            break;
          case CellKind::kGru: {
            // Gates z, r; then the candidate needs r (and, before reset, r * h through Rh).
            for (int64_t j = 0; j < H; ++j) {
              gate[j] = static_cast<T>(act[0](clip(pre(0, j, true))));
              gate[H + j] = static_cast<T>(act[0](clip(pre(1, j, true))));
            }
            if (!p.linear_before_reset) {
              for (int64_t j = 0; j < H; ++j) rh[j] = gate[H + j] * hb[j];
              gemm<T>(false, true, 1, H, H, T(1), rh.data(), H, rd + 2 * H * H, H, T(0), rhproj.data(), H, false);
            }
            for (int64_t j = 0; j < H; ++j) {
              double v = pre(2, j, false);
              const double rbh = rb ? static_cast<double>(rb[2 * H + j]) : 0.0;
              if (p.linear_before_reset)
                v += static_cast<double>(gate[H + j]) * (static_cast<double>(hp[2 * H + j]) + rbh);
              else
                v += static_cast<double>(rhproj[j]) + rbh;
              const double cand = act[1](clip(v));
              const double z = static_cast<double>(gate[j]);
              gate[2 * H + j] = static_cast<T>((1 - z) * cand + z * static_cast<double>(hb[j]));
            }
            for (int64_t j = 0; j < H; ++j) hb[j] = gate[2 * H + j];
            break;
          }
          case CellKind::kLstm:
            // Gate order i, o, f, c; peepholes P = (Pi, Po, Pf).
            for (int64_t j = 0; j < H; ++j) {
              const double c_prev = static_cast<double>(cb[j]);
              double vi = pre(0, j, true), vf = pre(2, j, true);
              if (pd) {
                vi += static_cast<double>(pd[j]) * c_prev;
                vf += static_cast<double>(pd[2 * H + j]) * c_prev;
              }
              const double ig = act[0](clip(vi));
              const double fg = p.input_forget ? 1.0 - ig : act[0](clip(vf));
              const double cand = act[1](clip(pre(3, j, true)));
              const double cn = fg * c_prev + ig * cand;
              double vo = pre(1, j, true);
              if (pd) vo += static_cast<double>(pd[H + j]) * cn;
              const double og = act[0](clip(vo));
              cb[j] = static_cast<T>(cn);
              hb[j] = static_cast<T>(og * act[2](cn));
            }
            break;
        }
        if (y) std::copy(hb, hb + H, y + ((t * p.dirs + dir) * B + b) * H);
      }
    }
    if (y_h) std::copy(h.begin(), h.end(), y_h + dir * B * H);
    if (y_c) std::copy(c.begin(), c.end(), y_c + dir * B * H);
  }
}

template <CellKind kKind>
Status recurrent_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const std::string label = node.label();
  const Tensor& x = *ctx.input(0);
  const Tensor& w = *ctx.input(1);
  const Tensor& r = *ctx.input(2);
  const Tensor* bias = ctx.input(3);
  const Tensor* seq_lens = ctx.input(4);
  const Tensor* init_h = ctx.input(5);
  const Tensor* init_c = kKind == CellKind::kLstm ? ctx.input(6) : nullptr;
  const Tensor* peep = kKind == CellKind::kLstm ? ctx.input(7) : nullptr;
  RecurrentParams p;
  p.kind = kKind;
  KILN_ASSIGN_OR_RETURN(p.dirs, num_directions(node));
  p.reverse_only = node.attr_string("direction", "forward") == "reverse";
  const int64_t layout = node.attr_int("layout", 0);
  if (layout != 0 && layout != 1)
    return invalid_argument("node %s: layout must be 0 or 1, got %lld", label.c_str(), (long long)layout);
  if (x.rank() != 3)
    return invalid_argument("node %s: X %s, expected rank 3", label.c_str(), dims_to_string(x.dims()).c_str());
  p.seq = x.dim(layout == 0 ? 0 : 1);
  p.batch = x.dim(layout == 0 ? 1 : 0);
  p.input = x.dim(2);
  const int G = gate_count(kKind);
  p.hidden = node.attr_int("hidden_size", r.rank() == 3 ? r.dim(2) : -1);
  if (p.hidden < 1) return invalid_argument("node %s: hidden_size must be >= 1", label.c_str());
  const int64_t D = p.dirs, H = p.hidden, B = p.batch;
  auto expect = [&](const Tensor* t, const char* what, std::vector<int64_t> dims) -> Status {
    if (t && t->dims() != dims)
      return invalid_argument("node %s: %s %s, expected %s", label.c_str(), what, dims_to_string(t->dims()).c_str(),
                              dims_to_string(dims).c_str());
    if (t && t->dtype() != x.dtype())
      return invalid_argument("node %s: %s is %s, X is %s; they must match", label.c_str(), what,
                              dtype_name(t->dtype()), dtype_name(x.dtype()));
    return ok_status();
  };
  KILN_RETURN_IF_ERROR(expect(&w, "W", {D, G * H, p.input}));
  KILN_RETURN_IF_ERROR(expect(&r, "R", {D, G * H, H}));
  KILN_RETURN_IF_ERROR(expect(bias, "B", {D, 2 * G * H}));
  const std::vector<int64_t> state_dims = layout == 0 ? std::vector<int64_t>{D, B, H} : std::vector<int64_t>{B, D, H};
  KILN_RETURN_IF_ERROR(expect(init_h, "initial_h", state_dims));
  KILN_RETURN_IF_ERROR(expect(init_c, "initial_c", state_dims));
  KILN_RETURN_IF_ERROR(expect(peep, "P", {D, 3 * H}));
  std::vector<int64_t> lens(static_cast<size_t>(B), p.seq);
  if (seq_lens) {
    if (seq_lens->rank() != 1 || seq_lens->dim(0) != B ||
        (seq_lens->dtype() != DataType::kInt32 && seq_lens->dtype() != DataType::kInt64))
      return invalid_argument("node %s: sequence_lens %s %s, expected int32[%lld]", label.c_str(),
                              dtype_name(seq_lens->dtype()), dims_to_string(seq_lens->dims()).c_str(), (long long)B);
    for (int64_t b = 0; b < B; ++b) {
      lens[static_cast<size_t>(b)] = seq_lens->element_as_int64(b);
      if (lens[static_cast<size_t>(b)] < 0 || lens[static_cast<size_t>(b)] > p.seq)
        return out_of_range("node %s: sequence_lens[%lld] = %lld is outside [0, %lld]", label.c_str(), (long long)b,
                            (long long)lens[static_cast<size_t>(b)], (long long)p.seq);
    }
  }
  p.linear_before_reset = node.attr_int("linear_before_reset", 0) != 0;
  p.input_forget = node.attr_int("input_forget", 0) != 0;
  p.clip = node.has_attr("clip") ? static_cast<double>(node.attr_float("clip", 0)) : 0.0;
  if (node.has_attr("clip") && !(p.clip > 0))
    return invalid_argument("node %s: clip must be > 0, got %g", label.c_str(), p.clip);
  KILN_ASSIGN_OR_RETURN(p.acts, read_activations(node, kKind, p.dirs));

  std::vector<int64_t> y_dims = layout == 0 ? std::vector<int64_t>{p.seq, D, B, H}
                                            : std::vector<int64_t>{B, p.seq, D, H};
  Tensor* y = nullptr;
  Tensor* y_h = nullptr;
  Tensor* y_c = nullptr;
  if (ctx.num_outputs() > 0) {
    KILN_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, x.dtype(), y_dims));
  }
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(y_h, ctx.allocate_output(1, x.dtype(), state_dims));
  }
  if (kKind == CellKind::kLstm && ctx.num_outputs() > 2) {
    KILN_ASSIGN_OR_RETURN(y_c, ctx.allocate_output(2, x.dtype(), state_dims));
  }
  auto run = [&]<typename T>() {
    // Layout 1 runs through layout 0 buffers: transpose in, compute, transpose out.
    std::vector<T> xs, hs, cs, ys(static_cast<size_t>(p.seq * D * B * H)), yh(static_cast<size_t>(D * B * H)),
        yc(static_cast<size_t>(D * B * H));
    const T* xp = x.data<T>();
    const T* hp = init_h ? init_h->data<T>() : nullptr;
    const T* cp = init_c ? init_c->data<T>() : nullptr;
    if (layout == 1) {
      xs = swap_leading(xp, B, p.seq, p.input);
      xp = xs.data();
      if (hp) {
        hs = swap_leading(hp, B, D, H);
        hp = hs.data();
      }
      if (cp) {
        cs = swap_leading(cp, B, D, H);
        cp = cs.data();
      }
    }
    run_recurrent<T>(p, xp, w.data<T>(), r.data<T>(), bias ? bias->data<T>() : nullptr, lens, hp, cp,
                     peep ? peep->data<T>() : nullptr, ys.data(), yh.data(), yc.data());
    if (layout == 0) {
      if (y) std::copy(ys.begin(), ys.end(), y->data<T>());
      if (y_h) std::copy(yh.begin(), yh.end(), y_h->data<T>());
      if (y_c) std::copy(yc.begin(), yc.end(), y_c->data<T>());
    } else {
      // [S, D, B, H] -> [B, S, D, H]; [D, B, H] -> [B, D, H].
      if (y) {
        std::vector<T> t = swap_leading(ys.data(), p.seq * D, B, H);
        std::copy(t.begin(), t.end(), y->data<T>());
      }
      if (y_h) {
        std::vector<T> t = swap_leading(yh.data(), D, B, H);
        std::copy(t.begin(), t.end(), y_h->data<T>());
      }
      if (y_c) {
        std::vector<T> t = swap_leading(yc.data(), D, B, H);
        std::copy(t.begin(), t.end(), y_c->data<T>());
      }
    }
  };
  if (!dispatch_float(x.dtype(), run)) return unsupported_dtype(node, x.dtype());
  return ok_status();
}

OpSchema recurrent_schema(const char* name, CellKind kind) {
  OpSchema s(name);
  // Opset 7 dropped output_sequence; 14 added layout; 22 only widened the types.
  s.since(7)
      .inputs(3, kind == CellKind::kLstm ? 8 : 6)
      .outputs(0, kind == CellKind::kLstm ? 3 : 2)
      .attr("activation_alpha", AttrKind::kFloats)
      .attr("activation_beta", AttrKind::kFloats)
      .attr("activations", AttrKind::kStrings)
      .attr("clip", AttrKind::kFloat)
      .attr("direction", AttrKind::kString)
      .attr("hidden_size", AttrKind::kInt)
      .attr("layout", AttrKind::kInt);
  if (kind == CellKind::kGru) s.attr("linear_before_reset", AttrKind::kInt);
  if (kind == CellKind::kLstm) s.attr("input_forget", AttrKind::kInt);
  return s;
}

}  // namespace

KILN_REGISTER_OP(recurrent_schema("RNN", CellKind::kRnn)
                     .infer(infer_recurrent<CellKind::kRnn>)
                     .kernel(with_half_as_float(recurrent_kernel<CellKind::kRnn>)));
KILN_REGISTER_OP(recurrent_schema("GRU", CellKind::kGru)
                     .infer(infer_recurrent<CellKind::kGru>)
                     .kernel(with_half_as_float(recurrent_kernel<CellKind::kGru>)));
KILN_REGISTER_OP(recurrent_schema("LSTM", CellKind::kLstm)
                     .infer(infer_recurrent<CellKind::kLstm>)
                     .kernel(with_half_as_float(recurrent_kernel<CellKind::kLstm>)));

}  // namespace kiln::ops
