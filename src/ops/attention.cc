// Transformer attention ops (ONNX opsets 23..27): Attention (3-D and 4-D inputs, KV cache
// past/present, causal and boolean/additive masks, nonpad_kv_seqlen, grouped-query heads,
// scale, softcap, the qk_matmul_output modes), RotaryEmbedding and TensorScatter (the
// KV-cache write). Scores and sums accumulate in double; float16/bfloat16 run through float32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "ops/op_util.h"
#include "ops/spatial_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

Status check_rank(const ir::Node& node, const Tensor& t, std::initializer_list<int> ranks, const char* what) {
  for (int r : ranks)
    if (t.rank() == r) return ok_status();
  std::string allowed;
  for (int r : ranks) allowed += (allowed.empty() ? "" : " or ") + std::to_string(r);
  return invalid_argument("node %s: %s must have rank %s, got %s", node.label().c_str(), what, allowed.c_str(),
                          dims_to_string(t.dims()).c_str());
}

Status check_same_float(const ir::Node& node, const Tensor& ref, const Tensor* t, const char* what) {
  if (t && t->dtype() != ref.dtype())
    return invalid_argument("node %s: %s has dtype %s, expected %s", node.label().c_str(), what,
                            dtype_name(t->dtype()), dtype_name(ref.dtype()));
  return ok_status();
}

// ---- Attention -------------------------------------------------------------------------------

// The problem sizes of one Attention node, all as 4-D [batch, heads, sequence, head size].
struct AttentionDims {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, past_len = 0, head = 0, v_head = 0;
  int64_t total() const { return past_len + kv_len; }
};

// Reads the geometry from static input dims (q, k, v and optional past key/value); -1 for
// an unknown extent when used by inference.
Expected<AttentionDims> attention_dims(const ir::Node& node, const std::vector<int64_t>& q,
                                       const std::vector<int64_t>& k, const std::vector<int64_t>& v,
                                       const std::vector<int64_t>* past_k, const std::vector<int64_t>* past_v) {
  AttentionDims d;
  if (q.size() != k.size() || q.size() != v.size() || (q.size() != 3 && q.size() != 4))
    return invalid_argument("node %s: Q, K and V must all be 3-D or all 4-D, got %s, %s and %s",
                            node.label().c_str(), dims_to_string(q).c_str(), dims_to_string(k).c_str(),
                            dims_to_string(v).c_str());
  d.three_d = q.size() == 3;
  d.batch = q[0];
  if (d.three_d) {
    d.q_heads = node.attr_int("q_num_heads", 0);
    d.kv_heads = node.attr_int("kv_num_heads", 0);
    if (d.q_heads < 1 || d.kv_heads < 1)
      return invalid_argument("node %s: 3-D inputs need q_num_heads and kv_num_heads >= 1", node.label().c_str());
    if (q[2] % d.q_heads != 0 || k[2] % d.kv_heads != 0 || v[2] % d.kv_heads != 0)
      return invalid_argument("node %s: hidden sizes %lld, %lld, %lld are not divisible by the heads (%lld, %lld)",
                              node.label().c_str(), (long long)q[2], (long long)k[2], (long long)v[2],
                              (long long)d.q_heads, (long long)d.kv_heads);
    d.q_len = q[1];
    d.kv_len = k[1];
    d.head = q[2] / d.q_heads;
    if (k[2] / d.kv_heads != d.head)
      return invalid_argument("node %s: K head size %lld differs from Q head size %lld", node.label().c_str(),
                              (long long)(k[2] / d.kv_heads), (long long)d.head);
    d.v_head = v[2] / d.kv_heads;
    if (v[1] != k[1])
      return invalid_argument("node %s: K and V sequence lengths differ (%lld vs %lld)", node.label().c_str(),
                              (long long)k[1], (long long)v[1]);
  } else {
    d.q_heads = q[1];
    d.kv_heads = k[1];
    d.q_len = q[2];
    d.kv_len = k[2];
    d.head = q[3];
    d.v_head = v[3];
    if (k[3] != q[3] || v[1] != k[1] || v[2] != k[2])
      return invalid_argument("node %s: K %s and V %s do not match Q %s", node.label().c_str(),
                              dims_to_string(k).c_str(), dims_to_string(v).c_str(), dims_to_string(q).c_str());
  }
  if (k[0] != d.batch || v[0] != d.batch)
    return invalid_argument("node %s: batch sizes of Q, K and V differ", node.label().c_str());
  if (d.kv_heads < 1 || d.q_heads % d.kv_heads != 0)
    return invalid_argument("node %s: q heads %lld must be a multiple of kv heads %lld", node.label().c_str(),
                            (long long)d.q_heads, (long long)d.kv_heads);
  if ((past_k == nullptr) != (past_v == nullptr))
    return invalid_argument("node %s: past_key and past_value must be given together", node.label().c_str());
  if (past_k) {
    const std::vector<int64_t> want_k = {d.batch, d.kv_heads, (*past_k).size() == 4 ? (*past_k)[2] : -1, d.head};
    if (past_k->size() != 4 || past_v->size() != 4 || (*past_k)[0] != d.batch || (*past_k)[1] != d.kv_heads ||
        (*past_k)[3] != d.head || (*past_v)[0] != d.batch || (*past_v)[1] != d.kv_heads ||
        (*past_v)[2] != (*past_k)[2] || (*past_v)[3] != d.v_head)
      return invalid_argument("node %s: past_key %s / past_value %s do not match [batch=%lld, kv heads=%lld, "
                              "past, head=%lld / %lld]",
                              node.label().c_str(), dims_to_string(*past_k).c_str(), dims_to_string(*past_v).c_str(),
                              (long long)d.batch, (long long)d.kv_heads, (long long)d.head, (long long)d.v_head);
    d.past_len = (*past_k)[2];
  }
  return d;
}

