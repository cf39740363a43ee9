// oneDNN int8 matmul kernel for ONNX MatMulInteger: uint8 or int8 A [..., M, K] (the
// leading dims are one M, read in place), a constant uint8 or int8 B [K, N], zero points
// optional (A's a scalar, given at run time: DynamicQuantizeLinear computes it; B's a
// constant scalar or one per column), int32 Y [..., M, N]:
//
//   Y[m, n] = sum_k (A[m, k] - a_zp) * (B[k, n] - b_zp[n])        (int32, wrapping)
//
// oneDNN's VNNI kernels (brgemm) take int8 weights without a zero point, so B is packed as
// int8 B' = B - s (s = 0 for int8 B, 128 for uint8 B, exact: B - 128 fits int8) and
//
//   Y[m, n] = acc[m, n] - z[n] * r[m],   acc = sum_k (A - a_zp) * B'   (oneDNN: runtime
//                                                                       source zero point)
//   z[n] = b_zp[n] - s,                  r[m] = sum_k A[m, k] - K * a_zp
//
// all in int32 with wrapping arithmetic, so Y equals the reference (src/ops/qlinear.cc)
// bit for bit. The correction pass (M * (K + N) integer operations next to the matmul's
// M * K * N) runs only when some z[n] is not 0.
//
// Inputs other than the prepared ones (another shape or dtype, a zero point that is not a
// scalar) run the reference kernel.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/lowp.h"
#include "core/parallel.h"
#include "kernels/cpu/onednn_util.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

using dnnl::memory;

bool is_x8(DataType t) { return t == DataType::kUInt8 || t == DataType::kInt8; }

memory::data_type dnnl_x8(DataType t) { return t == DataType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8; }

struct MatMulIntegerPlan {
  std::vector<int64_t> a_dims, y_dims;
  int64_t m = 0, k = 0, n = 0;
  DataType a_dtype = DataType::kUInt8, b_dtype = DataType::kInt8;
  bool has_a_zero_point = false;
  std::vector<int8_t> b_shifted;  // B - s, [K, N]
  std::vector<int32_t> z;         // b_zp[n] - s per column; empty when all 0
  const Tensor* b = nullptr;
  const Tensor* b_zero_point = nullptr;
};

Expected<MatMulIntegerPlan> plan_matmul_integer(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "MatMulInteger")
    return unsupported("node %s: not a MatMulInteger", label.c_str());
  if (!onednn::int8_sums_exact())
    return unsupported("node %s: this CPU has no VNNI (oneDNN's int8 sums would saturate)", label.c_str());
  const ir::Value* a = node.input(0);
  const ir::Value* b = node.input(1);
  const ir::Value* y = node.output(0);
  if (!a || !b || !y || node.num_outputs() != 1)
    return unsupported("node %s: unexpected inputs/outputs", label.c_str());
  MatMulIntegerPlan p;
  KILN_RETURN_IF_ERROR(require_static_tensor("A", a, {DataType::kUInt8, DataType::kInt8}));
  p.a_dtype = a->dtype();
  if (!b->has_initializer()) return unsupported("node %s: B is not constant (not an initializer)", label.c_str());
  const Tensor* bt = b->initializer();
  if (!is_x8(bt->dtype()))
    return unsupported("node %s: B dtype %s: only uint8 and int8", label.c_str(), dtype_name(bt->dtype()));
  if (bt->rank() != 2) return unsupported("node %s: B %s: only 2-D B", label.c_str(), bt->description().c_str());
  p.b_dtype = bt->dtype();
  p.k = bt->dim(0);
  p.n = bt->dim(1);
  p.a_dims = a->shape().static_dims();
  if (p.a_dims.size() < 2)
    return unsupported("node %s: A %s: rank 2 or more only", label.c_str(), a->type().to_string().c_str());
  if (p.a_dims.back() != p.k) return unsupported("node %s: A's last dim is not B's first", label.c_str());
  p.m = 1;
  for (size_t i = 0; i + 1 < p.a_dims.size(); ++i) p.m *= p.a_dims[i];
  p.y_dims = p.a_dims;
  p.y_dims.back() = p.n;
  if (y->dtype() != DataType::kInt32 || !y->shape().has_rank() || !y->shape().is_static() ||
      y->shape().static_dims() != p.y_dims)
    return unsupported("node %s: Y %s is not int32 A's dims with N", label.c_str(), y->type().to_string().c_str());
  if (p.m == 0 || p.k == 0 || p.n == 0) return unsupported("node %s: empty operands", label.c_str());
  // A's zero point: a scalar of A's dtype (per-row zero points run the reference).
  if (const ir::Value* az = node.num_inputs() > 2 ? node.input(2) : nullptr) {
    if (az->dtype() != p.a_dtype)
      return unsupported("node %s: a_zero_point dtype %s is not A's", label.c_str(), dtype_name(az->dtype()));
    if (!az->shape().has_rank() || !az->shape().is_static() || num_elements(az->shape().static_dims()) != 1)
      return unsupported("node %s: a_zero_point %s: a scalar only", label.c_str(), az->type().to_string().c_str());
    p.has_a_zero_point = true;
  }
  // B's zero point: a constant scalar or [N].
  if (const ir::Value* bz = node.num_inputs() > 3 ? node.input(3) : nullptr) {
    if (!bz->has_initializer()) return unsupported("node %s: b_zero_point is not constant", label.c_str());
    const Tensor* t = bz->initializer();
    if (t->dtype() != p.b_dtype)
      return unsupported("node %s: b_zero_point dtype %s is not B's", label.c_str(), dtype_name(t->dtype()));
    const bool scalar = t->num_elements() == 1 && t->rank() <= 1;
    const bool per_column = t->rank() == 1 && t->dim(0) == p.n;
    if (!scalar && !per_column)
      return unsupported("node %s: b_zero_point %s: a scalar or one per column (N = %lld) only", label.c_str(),
                         t->description().c_str(), static_cast<long long>(p.n));
    p.b_zero_point = t;
  }
  p.b = bt;
  return p;
}

