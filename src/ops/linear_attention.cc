// Recurrent-state ops of linear-attention and state-space models (ONNX opset 27):
// LinearAttention (update rules linear, gated, delta, gated_delta; grouped-query heads;
// optional erase gate) and CausalConvWithState (depthwise causal Conv1d carrying its last
// k-1 inputs as state, optional fused SiLU). The state accumulates in double;
// float16/bfloat16 run through float32.
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

// ---- LinearAttention -------------------------------------------------------------------------

struct LinearAttentionDims {
  int64_t batch = 0, len = 0, q_heads = 0, kv_heads = 0, dk = 0, dv = 0;
};

Expected<LinearAttentionDims> linear_attention_dims(const ir::Node& node, const std::vector<int64_t>& q,
                                                    const std::vector<int64_t>& k, const std::vector<int64_t>& v) {
  LinearAttentionDims d;
  if (q.size() != 3 || k.size() != 3 || v.size() != 3)
    return invalid_argument("node %s: query, key and value must be rank 3 [B, T, H*D], got %s, %s, %s",
                            node.label().c_str(), dims_to_string(q).c_str(), dims_to_string(k).c_str(),
                            dims_to_string(v).c_str());
  d.q_heads = node.attr_int("q_num_heads", 0);
  d.kv_heads = node.attr_int("kv_num_heads", 0);
  if (d.q_heads < 1 || d.kv_heads < 1 || d.q_heads % d.kv_heads != 0)
    return invalid_argument("node %s: q_num_heads (%lld) must be a positive multiple of kv_num_heads (%lld)",
                            node.label().c_str(), (long long)d.q_heads, (long long)d.kv_heads);
  d.batch = q[0];
  d.len = q[1];
  if (k[0] != d.batch || v[0] != d.batch || k[1] != d.len || v[1] != d.len)
    return invalid_argument("node %s: query %s, key %s and value %s disagree on batch or length",
                            node.label().c_str(), dims_to_string(q).c_str(), dims_to_string(k).c_str(),
                            dims_to_string(v).c_str());
  if (q[2] % d.q_heads != 0 || v[2] % d.kv_heads != 0)
    return invalid_argument("node %s: hidden sizes %lld / %lld are not divisible by the heads", node.label().c_str(),
                            (long long)q[2], (long long)v[2]);
  d.dk = q[2] / d.q_heads;
  d.dv = v[2] / d.kv_heads;
  if (k[2] != d.kv_heads * d.dk)
    return invalid_argument("node %s: key hidden size %lld must be kv_num_heads * %lld", node.label().c_str(),
                            (long long)k[2], (long long)d.dk);
  return d;
}