Status infer_attention(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  const ir::TensorType& qt = ctx.input_type(0);
  const DataType dt = qt.dtype;
  for (int i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, dt, Shape::unknown_rank());
  if (!qt.shape.is_static() || !ctx.input_type(1).shape.is_static() || !ctx.input_type(2).shape.is_static())
    return ok_status();
  const bool has_past = ctx.has_input(4) && ctx.has_input(5);
  if (has_past && (!ctx.input_type(4).shape.is_static() || !ctx.input_type(5).shape.is_static())) return ok_status();
  std::vector<int64_t> pk, pv;
  if (has_past) {
    pk = ctx.input_type(4).shape.static_dims();
    pv = ctx.input_type(5).shape.static_dims();
  }
  KILN_ASSIGN_OR_RETURN(AttentionDims d,
                        attention_dims(node, qt.shape.static_dims(), ctx.input_type(1).shape.static_dims(),
                                       ctx.input_type(2).shape.static_dims(), has_past ? &pk : nullptr,
                                       has_past ? &pv : nullptr));
  if (d.three_d)
    ctx.set_output(0, dt, Shape::from_static({d.batch, d.q_len, d.q_heads * d.v_head}));
  else
    ctx.set_output(0, dt, Shape::from_static({d.batch, d.q_heads, d.q_len, d.v_head}));
  if (ctx.num_outputs() > 1) ctx.set_output(1, dt, Shape::from_static({d.batch, d.kv_heads, d.total(), d.head}));
  if (ctx.num_outputs() > 2) ctx.set_output(2, dt, Shape::from_static({d.batch, d.kv_heads, d.total(), d.v_head}));
  if (ctx.num_outputs() > 3) ctx.set_output(3, dt, Shape::from_static({d.batch, d.q_heads, d.q_len, d.total()}));
  return ok_status();
}

// Copies a 3-D [B, S, H*D] or 4-D [B, H, S, D] tensor into 4-D layout (as double).
template <typename T>
std::vector<double> to_bhsd(const Tensor& t, bool three_d, int64_t b, int64_t h, int64_t s, int64_t d) {
  std::vector<double> out(static_cast<size_t>(b * h * s * d));
  const T* src = t.data<T>();
  for (int64_t ib = 0; ib < b; ++ib)
    for (int64_t ih = 0; ih < h; ++ih)
      for (int64_t is = 0; is < s; ++is)
        for (int64_t id = 0; id < d; ++id) {
          const int64_t from = three_d ? ((ib * s + is) * h + ih) * d + id : ((ib * h + ih) * s + is) * d + id;
          out[static_cast<size_t>(((ib * h + ih) * s + is) * d + id)] = static_cast<double>(src[from]);
        }
  return out;
}

