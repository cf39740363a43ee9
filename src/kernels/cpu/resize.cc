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

bool static_4d_f32(const ir::Value* v, std::vector<int64_t>* dims) {
  if (!v || !v->type().is_tensor() || v->dtype() != DataType::kFloat32 || !v->shape().is_static()) return false;
  *dims = v->shape().static_dims();
  return dims->size() == 4;
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
  if (n.num_outputs() != 1 || !static_4d_f32(n.input(0), &p.in_dims) || !static_4d_f32(n.output(0), &p.out_dims))
    return unsupported("not a static 4-D float32 resize");
  if (n.attr_string("mode", "nearest") != "nearest") return unsupported("mode is not nearest");
  if (n.op_type() == "Resize" && n.opset() >= 11) {
    if (n.attr_string("coordinate_transformation_mode", "half_pixel") != "asymmetric" ||
        n.attr_string("nearest_mode", "round_prefer_floor") != "floor")
      return unsupported("coordinates are not asymmetric with floor");
    if (n.has_attr("axes") || n.attr_int("antialias", 0) != 0) return unsupported("axes or antialias");
  }
  if (p.in_dims[0] != p.out_dims[0] || p.in_dims[1] != p.out_dims[1]) return unsupported("N or C changes");
  for (int a = 2; a < 4; ++a)
    if (p.in_dims[a] <= 0 || p.out_dims[a] % p.in_dims[a] != 0) return unsupported("not a whole-number factor");
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
                       .applicable = [](const ir::Node& n) { return plan_upsample(n).ok(); },
                       .prepare = prepare_upsample};
}

}  // namespace

KILN_REGISTER_KERNEL(upsample_factory("Resize"));
KILN_REGISTER_KERNEL(upsample_factory("Upsample"));

}  // namespace kiln::kernels