Status infer_linear_attention(InferContext& ctx) {
  const ir::TensorType& qt = ctx.input_type(0);
  const DataType state_type = ctx.has_input(3) ? ctx.input_type(3).dtype : qt.dtype;
  ctx.set_output(0, qt.dtype, Shape::unknown_rank());
  if (ctx.num_outputs() > 1) ctx.set_output(1, state_type, Shape::unknown_rank());
  if (!qt.shape.is_static() || !ctx.input_type(1).shape.is_static() || !ctx.input_type(2).shape.is_static())
    return ok_status();
  KILN_ASSIGN_OR_RETURN(LinearAttentionDims d,
                        linear_attention_dims(ctx.node(), qt.shape.static_dims(), ctx.input_type(1).shape.static_dims(),
                                              ctx.input_type(2).shape.static_dims()));
  ctx.set_output(0, qt.dtype, Shape::from_static({d.batch, d.len, d.q_heads * d.dv}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, state_type, Shape::from_static({d.batch, d.kv_heads, d.dk, d.dv}));
  return ok_status();
}

Status linear_attention_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& q = *ctx.input(0);
  if (!ctx.input(1) || !ctx.input(2))
    return invalid_argument("node %s: key and value are required", node.label().c_str());
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const Tensor* past = ctx.input(3);
  const Tensor* decay = ctx.input(4);
  const Tensor* beta = ctx.input(5);
  const Tensor* erase = ctx.input(6);
  if (q.dtype() != DataType::kFloat32 && q.dtype() != DataType::kFloat64) return unsupported_dtype(node, q.dtype());
  for (auto [t, what] : {std::pair{&k, "key"}, std::pair{&v, "value"}, std::pair{decay, "decay"},
                         std::pair{beta, "beta"}, std::pair{erase, "erase_gate"}})
    if (t && t->dtype() != q.dtype())
      return invalid_argument("node %s: %s has dtype %s, expected %s", node.label().c_str(), what,
                              dtype_name(t->dtype()), dtype_name(q.dtype()));
  if (past && past->dtype() != DataType::kFloat32 && past->dtype() != DataType::kFloat64)
    return unsupported_dtype(node, past->dtype());
  const std::string rule = node.attr_string("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
    return invalid_argument("node %s: update_rule must be linear, gated, delta or gated_delta, got '%s'",
                            node.label().c_str(), rule.c_str());
  const bool gating = rule == "gated" || rule == "gated_delta";
  const bool delta = rule == "delta" || rule == "gated_delta";
  if (gating != (decay != nullptr))
    return invalid_argument("node %s: update_rule '%s' %s the decay input", node.label().c_str(), rule.c_str(),
                            gating ? "requires" : "forbids");
  if (delta != (beta != nullptr))
    return invalid_argument("node %s: update_rule '%s' %s the beta input", node.label().c_str(), rule.c_str(),
                            delta ? "requires" : "forbids");
  if (erase && !delta)
    return invalid_argument("node %s: update_rule '%s' forbids the erase_gate input", node.label().c_str(),
                            rule.c_str());
  KILN_ASSIGN_OR_RETURN(LinearAttentionDims d, linear_attention_dims(node, q.dims(), k.dims(), v.dims()));
  const int64_t B = d.batch, T = d.len, Hq = d.q_heads, Hk = d.kv_heads, dk = d.dk, dv = d.dv;
  // decay: [B, T, Hk] (per head) or [B, T, Hk*dk] (per key dim); beta: [B, T, Hk or 1].
  int64_t decay_width = 0, beta_width = 0;
  if (decay) {
    decay_width = decay->rank() == 3 ? decay->dim(2) : -1;
    if (decay->rank() != 3 || decay->dim(0) != B || decay->dim(1) != T || (decay_width != Hk && decay_width != Hk * dk))
      return invalid_argument("node %s: decay must be [%lld, %lld, %lld or %lld], got %s", node.label().c_str(),
                              (long long)B, (long long)T, (long long)Hk, (long long)(Hk * dk),
                              dims_to_string(decay->dims()).c_str());
  }
  if (beta) {
    beta_width = beta->rank() == 3 ? beta->dim(2) : -1;
    if (beta->rank() != 3 || beta->dim(0) != B || beta->dim(1) != T || (beta_width != Hk && beta_width != 1))
      return invalid_argument("node %s: beta must be [%lld, %lld, %lld or 1], got %s", node.label().c_str(),
                              (long long)B, (long long)T, (long long)Hk, dims_to_string(beta->dims()).c_str());
  }
  if (erase && erase->dims() != std::vector<int64_t>{B, T, Hk * dk})
    return invalid_argument("node %s: erase_gate must be [%lld, %lld, %lld], got %s", node.label().c_str(),
                            (long long)B, (long long)T, (long long)(Hk * dk), dims_to_string(erase->dims()).c_str());
  if (past && past->dims() != std::vector<int64_t>{B, Hk, dk, dv})
    return invalid_argument("node %s: past_state must be [%lld, %lld, %lld, %lld], got %s", node.label().c_str(),
                            (long long)B, (long long)Hk, (long long)dk, (long long)dv,
                            dims_to_string(past->dims()).c_str());
  const float scale_attr = node.attr_float("scale", 0.0f);
  const double scale = scale_attr != 0.0f ? scale_attr : 1.0 / std::sqrt(static_cast<double>(dk));
  const DataType state_type = past ? past->dtype() : q.dtype();
  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, q.dtype(), {B, T, Hq * dv}));
  Tensor* present = nullptr;
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(present, ctx.allocate_output(1, state_type, {B, Hk, dk, dv}));
  }
  std::vector<double> state(static_cast<size_t>(B * Hk * dk * dv), 0.0);
  if (past)
    for (int64_t i = 0; i < past->num_elements(); ++i) state[static_cast<size_t>(i)] = past->element_as_double(i);
  const int64_t group = Hq / Hk;
  dispatch_float(q.dtype(), [&]<typename T_>() {
    auto at = [](const Tensor* t, int64_t i) { return static_cast<double>(t->data<T_>()[i]); };
    parallel_for(0, B * Hk, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> vt(static_cast<size_t>(dv)), ke(static_cast<size_t>(dk));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / Hk, h = r % Hk;
        double* S = state.data() + r * dk * dv;  // [dk, dv]
        for (int64_t t = 0; t < T; ++t) {
          const int64_t kbase = (b * T + t) * Hk * dk + h * dk;
          const int64_t vbase = (b * T + t) * Hk * dv + h * dv;
          if (gating) {
            for (int64_t i = 0; i < dk; ++i) {
              const double g = decay_width == Hk ? at(decay, (b * T + t) * Hk + h) : at(decay, kbase + i);
              const double f = std::exp(g);
              for (int64_t m = 0; m < dv; ++m) S[i * dv + m] *= f;
            }
          }
          for (int64_t m = 0; m < dv; ++m) vt[static_cast<size_t>(m)] = at(&v, vbase + m);
          if (delta) {
            // v_t <- beta_t * (v_t - S^T k_erase), k_erase = erase_gate * k when given.
            for (int64_t i = 0; i < dk; ++i)
              ke[static_cast<size_t>(i)] = at(&k, kbase + i) * (erase ? at(erase, kbase + i) : 1.0);
            const double bt = at(beta, (b * T + t) * beta_width + (beta_width == 1 ? 0 : h));
            for (int64_t m = 0; m < dv; ++m) {
              double retrieved = 0;
              for (int64_t i = 0; i < dk; ++i) retrieved += S[i * dv + m] * ke[static_cast<size_t>(i)];
              vt[static_cast<size_t>(m)] = bt * (vt[static_cast<size_t>(m)] - retrieved);
            }
          }
          for (int64_t i = 0; i < dk; ++i) {
            const double ki = at(&k, kbase + i);
            for (int64_t m = 0; m < dv; ++m) S[i * dv + m] += ki * vt[static_cast<size_t>(m)];
          }
          // Read: every query head of this kv head's group.
          for (int64_t g = 0; g < group; ++g) {
            const int64_t hq = h * group + g;
            const int64_t qbase = (b * T + t) * Hq * dk + hq * dk;
            T_* o = out->data<T_>() + (b * T + t) * Hq * dv + hq * dv;
            for (int64_t m = 0; m < dv; ++m) {
              double s = 0;
              for (int64_t i = 0; i < dk; ++i) s += at(&q, qbase + i) * S[i * dv + m];
              o[m] = static_cast<T_>(scale * s);
            }
          }
        }
      }
    });
  });
  if (present)
    dispatch_float(state_type, [&]<typename S>() {
      for (size_t i = 0; i < state.size(); ++i) present->data<S>()[i] = static_cast<S>(state[i]);
    });
  return ok_status();
}