Status attention_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& q = *ctx.input(0);
  if (!ctx.input(1) || !ctx.input(2))
    return invalid_argument("node %s: K and V are required", node.label().c_str());
  const Tensor& k = *ctx.input(1);
  const Tensor& v = *ctx.input(2);
  const Tensor* mask = ctx.input(3);
  const Tensor* past_k = ctx.input(4);
  const Tensor* past_v = ctx.input(5);
  const Tensor* nonpad = ctx.input(6);
  if (q.dtype() != DataType::kFloat32 && q.dtype() != DataType::kFloat64) return unsupported_dtype(node, q.dtype());
  KILN_RETURN_IF_ERROR(check_same_float(node, q, &k, "K"));
  KILN_RETURN_IF_ERROR(check_same_float(node, q, &v, "V"));
  KILN_RETURN_IF_ERROR(check_same_float(node, q, past_k, "past_key"));
  KILN_RETURN_IF_ERROR(check_same_float(node, q, past_v, "past_value"));
  KILN_ASSIGN_OR_RETURN(AttentionDims d, attention_dims(node, q.dims(), k.dims(), v.dims(),
                                                        past_k ? &past_k->dims() : nullptr,
                                                        past_v ? &past_v->dims() : nullptr));
  const int64_t total = d.total();
  // The mask broadcasts (right-aligned) to [B, Hq, Sq, total_mask] with total_mask <= total;
  // missing trailing key positions are masked out.
  std::vector<int64_t> mask_strides(4, 0);
  int64_t mask_len = 0;
  if (mask) {
    if (mask->dtype() != DataType::kBool && mask->dtype() != q.dtype())
      return invalid_argument("node %s: attn_mask has dtype %s, expected bool or %s", node.label().c_str(),
                              dtype_name(mask->dtype()), dtype_name(q.dtype()));
    if (mask->rank() < 1 || mask->rank() > 4)
      return invalid_argument("node %s: attn_mask must have rank 1..4, got %s", node.label().c_str(),
                              dims_to_string(mask->dims()).c_str());
    mask_len = mask->dim(mask->rank() - 1);
    const std::vector<int64_t> full = {d.batch, d.q_heads, d.q_len, mask_len};
    std::vector<int64_t> md(static_cast<size_t>(4 - mask->rank()), 1);
    md.insert(md.end(), mask->dims().begin(), mask->dims().end());
    for (int i = 0; i < 3; ++i)
      if (md[static_cast<size_t>(i)] != 1 && md[static_cast<size_t>(i)] != full[static_cast<size_t>(i)])
        return invalid_argument("node %s: attn_mask %s does not broadcast to %s", node.label().c_str(),
                                dims_to_string(mask->dims()).c_str(), dims_to_string(full).c_str());
    if (mask_len > total)
      return invalid_argument("node %s: attn_mask has %lld key positions, more than the %lld keys",
                              node.label().c_str(), (long long)mask_len, (long long)total);
    mask_strides = broadcast_strides(md, full);
  }
  std::vector<int64_t> valid_len(static_cast<size_t>(d.batch), total);
  if (nonpad) {
    if (nonpad->dtype() != DataType::kInt64 || nonpad->num_elements() != d.batch)
      return invalid_argument("node %s: nonpad_kv_seqlen must be int64 [%lld], got %s", node.label().c_str(),
                              (long long)d.batch, nonpad->description().c_str());
    for (int64_t b = 0; b < d.batch; ++b) {
      const int64_t n = nonpad->data<int64_t>()[b];
      if (n < 0 || n > total)
        return invalid_argument("node %s: nonpad_kv_seqlen[%lld] = %lld is outside [0, %lld]", node.label().c_str(),
                                (long long)b, (long long)n, (long long)total);
      valid_len[static_cast<size_t>(b)] = n;
    }
  }
  const bool causal = node.attr_int("is_causal", 0) != 0;
  const int64_t mode = node.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3)
    return invalid_argument("node %s: qk_matmul_output_mode must be 0..3, got %lld", node.label().c_str(),
                            (long long)mode);
  const double scale = node.has_attr("scale") ? node.attr_float("scale", 1.0f)
                                              : 1.0 / std::sqrt(static_cast<double>(d.head));
  const double softcap = node.attr_float("softcap", 0.0f);

  Tensor* y = nullptr;
  if (d.three_d) {
    KILN_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, q.dtype(), {d.batch, d.q_len, d.q_heads * d.v_head}));
  } else {
    KILN_ASSIGN_OR_RETURN(y, ctx.allocate_output(0, q.dtype(), {d.batch, d.q_heads, d.q_len, d.v_head}));
  }
  Tensor* present_k = nullptr;
  Tensor* present_v = nullptr;
  Tensor* qk_out = nullptr;
  if (ctx.num_outputs() > 1) {
    KILN_ASSIGN_OR_RETURN(present_k, ctx.allocate_output(1, q.dtype(), {d.batch, d.kv_heads, total, d.head}));
  }
  if (ctx.num_outputs() > 2) {
    KILN_ASSIGN_OR_RETURN(present_v, ctx.allocate_output(2, q.dtype(), {d.batch, d.kv_heads, total, d.v_head}));
  }
  if (ctx.num_outputs() > 3) {
    KILN_ASSIGN_OR_RETURN(qk_out, ctx.allocate_output(3, q.dtype(), {d.batch, d.q_heads, d.q_len, total}));
  }

  dispatch_float(q.dtype(), [&]<typename T>() {
    const std::vector<double> qv = to_bhsd<T>(q, d.three_d, d.batch, d.q_heads, d.q_len, d.head);
    const std::vector<double> kn = to_bhsd<T>(k, d.three_d, d.batch, d.kv_heads, d.kv_len, d.head);
    const std::vector<double> vn = to_bhsd<T>(v, d.three_d, d.batch, d.kv_heads, d.kv_len, d.v_head);
    // The full key/value caches: past followed by the new positions.
    std::vector<double> kc(static_cast<size_t>(d.batch * d.kv_heads * total * d.head));
    std::vector<double> vc(static_cast<size_t>(d.batch * d.kv_heads * total * d.v_head));
    for (int64_t bh = 0; bh < d.batch * d.kv_heads; ++bh) {
      for (int64_t s = 0; s < total; ++s) {
        for (int64_t i = 0; i < d.head; ++i)
          kc[static_cast<size_t>((bh * total + s) * d.head + i)] =
              s < d.past_len ? static_cast<double>(past_k->data<T>()[(bh * d.past_len + s) * d.head + i])
                             : kn[static_cast<size_t>((bh * d.kv_len + s - d.past_len) * d.head + i)];
        for (int64_t i = 0; i < d.v_head; ++i)
          vc[static_cast<size_t>((bh * total + s) * d.v_head + i)] =
              s < d.past_len ? static_cast<double>(past_v->data<T>()[(bh * d.past_len + s) * d.v_head + i])
                             : vn[static_cast<size_t>((bh * d.kv_len + s - d.past_len) * d.v_head + i)];
      }
    }
    if (present_k)
      for (size_t i = 0; i < kc.size(); ++i) present_k->data<T>()[i] = static_cast<T>(kc[i]);
    if (present_v)
      for (size_t i = 0; i < vc.size(); ++i) present_v->data<T>()[i] = static_cast<T>(vc[i]);
    const int64_t group = d.q_heads / d.kv_heads;
    parallel_for(0, d.batch * d.q_heads, 1, [&](int64_t r0, int64_t r1) {
      std::vector<double> raw(static_cast<size_t>(total)), biased(static_cast<size_t>(total)),
          prob(static_cast<size_t>(total)), acc(static_cast<size_t>(d.v_head));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / d.q_heads, h = r % d.q_heads;
        const int64_t kvh = h / group;  // interleaved repeat: q heads [0, group) share kv head 0
        const double* kbase = kc.data() + (b * d.kv_heads + kvh) * total * d.head;
        const double* vbase = vc.data() + (b * d.kv_heads + kvh) * total * d.v_head;
        // Causal frontier: query i sees key j iff j <= i + offset.
        int64_t offset = 0;
        if (past_k)
          offset = d.past_len;
        else if (nonpad)
          offset = valid_len[static_cast<size_t>(b)] - d.q_len;
        for (int64_t i = 0; i < d.q_len; ++i) {
          const double* qrow = qv.data() + ((b * d.q_heads + h) * d.q_len + i) * d.head;
          for (int64_t j = 0; j < total; ++j) {
            double s = 0;
            const double* krow = kbase + j * d.head;
            for (int64_t e = 0; e < d.head; ++e) s += qrow[e] * krow[e];
            s *= scale;
            if (softcap > 0) s = softcap * std::tanh(s / softcap);
            raw[static_cast<size_t>(j)] = s;
            double bias = 0;
            if (mask) {
              if (j >= mask_len) {
                bias = kNegInf;
              } else {
                const int64_t at = b * mask_strides[0] + h * mask_strides[1] + i * mask_strides[2] + j * mask_strides[3];
                if (mask->dtype() == DataType::kBool)
                  bias = mask->data<bool>()[at] ? 0.0 : kNegInf;
                else
                  bias = static_cast<double>(mask->data<T>()[at]);
              }
            }
            if (causal && j > i + offset) bias += kNegInf;
            if (j >= valid_len[static_cast<size_t>(b)]) bias += kNegInf;
            biased[static_cast<size_t>(j)] = s + bias;
          }
          // Softmax; a row masked everywhere gives NaN, as the ONNX reference does.
          double mx = kNegInf;
          for (int64_t j = 0; j < total; ++j) mx = std::max(mx, biased[static_cast<size_t>(j)]);
          double sum = 0;
          for (int64_t j = 0; j < total; ++j) {
            prob[static_cast<size_t>(j)] = std::exp(biased[static_cast<size_t>(j)] - mx);
            sum += prob[static_cast<size_t>(j)];
          }
          for (int64_t j = 0; j < total; ++j) prob[static_cast<size_t>(j)] /= sum;
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < total; ++j) {
            const double p = prob[static_cast<size_t>(j)];
            const double* vrow = vbase + j * d.v_head;
            for (int64_t e = 0; e < d.v_head; ++e) acc[static_cast<size_t>(e)] += p * vrow[e];
          }
          for (int64_t e = 0; e < d.v_head; ++e) {
            const int64_t at = d.three_d ? ((b * d.q_len + i) * d.q_heads + h) * d.v_head + e
                                         : ((b * d.q_heads + h) * d.q_len + i) * d.v_head + e;
            y->data<T>()[at] = static_cast<T>(acc[static_cast<size_t>(e)]);
          }
          if (qk_out) {
            const std::vector<double>& src = mode == 2 ? biased : mode == 3 ? prob : raw;
            T* dst = qk_out->data<T>() + ((b * d.q_heads + h) * d.q_len + i) * total;
            for (int64_t j = 0; j < total; ++j) dst[j] = static_cast<T>(src[static_cast<size_t>(j)]);
          }
        }
      }
    });
  });
  return ok_status();
}

