// kiln Pooling: ONNX MaxPool, AveragePool, GlobalMaxPool or GlobalAveragePool (attribute
// `mode`) on a tensor in the layout attribute `format` says (ops/layout.h). The
// layout_assignment pass makes one of an ONNX pool inside a region of blocked values, so the
// region need not be converted back to NCHW around it. Inference and the reference kernel
// are the ONNX op's on the plain view.
#include <string>

#include "ops/fused_activation.h"
#include "ops/layout.h"
#include "ops/op_util.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

struct PoolingAttrs {
  std::string mode;
  bool blocked = false;
  int64_t c0 = 0;
};

Expected<PoolingAttrs> pooling_attrs(const ir::Node& node) {
  PoolingAttrs a;
  a.mode = node.attr_string("mode", "");
  if (a.mode != "MaxPool" && a.mode != "AveragePool" && a.mode != "GlobalMaxPool" && a.mode != "GlobalAveragePool")
    return invalid_argument("node %s: mode '%s', expected MaxPool, AveragePool, GlobalMaxPool or GlobalAveragePool",
                            node.label().c_str(), a.mode.c_str());
  const std::string format = node.attr_string("format", kFormatPlain);
  if (!valid_format(format))
    return invalid_argument("node %s: format '%s', expected %s or %s", node.label().c_str(), format.c_str(),
                            kFormatPlain, kFormatBlocked);
  a.blocked = is_blocked_format(format);
  a.c0 = node.attr_int("c0", 0);
  // Up to 64 for NC1HWC0 blocks; an int8 channels-last tensor is one block of all its
  // channels (compiler/passes/int8_layout.cc).
  if (a.blocked && (a.c0 <= 0 || a.c0 > 65536))
    return invalid_argument("node %s: a blocked format needs c0 in 1..65536, got %lld", node.label().c_str(),
                            (long long)a.c0);
  return a;
}

Status infer_pooling(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(PoolingAttrs a, pooling_attrs(ctx.node()));
  auto plain = [&](InferContext& inner) { return run_onnx_inference(inner, a.mode.c_str()); };
  if (!a.blocked) return plain(ctx);
  return infer_on_plain_view(ctx, a.c0, {true}, true, plain);
}

Status pooling_kernel(KernelContext& ctx) {
  KILN_ASSIGN_OR_RETURN(PoolingAttrs a, pooling_attrs(ctx.node()));
  auto plain = [&](KernelContext& inner) -> Status {
    KILN_ASSIGN_OR_RETURN(Tensor y, run_onnx_reference(inner, a.mode.c_str(), 1));
    inner.set_output(0, std::move(y));
    return ok_status();
  };
  if (!a.blocked) return plain(ctx);
  return run_on_plain_view(ctx, a.c0, {true}, true, plain);
}

}  // namespace

KILN_REGISTER_OP(OpSchema("Pooling", kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("mode", AttrKind::kString)
                     .attr("format", AttrKind::kString)
                     .attr("c0", AttrKind::kInt)
                     .attr("auto_pad", AttrKind::kString)
                     .attr("ceil_mode", AttrKind::kInt)
                     .attr("count_include_pad", AttrKind::kInt)
                     .attr("dilations", AttrKind::kInts)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .infer(infer_pooling)
                     .kernel(pooling_kernel)
                     .doc("ONNX pooling op `mode` on a tensor in layout `format` (docs/fused-ops.md)"));

}  // namespace kiln::ops
