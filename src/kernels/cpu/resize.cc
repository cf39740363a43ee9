// Resize (and Upsample) by whole-number factors in nearest mode with the floor of asymmetric
// coordinates, the upsampling of FPN-style detection heads (PP-OCR det's DB head: x2, x4, x8):
// each output pixel copies input pixel (y / sy, x / sx). The reference kernel computes the
// source coordinate of every output element in floating point; here an input row is widened
// once and the widened row copied to its sy output rows (memory-bound: one read, one write).
#include <cstring>
#include <memory>
#include <vector>

#include "core/parallel.h"
#include "kernels/kernel_registry.h"

namespace kiln::kernels {
namespace {

struct UpsamplePlan {
  std::vector<int64_t> in_dims, out_dims;  // N, C, H, W
  int64_t sy = 1, sx = 1;
};

Status static_4d_f32(const char* what, const ir::Value* v, std::vector<int64_t>* dims) {
  if (!v || !v->type().is_tensor()) return unsupported("%s is not a tensor", what);
  if (v->dtype() != DataType::kFloat32)
    return unsupported("%s dtype %s: only float32", what, dtype_name(v->dtype()));
  if (!v->shape().is_static())
    return unsupported("%s %s: open dims (static shapes only)", what, v->type().to_string().c_str());
  *dims = v->shape().static_dims();
  if (dims->size() != 4) return unsupported("%s %s: 4-D only", what, dims_to_string(*dims).c_str());
  return ok_status();
}

// The float factors a constant `scales` input gives, or empty when absent (Resize-11+ with
// `sizes`) or not a constant.
Expected<std::vector<float>> constant_scales(const ir::Node& n) {
  if (n.op_type() == "Upsample" && n.opset() < 9) return n.attr_floats("scales");  // an attribute then
  const int index = n.op_type() == "Upsample" || n.opset() < 11 ? 1 : 2;
  if (n.num_inputs() <= index || !n.input(index)) return std::vector<float>{};
  const ir::Value* s = n.input(index);
  if (!s->has_initializer()) return unsupported("scales are computed at run time");
  const Tensor* t = s->initializer();
  if (t->dtype() != DataType::kFloat32) return unsupported("scales are not float32");
  if (t->num_elements() == 0) return std::vector<float>{};
  const float* p = t->data<float>();
  return std::vector<float>(p, p + t->num_elements());
}

Expected<UpsamplePlan> plan_upsample(const ir::Node& n) {
  UpsamplePlan p;
  if (n.num_outputs() != 1) return unsupported("%d outputs, expected 1", n.num_outputs());
  KILN_RETURN_IF_ERROR(static_4d_f32("X", n.input(0), &p.in_dims));
  KILN_RETURN_IF_ERROR(static_4d_f32("Y", n.output(0), &p.out_dims));
  if (const std::string mode = n.attr_string("mode", "nearest"); mode != "nearest")
    return unsupported("mode %s: only nearest", mode.c_str());
  if (n.op_type() == "Resize" && n.opset() >= 11) {
    const std::string ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
    const std::string nearest = n.attr_string("nearest_mode", "round_prefer_floor");
    if (ctm != "asymmetric" || nearest != "floor")
      return unsupported("coordinate_transformation_mode %s with nearest_mode %s: only asymmetric with floor",
                         ctm.c_str(), nearest.c_str());
    if (n.has_attr("axes")) return unsupported("the axes attribute");
    if (n.attr_int("antialias", 0) != 0) return unsupported("antialias");
  }
  if (p.in_dims[0] != p.out_dims[0] || p.in_dims[1] != p.out_dims[1])
    return unsupported("N or C changes: X %s, Y %s", dims_to_string(p.in_dims).c_str(),
                       dims_to_string(p.out_dims).c_str());
  for (int a = 2; a < 4; ++a)
    if (p.in_dims[a] <= 0 || p.out_dims[a] % p.in_dims[a] != 0)
      return unsupported("X %s to Y %s: not a whole-number factor", dims_to_string(p.in_dims).c_str(),
                         dims_to_string(p.out_dims).c_str());
  p.sy = p.out_dims[2] / p.in_dims[2];
  p.sx = p.out_dims[3] / p.in_dims[3];
  // Given scales must be the whole-number factors themselves (asymmetric coordinates divide
  // by the scale, not by the size ratio).
  KILN_ASSIGN_OR_RETURN(std::vector<float> scales, constant_scales(n));
  if (!scales.empty() && (scales.size() != 4 || scales[0] != 1.0f || scales[1] != 1.0f ||
                          scales[2] != static_cast<float>(p.sy) || scales[3] != static_cast<float>(p.sx)))
    return unsupported("scales differ from the size ratio");
  return p;
}

class UpsampleKernel final : public Kernel {
 public:
  UpsampleKernel(UpsamplePlan plan, const ops::KernelFn* reference) : plan_(std::move(plan)), reference_(reference) {}

  Status run(ops::KernelContext& ctx) const override {
    const Tensor* x = ctx.input(0);
    if (!x || x->dtype() != DataType::kFloat32 || x->dims() != plan_.in_dims) return (*reference_)(ctx);
    KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, plan_.out_dims,
                                                          TensorInit::kUninitialized));
    const int64_t w = plan_.in_dims[3], sx = plan_.sx, sy = plan_.sy;
    const int64_t out_w = w * sx;
    const int64_t rows = plan_.in_dims[0] * plan_.in_dims[1] * plan_.in_dims[2];
    const float* src = x->data<float>();
    float* dst = y->data<float>();
    parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(out_w * sy, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const float* in = src + r * w;
        float* out = dst + r * sy * out_w;
        for (int64_t i = 0; i < w; ++i)
          for (int64_t k = 0; k < sx; ++k) out[i * sx + k] = in[i];
        for (int64_t k = 1; k < sy; ++k) std::memcpy(out + k * out_w, out, static_cast<size_t>(out_w) * sizeof(float));
      }
    });
    return ok_status();
  }
  std::string implementation() const override { return "kiln:upsample"; }

 private:
  UpsamplePlan plan_;
  const ops::KernelFn* reference_;
};

Expected<std::unique_ptr<Kernel>> prepare_upsample(const ir::Node& node) {
  return prepare_with_reference<UpsampleKernel>(node, plan_upsample);
}

KernelFactory upsample_factory(const char* op) {
  return KernelFactory{.domain = ops::kOnnxDomain,
                       .op_type = op,
                       .device = DeviceKind::kCpu,
                       .priority = 100,
                       .name = "kiln",
                       .applicable = [](const ir::Node& n) { return plan_upsample(n).status(); },
                       .prepare = prepare_upsample};
}

}  // namespace

KILN_REGISTER_KERNEL(upsample_factory("Resize"));
KILN_REGISTER_KERNEL(upsample_factory("Upsample"));

}  // namespace kiln::kernels
