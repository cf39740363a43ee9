// Kiln's Transpose kernel (ONNX Transpose; any dtype of 1, 2, 4 or 8 bytes, static shapes): at
// prepare, output dims whose input dims stay neighbours in the permutation merge (and dims of
// 1 drop), which turns BERT's [1,128,12,64] -> [1,12,128,64] heads split into 1536 rows of 64
// contiguous floats. The run fills the output's rows in parallel: a row whose elements are
// contiguous in the input is one memcpy, any other a gather at the input's stride. The
// reference kernel walks every element with a generic strided copy on one thread, after
// zero-filling the output.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/op_util.h"

namespace kiln::kernels {
namespace {

// The permutation, read once: output dims after merging, with the input stride (in elements)
// of each.
struct TransposePlan {
  std::vector<int64_t> in_dims, y_dims;  // the tensors' dims
  std::vector<int64_t> out_dims, strides;  // merged
  size_t elem_size = 0;
};

// Sub-byte types (4- and 2-bit) pack several elements per byte: the reference moves those.
bool sub_byte(DataType t) {
  return t == DataType::kUInt4 || t == DataType::kInt4 || t == DataType::kFloat4E2M1 ||
         t == DataType::kUInt2 || t == DataType::kInt2;
}

Expected<TransposePlan> plan_transpose(const ir::Node& node) {
  const std::string label = node.label();
  if (node.domain() != ops::kOnnxDomain || node.op_type() != "Transpose" ||
      node.inputs().size() != 1 || node.outputs().size() != 1 || !node.input(0))
    return unsupported("node %s: not a Transpose", label.c_str());
  const ir::Value* x = node.input(0);
  if (!x->shape().has_rank() || !x->shape().is_static())
    return unsupported("node %s: data %s: open dims (static shapes only)", label.c_str(),
                       x->type().to_string().c_str());
  if (x->dtype() == DataType::kString || x->dtype() == DataType::kUndefined || sub_byte(x->dtype()))
    return unsupported("node %s: dtype %s: not whole bytes per element", label.c_str(), dtype_name(x->dtype()));
  TransposePlan p;
  p.elem_size = dtype_bytes(x->dtype(), 1);
  if (p.elem_size != 1 && p.elem_size != 2 && p.elem_size != 4 && p.elem_size != 8)
    return unsupported("node %s: %zu-byte elements", label.c_str(), p.elem_size);
  p.in_dims = x->shape().static_dims();
  const int rank = static_cast<int>(p.in_dims.size());
  std::vector<int> perm;
  if (const ir::Attribute* a = node.attr("perm")) {
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    if (static_cast<int>(a->ints.size()) != rank)
      return unsupported("node %s: perm of the wrong length", label.c_str());
    for (int64_t d : a->ints) {
      if (d < 0 || d >= rank || seen[static_cast<size_t>(d)])
        return unsupported("node %s: perm is not a permutation", label.c_str());
      seen[static_cast<size_t>(d)] = true;
      perm.push_back(static_cast<int>(d));
    }
  } else {
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  for (int d : perm) p.y_dims.push_back(p.in_dims[static_cast<size_t>(d)]);
  const std::vector<int64_t> in_strides = ops::contiguous_strides(p.in_dims);
  for (int d : perm) {
    const int64_t extent = p.in_dims[static_cast<size_t>(d)], stride = in_strides[static_cast<size_t>(d)];
    if (extent == 1) continue;
    // Follows the previous output dim in the input too: one dim.
    if (!p.out_dims.empty() && p.strides.back() == stride * extent) {
      p.out_dims.back() *= extent;
      p.strides.back() = stride;
      continue;
    }
    p.out_dims.push_back(extent);
    p.strides.push_back(stride);
  }
  if (p.out_dims.empty()) {  // a single element
    p.out_dims.push_back(1);
    p.strides.push_back(1);
  }
  return p;
}

template <typename T>
void gather_row(const T* src, int64_t stride, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(TransposePlan p, const ops::KernelFn* reference)
      : plan_(std::move(p)), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    const ir::Value* decl = ctx.node().input(0);
    if (!x || x->dtype() != decl->dtype() || x->dims() != plan_.in_dims) return (*reference_)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x->dtype(), plan_.y_dims,
                                                          TensorInit::kUninitialized));
    const int m = static_cast<int>(plan_.out_dims.size());
    const int64_t inner = plan_.out_dims.back(), inner_stride = plan_.strides.back();
    int64_t rows = 1;
    for (int i = 0; i + 1 < m; ++i) rows *= plan_.out_dims[static_cast<size_t>(i)];
    const size_t es = plan_.elem_size;
    const char* src = static_cast<const char*>(x->raw_data());
    char* dst = static_cast<char*>(y->raw_data());
    const TransposePlan& p = plan_;
    parallel_for(0, rows, std::max<int64_t>(1, (int64_t{1} << 14) / inner), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        // The row's input offset: its output index, digit by digit.
        int64_t offset = 0, rest = row;
        for (int i = m - 2; i >= 0; --i) {
          const int64_t extent = p.out_dims[static_cast<size_t>(i)];
          offset += (rest % extent) * p.strides[static_cast<size_t>(i)];
          rest /= extent;
        }
        const char* s = src + offset * static_cast<int64_t>(es);
        char* d = dst + row * inner * static_cast<int64_t>(es);
        if (inner_stride == 1) {
          std::memcpy(d, s, static_cast<size_t>(inner) * es);
          continue;
        }
        switch (es) {
          case 1: gather_row(reinterpret_cast<const uint8_t*>(s), inner_stride, reinterpret_cast<uint8_t*>(d), inner); break;
          case 2: gather_row(reinterpret_cast<const uint16_t*>(s), inner_stride, reinterpret_cast<uint16_t*>(d), inner); break;
          case 4: gather_row(reinterpret_cast<const uint32_t*>(s), inner_stride, reinterpret_cast<uint32_t*>(d), inner); break;
          default: gather_row(reinterpret_cast<const uint64_t*>(s), inner_stride, reinterpret_cast<uint64_t*>(d), inner); break;
        }
      }
    });
    return ok_status();
  }
  std::string implementation() const override { return "kiln:transpose"; }

 private:
  TransposePlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_transpose(const ir::Node& node) {
  return prepare_with_reference<TransposeKernel>(node, plan_transpose);
}

}  // namespace

KILN_REGISTER_KERNEL((KernelFactory{.domain = ops::kOnnxDomain,
                                    .op_type = "Transpose",
                                    .device = DeviceKind::kCpu,
                                    .priority = 100,
                                    .name = "kiln",
                                    .applicable = [](const ir::Node& n) { return plan_transpose(n).status(); },
                                    .prepare = prepare_transpose}));

}  // namespace kiln::kernels