// ---- CausalConvWithState ---------------------------------------------------------------------

Status infer_causal_conv(InferContext& ctx) {
  const ir::TensorType& xt = ctx.input_type(0);
  ctx.set_output(0, xt.dtype, xt.shape);
  if (ctx.num_outputs() < 2) return ok_status();
  Shape state = Shape::unknown_rank();
  if (xt.shape.has_rank() && xt.shape.rank() == 3 && ctx.has_input(1) && ctx.input_type(1).shape.has_rank() &&
      ctx.input_type(1).shape.rank() == 3) {
    const Dim& kd = ctx.input_type(1).shape[2];
    state = Shape({xt.shape[0], xt.shape[1], kd.is_static() ? Dim(kd.value - 1) : Dim()});
  }
  ctx.set_output(1, xt.dtype, state);
  return ok_status();
}

Status causal_conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!ctx.input(1)) return invalid_argument("node %s: weight is required", node.label().c_str());
  const Tensor& w = *ctx.input(1);
  const Tensor* bias = ctx.input(2);
  const Tensor* past = ctx.input(3);
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kFloat64) return unsupported_dtype(node, x.dtype());
  const std::string act = node.attr_string("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    return invalid_argument("node %s: activation must be none, silu or swish, got '%s'", node.label().c_str(),
                            act.c_str());
  if (x.rank() != 3)
    return invalid_argument("node %s: input must be [batch, channels, length], got %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  if (w.dtype() != x.dtype() || w.rank() != 3 || w.dim(0) != C || w.dim(1) != 1 || w.dim(2) < 1)
    return invalid_argument("node %s: weight must be %s [%lld, 1, k >= 1], got %s", node.label().c_str(),
                            dtype_name(x.dtype()), (long long)C, w.description().c_str());
  const int64_t K = w.dim(2);
  if (bias && (bias->dtype() != x.dtype() || bias->num_elements() != C))
    return invalid_argument("node %s: bias must be %s [%lld], got %s", node.label().c_str(), dtype_name(x.dtype()),
                            (long long)C, bias->description().c_str());
  if (past && (past->dtype() != x.dtype() || past->dims() != std::vector<int64_t>{B, C, K - 1}))
    return invalid_argument("node %s: past_state must be %s [%lld, %lld, %lld], got %s", node.label().c_str(),
                            dtype_name(x.dtype()), (long long)B, (long long)C, (long long)(K - 1),
                            past->description().c_str());
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), {B, C, L}));
  Tensor* state = nullptr;
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(state, ctx.allocate_output(1, x.dtype(), {B, C, K - 1}));
  }
  const bool silu = act != "none";
  dispatch_float(x.dtype(), [&]<typename T>() {
    std::vector<T> padded(static_cast<size_t>(K - 1 + L));
    for (int64_t r = 0; r < B * C; ++r) {
      const int64_t c = r % C;
      // The padded row: the past state (or zeros) followed by this call's input.
      for (int64_t i = 0; i < K - 1; ++i) padded[static_cast<size_t>(i)] = past ? past->data<T>()[r * (K - 1) + i] : T(0);
      for (int64_t i = 0; i < L; ++i) padded[static_cast<size_t>(K - 1 + i)] = x.data<T>()[r * L + i];
      const T* wr = w.data<T>() + c * K;
      for (int64_t t = 0; t < L; ++t) {
        double s = bias ? static_cast<double>(bias->data<T>()[c]) : 0.0;
        for (int64_t j = 0; j < K; ++j) s += static_cast<double>(wr[j]) * padded[static_cast<size_t>(t + j)];
        if (silu) s = s / (1.0 + std::exp(-s));
        y->data<T>()[r * L + t] = static_cast<T>(s);
      }
      if (state)
        for (int64_t i = 0; i < K - 1; ++i) state->data<T>()[r * (K - 1) + i] = padded[static_cast<size_t>(L + i)];
    }
  });
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("LinearAttention")
                     .since(27)
                     .inputs(3, 7)
                     .outputs(1, 2)
                     .attr("chunk_size", AttrKind::kInt)
                     .attr("kv_num_heads", AttrKind::kInt)
                     .attr("q_num_heads", AttrKind::kInt)
                     .attr("scale", AttrKind::kFloat)
                     .attr("update_rule", AttrKind::kString)
                     .infer(infer_linear_attention)
                     .kernel(with_half_as_float(linear_attention_kernel)));
KILN_REGISTER_OP(OpSchema("CausalConvWithState")
                     .since(27)
                     .inputs(2, 4)
                     .outputs(1, 2)
                     .attr("activation", AttrKind::kString)
                     .infer(infer_causal_conv)
                     .kernel(with_half_as_float(causal_conv_kernel)));

}  // namespace kiln::ops
