// The int8 kernels' epilogue parameters (int8_epilogue.h).
#include "kernels/cpu/int8_epilogue.h"

#include <cmath>
#include <cstring>

#include "core/lowp.h"
#include "kernels/cpu/onednn_util.h"

namespace kiln::kernels::int8 {

Status check_symmetric_weights(const ir::Node& node, const Tensor* zero_points) {
  if (!zero_points) return ok_status();
  for (int64_t i = 0; i < zero_points->num_elements(); ++i)
    if (lowp_to_double(zero_points->dtype(), zero_points->raw_data(), i) != 0)
      return unsupported("node %s: weight zero points must be 0 (symmetric weights)", node.label().c_str());
  return ok_status();
}

Status check_output_scales(const ir::Node& node, const std::vector<float>& scales) {
  for (float s : scales)
    if (!(std::isfinite(s) && s > 0))
      return unsupported("node %s: a requantisation scale of %g (zero, negative or non-finite scales run the "
                         "reference kernel)",
                         node.label().c_str(), static_cast<double>(s));
  return ok_status();
}

Expected<std::vector<float>> float_bias(const ir::Node& node, const Tensor* bias, int64_t n) {
  std::vector<float> out;
  if (!bias) return out;
  if (bias->dtype() != DataType::kInt32 || bias->num_elements() != n)
    return unsupported("node %s: the bias must be int32 with %lld values", node.label().c_str(), (long long)n);
  for (int64_t c = 0; c < n; ++c) out.push_back(static_cast<float>(bias->data<int32_t>()[c]));
  return out;
}

Expected<ops::FusedActivation> epilogue_activation(const ir::Node& node, double y_scale) {
  KILN_ASSIGN_OR_RETURN(ops::FusedActivation act, ops::parse_fused_activation(node));
  const bool ok = act.is_none() || act.kind == ops::FusedActivationKind::kRelu ||
                  (act.kind == ops::FusedActivationKind::kClip && act.p0 <= act.p1);
  if (!ok || act.has_post_affine())
    return unsupported("node %s: activation other than Relu / Clip", node.label().c_str());
  if (act.kind == ops::FusedActivationKind::kClip && y_scale > 0) {
    act.p0 = static_cast<float>(act.p0 / y_scale);
    act.p1 = static_cast<float>(act.p1 / y_scale);
  }
  return act;
}

dnnl::memory float_memory(const dnnl::memory::desc& md, const std::vector<float>& values) {
  dnnl::memory m(md, onednn::cpu_engine());
  std::memcpy(m.get_data_handle(), values.data(), values.size() * sizeof(float));
  return m;
}

}  // namespace kiln::kernels::int8
