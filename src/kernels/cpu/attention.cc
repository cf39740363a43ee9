// SIMD kernel for kiln Attention (docs/fused-ops.md): float32, static shapes, K or Kt, an
// optional additive mask broadcast as the reference allows, any scale. Highway, with the
// AVX-512 / AVX2 / baseline version picked at prepare (simd_dispatch.h).
//
// Per (batch, block of query rows) task: K is packed transposed ([D, Sk], rows padded to 16
// floats with zeros) and V padded ([Sk, Dv16]) into the thread's workspace, then for blocks
// of kRowBlock rows: S = Q Kt by a register-blocked kernel (6 rows x 2 vectors), S * scale +
// mask, a max-shifted softmax with Highway's Exp, and Y = P V by the same kernel. Tasks run on
// parallel_for over batch * row chunks (one chunk per batch when there are enough batches).
//
// Precision against the reference (which accumulates dot products in double): the scores
// round as the unfused ops do (dot, then * scale, then + mask, each in float32; no FMA
// across them, so BERT's -10000 mask quantises the same values), softmax as the reference
// (a row holding NaN, or whose maximum is +-inf, gives NaN); the dot products, the softmax sum
// and the weighted sum accumulate in float32, so results differ from the reference by float32
// summation-order rounding (tests/kernels/attention_kernel_test.cc).
//
// Runs whose inputs differ from the prepared ones (shape, dtype, mask presence) run the
// reference kernel.
#ifndef KILN_KERNELS_CPU_ATTENTION_SHARED_
#define KILN_KERNELS_CPU_ATTENTION_SHARED_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"
#include "ops/op_util.h"

namespace kiln::kernels::attention_simd {

// Score rows computed at once (the S block is kRowBlock x Sk16 floats of workspace).
constexpr int64_t kRowBlock = 48;
// Padding of packed rows: the widest vector (AVX-512, 16 floats).
constexpr int64_t kPad = 16;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One run's operands and geometry, shared by the tasks.
struct Job {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  const float* mask = nullptr;  // null: no mask
  float* y = nullptr;
  const int64_t* offs = nullptr;  // per output batch: element offsets of Q, K, V, Mask
  int64_t sq = 0, sk = 0, d = 0, dv = 0;
  int64_t skp = 0, dvp = 0;  // Sk and Dv padded to kPad
  int64_t mask_row = 0, mask_col = 0;
  int64_t chunks = 1;  // row chunks per batch
  bool k_transposed = false;
  float scale = 1.0f;
};

// Floats of workspace one task needs.
inline int64_t workspace_floats(int64_t sk, int64_t d, int64_t dv) {
  const int64_t skp = round_up(sk, kPad), dvp = round_up(dv, kPad);
  return d * skp + sk * dvp + kRowBlock * skp;
}

}  // namespace kiln::kernels::attention_simd

#endif  // KILN_KERNELS_CPU_ATTENTION_SHARED_

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

HWY_BEFORE_NAMESPACE();
namespace kiln::kernels::attention_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// C[R rows, the vectors at `c`] = A[R, kdim] * B[kdim, ...]: A row-major (lda), B row-major
// (ldb) and readable in whole vectors, C written up to `valid` columns (masked last store).
template <int R, int C>
HWY_INLINE void micro_kernel(const float* HWY_RESTRICT a, int64_t lda, int64_t kdim,
                             const float* HWY_RESTRICT b, int64_t ldb, float* HWY_RESTRICT c,
                             int64_t ldc, int64_t valid) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  V acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) acc[r][j] = hn::Zero(d);
  for (int64_t k = 0; k < kdim; ++k) {
    V bv[C];
    for (int j = 0; j < C; ++j) bv[j] = hn::LoadU(d, b + k * ldb + j * n);
    for (int r = 0; r < R; ++r) {
      const V av = hn::Set(d, a[r * lda + k]);
      for (int j = 0; j < C; ++j) acc[r][j] = hn::MulAdd(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) {
      const int64_t col = j * n;
      float* dst = c + r * ldc + col;
      if (col + n <= valid) {
        hn::StoreU(acc[r][j], d, dst);
      } else if (col < valid) {
        hn::BlendedStore(acc[r][j], hn::FirstN(d, static_cast<size_t>(valid - col)), d, dst);
      }
    }
}

template <int R>
HWY_INLINE void gemm_rows(const float* a, int64_t lda, int64_t kdim, const float* b, int64_t ldb,
                          float* c, int64_t ldc, int64_t ncols) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = 0;
  for (; j + 2 * n <= ncols || (j + n < ncols); j += 2 * n)
    micro_kernel<R, 2>(a, lda, kdim, b + j, ldb, c + j, ldc, ncols - j);
  if (j < ncols) micro_kernel<R, 1>(a, lda, kdim, b + j, ldb, c + j, ldc, ncols - j);
}