// ---- RotaryEmbedding -------------------------------------------------------------------------

Status rotary_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!ctx.input(1) || !ctx.input(2))
    return invalid_argument("node %s: cos_cache and sin_cache are required", node.label().c_str());
  const Tensor& cos_cache = *ctx.input(1);
  const Tensor& sin_cache = *ctx.input(2);
  const Tensor* pos = ctx.input(3);
  if (x.dtype() != DataType::kFloat32 && x.dtype() != DataType::kFloat64) return unsupported_dtype(node, x.dtype());
  KILN_RETURN_IF_ERROR(check_rank(node, x, {3, 4}, "input"));
  KILN_RETURN_IF_ERROR(check_same_float(node, x, &cos_cache, "cos_cache"));
  KILN_RETURN_IF_ERROR(check_same_float(node, x, &sin_cache, "sin_cache"));
  const bool three_d = x.rank() == 3;
  const int64_t batch = x.dim(0);
  int64_t heads, seq, head;
  if (three_d) {
    heads = node.attr_int("num_heads", 0);
    if (heads < 1 || x.dim(2) % heads != 0)
      return invalid_argument("node %s: 3-D input %s needs num_heads >= 1 dividing the hidden size",
                              node.label().c_str(), dims_to_string(x.dims()).c_str());
    seq = x.dim(1);
    head = x.dim(2) / heads;
  } else {
    heads = x.dim(1);
    seq = x.dim(2);
    head = x.dim(3);
  }
  int64_t rot = node.attr_int("rotary_embedding_dim", 0);
  if (rot == 0) rot = head;
  if (rot < 0 || rot > head || rot % 2 != 0)
    return invalid_argument("node %s: rotary_embedding_dim %lld must be even and at most the head size %lld",
                            node.label().c_str(), (long long)rot, (long long)head);
  const int64_t half = rot / 2;
  const bool interleaved = node.attr_int("interleaved", 0) != 0;
  if (cos_cache.dims() != sin_cache.dims())
    return invalid_argument("node %s: cos_cache %s and sin_cache %s differ", node.label().c_str(),
                            dims_to_string(cos_cache.dims()).c_str(), dims_to_string(sin_cache.dims()).c_str());
  // Row of the caches for (b, s): position_ids[b, s] into [max_pos, half], or [B, S, half].
  std::vector<int64_t> row(static_cast<size_t>(batch * seq));
  if (pos) {
    if (pos->dtype() != DataType::kInt64 || pos->dims() != std::vector<int64_t>{batch, seq})
      return invalid_argument("node %s: position_ids must be int64 [%lld, %lld], got %s", node.label().c_str(),
                              (long long)batch, (long long)seq, pos->description().c_str());
    if (cos_cache.rank() != 2 || cos_cache.dim(1) != half)
      return invalid_argument("node %s: cos_cache must be [max_position, %lld], got %s", node.label().c_str(),
                              (long long)half, dims_to_string(cos_cache.dims()).c_str());
    for (int64_t i = 0; i < batch * seq; ++i) {
      const int64_t p = pos->data<int64_t>()[i];
      if (p < 0 || p >= cos_cache.dim(0))
        return invalid_argument("node %s: position id %lld is outside [0, %lld)", node.label().c_str(), (long long)p,
                                (long long)cos_cache.dim(0));
      row[static_cast<size_t>(i)] = p;
    }
  } else {
    if (cos_cache.dims() != std::vector<int64_t>{batch, seq, half})
      return invalid_argument("node %s: without position_ids cos_cache must be [%lld, %lld, %lld], got %s",
                              node.label().c_str(), (long long)batch, (long long)seq, (long long)half,
                              dims_to_string(cos_cache.dims()).c_str());
    for (int64_t i = 0; i < batch * seq; ++i) row[static_cast<size_t>(i)] = i;
  }
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_float(x.dtype(), [&]<typename T>() {
    const T* src = x.data<T>();
    T* dst = y->data<T>();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t s = 0; s < seq; ++s) {
          const int64_t off = three_d ? ((b * seq + s) * heads + h) * head : ((b * heads + h) * seq + s) * head;
          const T* in = src + off;
          T* out = dst + off;
          const int64_t r = row[static_cast<size_t>(b * seq + s)];
          const T* c = cos_cache.data<T>() + r * half;
          const T* sn = sin_cache.data<T>() + r * half;
          for (int64_t i = 0; i < half; ++i) {
            const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
            const T x1 = in[i1], x2 = in[i2];
            out[i1] = c[i] * x1 - sn[i] * x2;
            out[i2] = sn[i] * x1 + c[i] * x2;
          }
          for (int64_t i = rot; i < head; ++i) out[i] = in[i];
        }
  });
  return ok_status();
}