int32_t x8_at(DataType t, const void* data, int64_t i) {
  return t == DataType::kUInt8 ? static_cast<const uint8_t*>(data)[i] : static_cast<const int8_t*>(data)[i];
}

// B - s as int8 and z[n] = b_zp[n] - s (empty when all 0).
void shift_weights(MatMulIntegerPlan& p) {
  const int32_t s = p.b_dtype == DataType::kUInt8 ? 128 : 0;
  const int64_t size = p.k * p.n;
  p.b_shifted.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i)
    p.b_shifted[static_cast<size_t>(i)] = static_cast<int8_t>(x8_at(p.b_dtype, p.b->raw_data(), i) - s);
  std::vector<int32_t> z(static_cast<size_t>(p.n));
  bool any = false;
  for (int64_t c = 0; c < p.n; ++c) {
    const int32_t zp = p.b_zero_point
                           ? x8_at(p.b_dtype, p.b_zero_point->raw_data(), p.b_zero_point->num_elements() == 1 ? 0 : c)
                           : 0;
    z[static_cast<size_t>(c)] = zp - s;
    any = any || zp != s;
  }
  if (any) p.z = std::move(z);
}

class OnednnMatMulIntegerKernel final : public Kernel {
 public:
  OnednnMatMulIntegerKernel(MatMulIntegerPlan p, const ops::KernelFn* ref) : reference(ref), plan(std::move(p)) {}
  // Packs B - s and makes the int8 matmul (prepare_planned).
  Status init(const ir::Node& node);
  Status run(ops::KernelContext& ctx) const override {
    const ir::Node& node = ctx.node();
    const Tensor* a = ctx.input(0);
    const Tensor* b = ctx.input(1);
    const Tensor* az = node.num_inputs() > 2 ? ctx.input(2) : nullptr;
    const Tensor* bz = node.num_inputs() > 3 ? ctx.input(3) : nullptr;
    const bool as_prepared =
        a && a->dtype() == plan.a_dtype && a->dims() == plan.a_dims && b && b->raw_data() == plan.b->raw_data() &&
        (plan.has_a_zero_point ? az && az->dtype() == plan.a_dtype && az->num_elements() == 1 : !az) &&
        (plan.b_zero_point ? bz && bz->raw_data() == plan.b_zero_point->raw_data() : !bz);
    if (!as_prepared) return (*reference)(ctx);
    const int32_t a_zp = az ? x8_at(az->dtype(), az->raw_data(), 0) : 0;
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kInt32, plan.y_dims, TensorInit::kUninitialized));
    char* ws = static_cast<char*>(onednn::thread_workspace(scratch_bytes));
    if (!ws && scratch_bytes > 0)
      return resource_exhausted("node %s: cannot allocate a %zu-byte oneDNN workspace", node.label().c_str(),
                                scratch_bytes);
    try {
      const memory& scratch = memories.get(0, onednn::bytes_desc(scratch_bytes), scratch_bytes > 0 ? ws : nullptr);
      const memory& src = memories.get(1, src_md, a->raw_data());
      const memory& dst = memories.get(2, dst_md, y->raw_data());
      onednn::Args args{{DNNL_ARG_SRC, &src},
                        {DNNL_ARG_WEIGHTS, &weights},
                        {DNNL_ARG_DST, &dst},
                        {DNNL_ARG_SCRATCHPAD, &scratch}};
      if (plan.has_a_zero_point) args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, memories.get(3, zp_md, &a_zp));
      dnnl::stream& s = onednn::thread_stream();
      args.execute(matmul, s);
      s.wait();
    } catch (const dnnl::error& e) {
      return internal_error("node %s: oneDNN int8 matmul failed: %s", node.label().c_str(), e.what());
    }
    if (!plan.z.empty()) correct(a->raw_data(), a_zp, y->data<int32_t>());
    return ok_status();
  }
  std::string implementation() const override { return impl; }

  // Y[m, n] -= z[n] * (sum_k A[m, k] - K * a_zp), wrapping (uint32).
  void correct(const void* a, int32_t a_zp, int32_t* y) const {
    const int64_t k = plan.k, n = plan.n;
    const uint32_t* z = reinterpret_cast<const uint32_t*>(plan.z.data());
    const bool u8 = plan.a_dtype == DataType::kUInt8;
    parallel_for(0, plan.m, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, k + n)), [=](int64_t mb, int64_t me) {
      for (int64_t m = mb; m < me; ++m) {
        int64_t sum = 0;  // |sum| <= K * 255: exact
        if (u8) {
          const uint8_t* row = static_cast<const uint8_t*>(a) + m * k;
          for (int64_t i = 0; i < k; ++i) sum += row[i];
        } else {
          const int8_t* row = static_cast<const int8_t*>(a) + m * k;
          for (int64_t i = 0; i < k; ++i) sum += row[i];
        }
        const uint32_t r = static_cast<uint32_t>(sum) - static_cast<uint32_t>(k) * static_cast<uint32_t>(a_zp);
        uint32_t* out = reinterpret_cast<uint32_t*>(y + m * n);
        for (int64_t c = 0; c < n; ++c) out[c] -= z[c] * r;
      }
    });
  }

  const ops::KernelFn* reference = nullptr;
  MatMulIntegerPlan plan;
  std::string impl;
  dnnl::matmul matmul;
  memory::desc src_md, dst_md;
  memory weights;
  std::shared_ptr<void> weights_buffer;
  memory::desc zp_md{{1}, memory::data_type::s32, memory::format_tag::a};
  onednn::RunMemories memories;  // scratch, src, dst, the source zero point
  size_t scratch_bytes = 0;
};