// Rows of A per micro-kernel call: 6 x 2 vectors keep 12 accumulators in flight, enough to
// cover the FMA latency on two FMA pipes (16 vector registers on AVX2, 32 on AVX-512).
constexpr int kMicroRows = 6;

template <int R>
HWY_INLINE void gemm_tail(const float* a, int64_t lda, int64_t rows, int64_t kdim, const float* b,
                          int64_t ldb, float* c, int64_t ldc, int64_t ncols) {
  if constexpr (R > 0) {
    if (rows == R) {
      gemm_rows<R>(a, lda, kdim, b, ldb, c, ldc, ncols);
    } else {
      gemm_tail<R - 1>(a, lda, rows, kdim, b, ldb, c, ldc, ncols);
    }
  }
}

// C[rows, ncols] = A[rows, kdim] * B[kdim, ncols] (see micro_kernel for the layouts).
HWY_INLINE void gemm(const float* a, int64_t lda, int64_t rows, int64_t kdim, const float* b,
                     int64_t ldb, float* c, int64_t ldc, int64_t ncols) {
  int64_t r = 0;
  for (; r + kMicroRows <= rows; r += kMicroRows)
    gemm_rows<kMicroRows>(a + r * lda, lda, kdim, b, ldb, c + r * ldc, ldc, ncols);
  gemm_tail<kMicroRows - 1>(a + r * lda, lda, rows - r, kdim, b, ldb, c + r * ldc, ldc, ncols);
}

// Row s[0, sk) (readable and writable up to the padded width) becomes the softmax weights of
// s * scale + mask, where the mask row is m[j * mask_col] (null: none).
HWY_INLINE void softmax_row(float* HWY_RESTRICT s, int64_t sk, float scale,
                            const float* HWY_RESTRICT m, int64_t mask_col) {
  const D d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const V vscale = hn::Set(d, scale);
  const V neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  V vmax = neg_inf;
  auto nan_seen = hn::FirstN(d, 0);
  const V mask_scalar = hn::Set(d, (m && mask_col == 0) ? m[0] : 0.0f);
  for (int64_t j = 0; j < sk; j += n) {
    const bool full = j + n <= sk;
    const auto lanes = hn::FirstN(d, static_cast<size_t>(sk - j));
    // Two roundings, as the unfused Mul and Add: no FMA here.
    V x = hn::Mul(hn::LoadU(d, s + j), vscale);
    if (m) {
      if (mask_col == 0) {
        x = hn::Add(x, mask_scalar);
      } else {
        x = hn::Add(x, full ? hn::LoadU(d, m + j) : hn::MaskedLoad(lanes, d, m + j));
      }
    }
    if (!full) x = hn::IfThenElse(lanes, x, neg_inf);
    nan_seen = hn::Or(nan_seen, hn::IsNaN(x));
    vmax = hn::Max(vmax, x);
    hn::StoreU(x, d, s + j);
  }
  const float mx = hn::GetLane(hn::MaxOfLanes(d, vmax));
  if (!hn::AllFalse(d, nan_seen) || !(mx > -std::numeric_limits<float>::infinity()) ||
      mx == std::numeric_limits<float>::infinity()) {
    // The reference's exp(x - max) is NaN somewhere in the row, and so is its sum.
    std::fill(s, s + sk, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const V vm = hn::Set(d, mx);
  V vsum = hn::Zero(d);
  for (int64_t j = 0; j < sk; j += n) {
    // Padding lanes hold -inf: Exp gives 0 there.
    const V e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vm));
    vsum = hn::Add(vsum, e);
    hn::StoreU(e, d, s + j);
  }
  const float inv = 1.0f / hn::GetLane(hn::SumOfLanes(d, vsum));
  const V vinv = hn::Set(d, inv);
  for (int64_t j = 0; j < sk; j += n) hn::StoreU(hn::Mul(hn::LoadU(d, s + j), vinv), d, s + j);
}

