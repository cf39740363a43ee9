// Bit-level ops: BitwiseAnd/Or/Xor (opset 18, NumPy broadcasting), BitwiseNot (18) and
// BitCast (26: reinterprets the bytes of each element as another type of the same width).
#include <cstring>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

using ir::AttrKind;

enum class BitOp { kAnd, kOr, kXor };

template <BitOp kOp>
Status bitwise_binary_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  if (!a || !b) return invalid_argument("node %s: both inputs are required", node.label().c_str());
  KILN_RETURN_IF_ERROR(check_dtype(node, a->dtype(), kTypeInts));
  if (b->dtype() != a->dtype())
    return invalid_argument("node %s: input dtypes differ (%s vs %s)", node.label().c_str(), dtype_name(a->dtype()),
                            dtype_name(b->dtype()));
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {a->dims(), b->dims()}));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, a->dtype(), plan.out_dims));
  dispatch_types<kTypeInts>(a->dtype(), [&]<typename T>() {
    broadcast_binary(plan, a->data<T>(), b->data<T>(), y->data<T>(), [](T x, T z) -> T {
      if constexpr (kOp == BitOp::kAnd) return static_cast<T>(x & z);
      if constexpr (kOp == BitOp::kOr) return static_cast<T>(x | z);
      return static_cast<T>(x ^ z);
    });
  });
  return ok_status();
}

Status bitwise_not_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(node, x.dtype(), kTypeInts));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_types<kTypeInts>(x.dtype(), [&]<typename T>() {
    map_elements(x.data<T>(), y->data<T>(), x.num_elements(), [](T v) { return static_cast<T>(~v); });
  });
  return ok_status();
}

Expected<DataType> bitcast_target(const ir::Node& node) {
  const int64_t to = node.attr_int("to", 0);
  if (!dtype_is_valid(static_cast<int32_t>(to)) || to == 0 || to == static_cast<int64_t>(DataType::kString))
    return invalid_argument("node %s: 'to' = %lld is not a valid non-string tensor type", node.label().c_str(),
                            (long long)to);
  return static_cast<DataType>(to);
}

Status infer_bitcast(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType to, bitcast_target(ctx.node()));
  ctx.set_output(0, to, ctx.input_type(0).shape);
  return ok_status();
}

Status bitcast_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(DataType to, bitcast_target(node));
  if (x.dtype() == DataType::kString || dtype_bits(x.dtype()) != dtype_bits(to))
    return invalid_argument("node %s: cannot bit-cast %s (%d bits) to %s (%d bits)", node.label().c_str(),
                            dtype_name(x.dtype()), x.dtype() == DataType::kString ? 0 : dtype_bits(x.dtype()),
                            dtype_name(to), dtype_bits(to));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, to, x.dims()));
  if (to == DataType::kBool) {
    // Any non-zero byte is true; keeps every bool a valid 0/1.
    const auto* src = static_cast<const uint8_t*>(x.raw_data());
    for (int64_t i = 0; i < x.num_elements(); ++i) y->data<bool>()[i] = src[i] != 0;
  } else if (x.size_bytes() > 0) {
    std::memcpy(y->raw_data(), x.raw_data(), x.size_bytes());
  }
  return ok_status();
}

}  // namespace

KILN_REGISTER_OP(OpSchema("BitwiseAnd").since(18).inputs(2, 2).outputs(1, 1).infer(infer_broadcast)
                     .kernel(bitwise_binary_kernel<BitOp::kAnd>));
KILN_REGISTER_OP(OpSchema("BitwiseOr").since(18).inputs(2, 2).outputs(1, 1).infer(infer_broadcast)
                     .kernel(bitwise_binary_kernel<BitOp::kOr>));
KILN_REGISTER_OP(OpSchema("BitwiseXor").since(18).inputs(2, 2).outputs(1, 1).infer(infer_broadcast)
                     .kernel(bitwise_binary_kernel<BitOp::kXor>));
KILN_REGISTER_OP(OpSchema("BitwiseNot").since(18).inputs(1, 1).outputs(1, 1).infer(infer_same_as_input)
                     .kernel(bitwise_not_kernel));
KILN_REGISTER_OP(OpSchema("BitCast").since(26).inputs(1, 1).outputs(1, 1).required_attr("to", AttrKind::kInt)
                     .infer(infer_bitcast).kernel(bitcast_kernel));

}  // namespace kiln::ops