Status OnednnMatMulIntegerKernel::init(const ir::Node& node) {
  MatMulIntegerPlan& p = plan;
  shift_weights(p);
  try {
    onednn::CreationThreadsScope threads;
    const auto ab = memory::format_tag::ab;
    src_md = memory::desc({p.m, p.k}, dnnl_x8(p.a_dtype), ab);
    dst_md = memory::desc({p.m, p.n}, memory::data_type::s32, ab);
    const memory::desc user_w({p.k, p.n}, memory::data_type::s8, ab);
    const memory::desc any_w({p.k, p.n}, memory::data_type::s8, memory::format_tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // A runtime source zero point when the node has one (its value is known at run time only).
    if (p.has_a_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, any_w, dst_md), attr, onednn::cpu_engine());
    KILN_ASSIGN_OR_RETURN(impl, onednn::fast_implementation(node, pd));
    matmul = dnnl::matmul(pd);
    scratch_bytes = pd.scratchpad_desc().get_size();
    weights_buffer = onednn::pack_shared_here(user_w, p.b_shifted.data(), pd.weights_desc());
    weights = memory(pd.weights_desc(), onednn::cpu_engine(), weights_buffer.get());
  } catch (const dnnl::error& e) {
    return unsupported("node %s: oneDNN has no int8 matmul for it: %s", node.label().c_str(), e.what());
  }
  return ok_status();
}

Expected<std::unique_ptr<Kernel>> prepare_matmul_integer(const ir::Node& node) {
  return onednn::prepare_planned<OnednnMatMulIntegerKernel>(node, plan_matmul_integer);
}

Status matmul_integer_applicable(const ir::Node& node) { return plan_matmul_integer(node).status(); }

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "MatMulInteger",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "onednn",
                                    .applicable = matmul_integer_applicable,
                                    .prepare = prepare_matmul_integer}));

}  // namespace kiln::kernels