// Tasks [t0, t1) of `job` (task = batch * chunks + chunk); `ws` holds workspace_floats.
void attention_tasks(const Job& job, int64_t t0, int64_t t1, float* ws) {
  const int64_t sq = job.sq, sk = job.sk, d = job.d, dv = job.dv, skp = job.skp, dvp = job.dvp;
  float* kt = ws;                        // [d, skp]
  float* vp = kt + d * skp;              // [sk, dvp]
  float* sb = vp + sk * dvp;             // [kRowBlock, skp]
  int64_t packed_k = -1, packed_v = -1;  // element offsets of the K / V packed last
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t b = t / job.chunks, chunk = t % job.chunks;
    const int64_t i0 = sq * chunk / job.chunks, i1 = sq * (chunk + 1) / job.chunks;
    if (i0 >= i1) continue;
    const int64_t* off = job.offs + b * 4;
    if (off[1] != packed_k) {
      const float* kb = job.k + off[1];
      if (job.k_transposed) {
        for (int64_t x = 0; x < d; ++x) {
          std::memcpy(kt + x * skp, kb + x * sk, static_cast<size_t>(sk) * sizeof(float));
          std::fill(kt + x * skp + sk, kt + (x + 1) * skp, 0.0f);
        }
      } else {
        for (int64_t x = 0; x < d; ++x) std::fill(kt + x * skp + sk, kt + (x + 1) * skp, 0.0f);
        for (int64_t j = 0; j < sk; ++j)
          for (int64_t x = 0; x < d; ++x) kt[x * skp + j] = kb[j * d + x];
      }
      packed_k = off[1];
    }
    if (off[2] != packed_v) {
      const float* vb = job.v + off[2];
      for (int64_t j = 0; j < sk; ++j) {
        std::memcpy(vp + j * dvp, vb + j * dv, static_cast<size_t>(dv) * sizeof(float));
        std::fill(vp + j * dvp + dv, vp + (j + 1) * dvp, 0.0f);
      }
      packed_v = off[2];
    }
    const float* qb = job.q + off[0];
    float* yb = job.y + b * sq * dv;
    for (int64_t i = i0; i < i1; i += kRowBlock) {
      const int64_t rows = std::min(kRowBlock, i1 - i);
      gemm(qb + i * d, d, rows, d, kt, skp, sb, skp, skp);
      for (int64_t r = 0; r < rows; ++r) {
        const float* m = job.mask ? job.mask + off[3] + (i + r) * job.mask_row : nullptr;
        softmax_row(sb + r * skp, sk, job.scale, m, job.mask_col);
      }
      gemm(sb, skp, rows, sk, vp, dvp, yb + i * dv, dv, dv);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kiln::kernels::attention_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include "kernels/cpu/simd_dispatch.h"

namespace kiln::kernels {
namespace {

using Dims = std::vector<int64_t>;
using attention_simd::Job;

Status require_static_f32(const char* what, const ir::Value* v) {
  return require_static_tensor(what, v, {DataType::kFloat32});
}

// Everything about a node the kernel needs.
struct AttentionPlan {
  std::string label;
  Dims q_dims, k_dims, v_dims, mask_dims, y_dims;
  bool has_mask = false;
  int64_t nb = 0, sq = 0, sk = 0, d = 0, dv = 0;
  int64_t mask_row = 0, mask_col = 0;
  bool k_transposed = false;
  float scale = 1.0f;
  std::vector<int64_t> offs;  // per output batch: offsets of Q, K, V, Mask
};

Dims leading(const Dims& d) { return Dims(d.begin(), d.end() - 2); }

// The plan for a kiln Attention node, or why this kernel does not take it.
Expected<AttentionPlan> plan_attention(const ir::Node& node) {
  AttentionPlan p;
  p.label = node.label();
  const char* label = p.label.c_str();
  if (node.domain() != ops::kKilnDomain || node.op_type() != "Attention")
    return unsupported("node %s: not a kiln Attention", label);
  if (node.inputs().size() < 3 || node.inputs().size() > 4 || node.outputs().size() != 1)
    return unsupported("node %s: %zu inputs and %zu outputs, expected 3 or 4 and 1", label, node.inputs().size(),
                       node.outputs().size());
  const ir::Value* mask = node.inputs().size() > 3 ? node.input(3) : nullptr;
  const ir::Value* operands[4] = {node.input(0), node.input(1), node.input(2), mask};
  static const char* const kOperandNames[4] = {"Q", "K", "V", "Mask"};
  for (int i = 0; i < (mask ? 4 : 3); ++i) KILN_RETURN_IF_ERROR(require_static_f32(kOperandNames[i], operands[i]));
  const ir::Value* y = node.output(0);
  if (!y || (y->dtype() != DataType::kFloat32 && y->dtype() != DataType::kUndefined))
    return unsupported("node %s: Y dtype %s: only float32", label, y ? dtype_name(y->dtype()) : "missing");
  p.q_dims = node.input(0)->shape().static_dims();
  p.k_dims = node.input(1)->shape().static_dims();
  p.v_dims = node.input(2)->shape().static_dims();
  p.has_mask = mask != nullptr;
  if (p.has_mask) p.mask_dims = mask->shape().static_dims();
  if (p.q_dims.size() < 2 || p.k_dims.size() < 2 || p.v_dims.size() < 2)
    return unsupported("node %s: Q, K and V need rank >= 2", label);
  p.k_transposed = node.attr_int("k_transposed", 0) != 0;
  p.scale = node.attr_float("scale", 1.0f);
  const Dims &q = p.q_dims, &k = p.k_dims, &v = p.v_dims;
  p.sq = q[q.size() - 2];
  p.d = q.back();
  const int64_t kd = p.k_transposed ? k[k.size() - 2] : k.back();
  p.sk = p.k_transposed ? k.back() : k[k.size() - 2];
  p.dv = v.back();
  if (kd != p.d || v[v.size() - 2] != p.sk)
    return unsupported("node %s: Q %s, K %s, V %s do not fit", label, dims_to_string(q).c_str(),
                       dims_to_string(k).c_str(), dims_to_string(v).c_str());
  KILN_ASSIGN_OR_RETURN(Dims batch, ops::broadcast_dims(node, leading(q), leading(k)));
  if (p.has_mask) {
    const Dims& m = p.mask_dims;
    const size_t mr = m.size();
    if ((mr >= 1 && m[mr - 1] != 1 && m[mr - 1] != p.sk) ||
        (mr >= 2 && m[mr - 2] != 1 && m[mr - 2] != p.sq))
      return unsupported("node %s: Mask %s does not broadcast to the scores", label,
                         dims_to_string(m).c_str());
    if (mr > 2) {
      KILN_ASSIGN_OR_RETURN(batch, ops::broadcast_dims(node, batch, leading(m)));
    }
  }
  KILN_ASSIGN_OR_RETURN(batch, ops::broadcast_dims(node, batch, leading(v)));
  p.nb = num_elements(batch);
  if (p.nb <= 0 || p.sq <= 0 || p.sk <= 0 || p.d <= 0 || p.dv <= 0)
    return unsupported("node %s: empty operand", label);
  p.y_dims = batch;
  p.y_dims.push_back(p.sq);
  p.y_dims.push_back(p.dv);
  const Shape& ys = y->shape();
  if (ys.has_rank() && ys.is_static() && ys.static_dims() != p.y_dims)
    return unsupported("node %s: declared output %s, computed %s", label, ys.to_string().c_str(),
                       dims_to_string(p.y_dims).c_str());
  const int64_t ws_bytes =
      attention_simd::workspace_floats(p.sk, p.d, p.dv) * static_cast<int64_t>(sizeof(float));
  if (ws_bytes > (int64_t{1} << 28))
    return unsupported("node %s: a %lld-byte workspace per thread", label, (long long)ws_bytes);
  auto batch_strides = [&](const Dims& dims, int64_t matrix) {
    Dims st = ops::broadcast_strides(leading(dims), batch);
    for (int64_t& x : st) x *= matrix;
    return st;
  };
  std::vector<int64_t> strides[4] = {batch_strides(q, p.sq * p.d), batch_strides(k, p.sk * p.d),
                                     batch_strides(v, p.sk * p.dv), Dims(batch.size(), 0)};
  if (p.has_mask) {
    Dims full = batch;
    full.push_back(p.sq);
    full.push_back(p.sk);
    const Dims ms = ops::broadcast_strides(p.mask_dims, full);
    strides[3].assign(ms.begin(), ms.end() - 2);
    p.mask_row = ms[ms.size() - 2];
    p.mask_col = ms.back();
  }
  p.offs.resize(static_cast<size_t>(p.nb * 4));
  ops::for_each_broadcast(batch, strides, [&](int64_t o, const int64_t* off) {
    for (int i = 0; i < 4; ++i) p.offs[static_cast<size_t>(o * 4 + i)] = off[i];
  });
  return p;
}

using TasksFn = void (*)(const Job&, int64_t, int64_t, float*);

class AttentionKernel final : public Kernel {
 public:
  AttentionKernel(AttentionPlan plan, const ops::KernelFn* reference)
      : plan_(std::move(plan)), reference_(reference) {
    fn_ = KILN_SIMD_SELECT(kiln::kernels::attention_simd, attention_tasks);
    implementation_ = std::string("simd:") + KILN_SIMD_TARGET_NAME();
    workspace_bytes_ =
        static_cast<size_t>(attention_simd::workspace_floats(plan_.sk, plan_.d, plan_.dv)) *
        sizeof(float);
  }

  Status run(ops::KernelContext& ctx) const override;
  std::string implementation() const override { return implementation_; }

 private:
  bool inputs_as_prepared(const ops::KernelContext& ctx) const;

  AttentionPlan plan_;
  const ops::KernelFn* reference_;
  TasksFn fn_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::string implementation_;
};

bool AttentionKernel::inputs_as_prepared(const ops::KernelContext& ctx) const {
  auto matches = [&](int i, const Dims& dims) {
    const Tensor* t = ctx.input(i);
    return t && t->dtype() == DataType::kFloat32 && t->dims() == dims;
  };
  if (!matches(0, plan_.q_dims) || !matches(1, plan_.k_dims) || !matches(2, plan_.v_dims))
    return false;
  if (plan_.has_mask) return matches(3, plan_.mask_dims);
  return ctx.num_inputs() < 4 || ctx.input(3) == nullptr;
}

// What the parallel tasks share; parallel_for's closure captures only its address (so the
// std::function holds it inline, without allocating).
struct RunState {
  Job job;
  TasksFn fn;
  size_t workspace_bytes;
  std::atomic<bool> out_of_memory{false};
};

Status AttentionKernel::run(ops::KernelContext& ctx) const {
  if (!inputs_as_prepared(ctx)) return (*reference_)(ctx);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.y_dims));
  RunState st;
  st.fn = fn_;
  st.workspace_bytes = workspace_bytes_;
  Job& job = st.job;
  job.q = ctx.input(0)->data<float>();
  job.k = ctx.input(1)->data<float>();
  job.v = ctx.input(2)->data<float>();
  job.mask = plan_.has_mask ? ctx.input(3)->data<float>() : nullptr;
  job.y = y->data<float>();
  job.offs = plan_.offs.data();
  job.sq = plan_.sq;
  job.sk = plan_.sk;
  job.d = plan_.d;
  job.dv = plan_.dv;
  job.skp = attention_simd::round_up(plan_.sk, attention_simd::kPad);
  job.dvp = attention_simd::round_up(plan_.dv, attention_simd::kPad);
  job.mask_row = plan_.mask_row;
  job.mask_col = plan_.mask_col;
  job.k_transposed = plan_.k_transposed;
  job.scale = plan_.scale;
  // Enough tasks to balance the threads (4 per thread) when there are few batches, but row
  // chunks of at least 16 rows: each task packs its batch's K and V again.
  const int64_t threads = num_threads();
  const int64_t want = (4 * threads + plan_.nb - 1) / plan_.nb;
  job.chunks = std::max<int64_t>(1, std::min(want, (plan_.sq + 15) / 16));
  if (plan_.nb >= 2 * threads) job.chunks = 1;
  RunState* s = &st;
  parallel_for(0, plan_.nb * job.chunks, 1, [s](int64_t t0, int64_t t1) {
    float* ws = static_cast<float*>(onednn::thread_workspace(s->workspace_bytes));
    if (!ws) {
      s->out_of_memory.store(true);
      return;
    }
    s->fn(s->job, t0, t1, ws);
  });
  if (st.out_of_memory.load())
    return resource_exhausted("node %s: no memory for a %zu-byte attention workspace",
                              plan_.label.c_str(), workspace_bytes_);
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_attention(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(AttentionPlan plan, plan_attention(node));
  KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(node));
  if (!schema->kernel_fn()) return unsupported("node %s: no reference kernel", plan.label.c_str());
  return std::unique_ptr<Kernel>(new AttentionKernel(std::move(plan), &schema->kernel_fn()));
}

Status attention_applicable(const ir::Node& node) { return plan_attention(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kKilnDomain,
                                    .op_type = "Attention",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "simd",
                                    .applicable = attention_applicable,
                                    .prepare = prepare_attention}));

}  // namespace kiln::kernels

#endif  // HWY_ONCE