// ---- TensorScatter ---------------------------------------------------------------------------

Status tensor_scatter_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& cache = *ctx.input(0);
  if (!ctx.input(1)) return invalid_argument("node %s: update is required", node.label().c_str());
  const Tensor& update = *ctx.input(1);
  const Tensor* write = ctx.input(2);
  const std::string mode = node.attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular")
    return invalid_argument("node %s: mode must be 'linear' or 'circular', got '%s'", node.label().c_str(),
                            mode.c_str());
  if (cache.rank() < 2)
    return invalid_argument("node %s: past_cache must have rank >= 2, got %s", node.label().c_str(),
                            dims_to_string(cache.dims()).c_str());
  if (update.dtype() != cache.dtype() || update.rank() != cache.rank())
    return invalid_argument("node %s: update %s does not match past_cache %s", node.label().c_str(),
                            update.description().c_str(), cache.description().c_str());
  KILN_ASSIGN_OR_RETURN(int axis, normalize_axis(node, node.attr_int("axis", -2), cache.rank()));
  if (axis == 0)
    return invalid_argument("node %s: axis must not be the batch axis", node.label().c_str());
  for (int i = 0; i < cache.rank(); ++i)
    if (i == axis ? update.dim(i) > cache.dim(i) : update.dim(i) != cache.dim(i))
      return invalid_argument("node %s: update %s does not fit past_cache %s along axis %d", node.label().c_str(),
                              dims_to_string(update.dims()).c_str(), dims_to_string(cache.dims()).c_str(), i);
  const int64_t batch = cache.dim(0), max_len = cache.dim(axis), len = update.dim(axis);
  std::vector<int64_t> start(static_cast<size_t>(batch), 0);
  if (write) {
    if ((write->dtype() != DataType::kInt64 && write->dtype() != DataType::kInt32) || write->num_elements() != batch)
      return invalid_argument("node %s: write_indices must be int32/int64 [%lld], got %s", node.label().c_str(),
                              (long long)batch, write->description().c_str());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t w = write->element_as_int64(b);
      if (w < 0 || (mode == "linear" && w + len > max_len))
        return invalid_argument("node %s: write index %lld with %lld updates overflows the cache length %lld",
                                node.label().c_str(), (long long)w, (long long)len, (long long)max_len);
      start[static_cast<size_t>(b)] = w;
    }
  }
  Tensor out = cache.clone();
  const int64_t inner = num_elements(std::vector<int64_t>(cache.dims().begin() + axis + 1, cache.dims().end()));
  const int64_t mid = num_elements(std::vector<int64_t>(cache.dims().begin() + 1, cache.dims().begin() + axis));
  const size_t esize = dtype_bytes(cache.dtype(), 1);
  if (cache.dtype() == DataType::kString || dtype_bits(cache.dtype()) < 8)
    return unsupported_dtype(node, cache.dtype());
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  const auto* src = static_cast<const uint8_t*>(update.raw_data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t m = 0; m < mid; ++m)
      for (int64_t s = 0; s < len; ++s) {
        const int64_t to = (start[static_cast<size_t>(b)] + s) % max_len;
        std::copy_n(src + (((b * mid + m) * len + s) * inner) * esize, inner * esize,
                    dst + (((b * mid + m) * max_len + to) * inner) * esize);
      }
  ctx.set_output(0, std::move(out));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Attention")
                     .since(23)
                     .inputs(3, 7)
                     .outputs(1, 4)
                     .attr("is_causal", AttrKind::kInt)
                     .attr("kv_num_heads", AttrKind::kInt)
                     .attr("q_num_heads", AttrKind::kInt)
                     .attr("qk_matmul_output_mode", AttrKind::kInt)
                     .attr("scale", AttrKind::kFloat)
                     .attr("softcap", AttrKind::kFloat)
                     .attr("softmax_precision", AttrKind::kInt)
                     .infer(infer_attention)
                     .kernel(with_half_as_float(attention_kernel)));
KILN_REGISTER_OP(OpSchema("RotaryEmbedding")
                     .since(23)
                     .inputs(3, 4)
                     .outputs(1, 1)
                     .attr("interleaved", AttrKind::kInt)
                     .attr("num_heads", AttrKind::kInt)
                     .attr("rotary_embedding_dim", AttrKind::kInt)
                     .infer(infer_same_as_input)
                     .kernel(with_half_as_float(rotary_kernel)));
KILN_REGISTER_OP(OpSchema("TensorScatter")
                     .since(24)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     .attr("axis", AttrKind::kInt)
                     .attr("mode", AttrKind::kString)
                     .infer(infer_same_as_input)
                     .kernel(tensor_scatter_kernel));

}  // namespace kiln::ops
