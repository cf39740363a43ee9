// Kiln's AippConv: a static Aipp node and the convolution reading its image, folded into one
// node by compiler/passes/aipp_conv_fusion.cc so that the float32 image is never stored
// (docs/aipp.md). Inputs: the raw image (uint8), W, optional B; the Aipp node's attributes
// (mode, params, output_layout, output_shape) and FusedConv's (window, activation, y_format,
// c0). Defined as the composition of the two: the reference kernel runs the registered Aipp
// reference kernel, then FusedConv's on its output, on this very node (the attribute names
// are theirs), so the folded node computes what the unfolded pair did. The fast kernel is
// kernels/cpu/aipp_conv.cc.
#include <vector>

#include "ops/aipp.h"
#include "ops/op_util.h"

namespace kiln::ops {

bool is_aipp_node(const ir::Node& node) {
  return node.domain() == kKilnDomain && (node.op_type() == kAippOp || node.op_type() == kAippConvOp);
}

namespace {

using ir::AttrKind;

Expected<const OpSchema*> kiln_schema(const ir::Node& node, const char* op) {
  const OpSchema* s = OpRegistry::instance().find(kKilnDomain, op, kKilnOpset);
  if (!s || !s->infer_fn() || !s->kernel_fn())
    return internal_error("node %s: kiln %s is not registered", node.label().c_str(), op);
  return s;
}

// The Aipp half's attributes: static only (the fold takes no dynamic Aipp), NCHW image.
Expected<AippNodeInfo> aipp_conv_info(const ir::Node& node) {
  KILN_ASSIGN_OR_RETURN(AippNodeInfo info, aipp_node_info(node));
  if (info.dynamic || info.out.nhwc)
    return invalid_argument("node %s: AippConv folds a static Aipp writing NCHW only", node.label().c_str());
  return info;
}

Status infer_aipp_conv(InferContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(AippNodeInfo info, aipp_conv_info(node));
  if (ctx.input_type(0).dtype != DataType::kUInt8)
    return invalid_argument("node %s: the image input must be uint8", node.label().c_str());
  KILN_ASSIGN_OR_RETURN(const OpSchema* conv, kiln_schema(node, "FusedConv"));
  // FusedConv's inference with X the image the Aipp half writes.
  ir::TensorType image;
  image.dtype = DataType::kFloat32;
  image.shape = Shape::from_static(info.output_dims);
  std::vector<const ir::TensorType*> types{&image};
  std::vector<const Tensor*> constants{nullptr};
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    types.push_back(ctx.has_input(i) ? &ctx.input_type(i) : nullptr);
    constants.push_back(ctx.has_input(i) ? ctx.input_constant(i) : nullptr);
  }
  InferContext conv_ctx(node, std::move(types), std::move(constants));
  KILN_RETURN_IF_ERROR(conv->infer_fn()(conv_ctx));
  ctx.output(0) = conv_ctx.output(0);
  return ok_status();
}

Status aipp_conv_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_RETURN_IF_ERROR(aipp_conv_info(node).status());
  KILN_ASSIGN_OR_RETURN(const OpSchema* aipp, kiln_schema(node, kAippOp));
  KILN_ASSIGN_OR_RETURN(const OpSchema* conv, kiln_schema(node, "FusedConv"));
  std::vector<RuntimeValue> image(1);
  KernelContext aipp_ctx(node, {ctx.value(0)}, &image, ctx.subgraphs());
  KILN_RETURN_IF_ERROR(aipp->kernel_fn()(aipp_ctx));
  std::vector<const RuntimeValue*> conv_inputs{&image[0]};
  for (int i = 1; i < ctx.num_inputs(); ++i) conv_inputs.push_back(ctx.value(i));
  std::vector<RuntimeValue> y(1);
  KernelContext conv_ctx(node, std::move(conv_inputs), &y, ctx.subgraphs());
  KILN_RETURN_IF_ERROR(conv->kernel_fn()(conv_ctx));
  ctx.set_output_value(0, std::move(y[0]));
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema(kAippConvOp, kKilnDomain)
                     .since(1, kKilnOpset)
                     .inputs(2, 3)
                     .outputs(1, 1)
                     // The Aipp half (ops/aipp_params.h).
                     .attr("mode", AttrKind::kString)
                     .attr("params", AttrKind::kTensor)
                     .attr("output_layout", AttrKind::kString)
                     .required_attr("output_shape", AttrKind::kInts)
                     // The convolution half (FusedConv's, X always NCHW).
                     .attr("auto_pad", AttrKind::kString)
                     .attr("dilations", AttrKind::kInts)
                     .attr("group", AttrKind::kInt)
                     .attr("kernel_shape", AttrKind::kInts)
                     .attr("pads", AttrKind::kInts)
                     .attr("strides", AttrKind::kInts)
                     .attr("y_format", AttrKind::kString)
                     .attr("c0", AttrKind::kInt)
                     .attr("activation", AttrKind::kString)
                     .attr("activation_params", AttrKind::kFloats)
                     .attr("activation_post_scale", AttrKind::kFloat)
                     .attr("activation_post_shift", AttrKind::kFloat)
                     .attr("precision", AttrKind::kString)
                     .infer(infer_aipp_conv)
                     .kernel(aipp_conv_kernel)
                     .doc("Y = act(Conv(Aipp(image), W, B)): a static Aipp and the convolution reading "
                          "its image as one node (docs/aipp.md)"));

}  // namespace kiln::ops
