// Comparisons and logic with NumPy broadcasting: Equal, Less, Greater, LessOrEqual,
// GreaterOrEqual, And, Or, Xor (one table, one shared kernel), Not, and Where.
#include <cstring>
#include <string>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

// ---- reference functions -------------------------------------------------------------

#define KILN_PREDICATE(Name, types, expr) \
  struct Name {                           \
    static constexpr TypeSet kTypes = types; \
    template <typename T>                 \
    static bool apply(const T& a, const T& b) { \
      return expr;                        \
    }                                     \
  };

KILN_PREDICATE(EqualFn, kTypeNumeric | kTypeBool, a == b)
KILN_PREDICATE(LessFn, kTypeNumeric, a < b)
KILN_PREDICATE(GreaterFn, kTypeNumeric, a > b)
KILN_PREDICATE(LessOrEqualFn, kTypeNumeric, a <= b)
KILN_PREDICATE(GreaterOrEqualFn, kTypeNumeric, a >= b)
KILN_PREDICATE(AndFn, kTypeBool, a && b)
KILN_PREDICATE(OrFn, kTypeBool, a || b)
KILN_PREDICATE(XorFn, kTypeBool, a != b)
#undef KILN_PREDICATE

// ---- the shared kernel ---------------------------------------------------------------------

// Both inputs share a dtype; the output is bool. Equal also compares strings (opset 19).
template <typename Op>
Status compare_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& a = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> b_dims, legacy_broadcast_dims(node, a.dims(), ctx.input(1)->dims()));
  const Tensor b = ctx.input(1)->reshaped(std::move(b_dims));
  const bool strings = a.dtype() == DataType::kString && node.op_type() == "Equal";
  if (!strings) KILN_RETURN_IF_ERROR(check_dtype(node, a.dtype(), Op::kTypes));
  if (b.dtype() != a.dtype())
    return invalid_argument("node %s: input 1 is %s but input 0 is %s", node.label().c_str(),
                            dtype_name(b.dtype()), dtype_name(a.dtype()));
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {a.dims(), b.dims()}));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kBool, plan.out_dims));
  if (strings) {
    broadcast_binary(plan, a.data<std::string>(), b.data<std::string>(), y->data<bool>(),
                     [](const std::string& u, const std::string& v) { return u == v; });
    return ok_status();
  }
  Tensor af = half_to_float(a), bf = half_to_float(b);
  dispatch_types<Op::kTypes & ~kTypeHalf>(af.dtype(), [&]<typename T>() {
    broadcast_binary(plan, af.data<T>(), bf.data<T>(), y->data<bool>(),
                     [](T u, T v) { return Op::apply(u, v); });
  });
  return ok_status();
}

struct CompareEntry {
  const char* name;
  int64_t since;
  TypeSet types;
  KernelFn kernel;
};

template <typename Op>
CompareEntry entry(const char* name, int64_t since) {
  return CompareEntry{name, since, Op::kTypes, &compare_kernel<Op>};
}

// Opset 7 introduced multidirectional broadcasting for all of these; the kernel and
// inference apply the older broadcast/axis attributes below 7.
const CompareEntry kCompareOps[] = {
    entry<EqualFn>("Equal", 1),
    entry<LessFn>("Less", 1),
    entry<GreaterFn>("Greater", 1),
    entry<LessOrEqualFn>("LessOrEqual", 12),
    entry<GreaterOrEqualFn>("GreaterOrEqual", 12),
    entry<AndFn>("And", 1),
    entry<OrFn>("Or", 1),
    entry<XorFn>("Xor", 1),
};

Status infer_compare(InferContext& ctx, TypeSet types) {
  if (!ctx.has_input(0) || !ctx.has_input(1)) return ok_status();
  DataType a = ctx.input_type(0).dtype, b = ctx.input_type(1).dtype;
  if (!(a == DataType::kString && ctx.node().op_type() == "Equal"))
    KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), a, types));
  if (a != DataType::kUndefined && b != DataType::kUndefined && a != b)
    return invalid_argument("node %s: input 1 is %s but input 0 is %s", ctx.node().label().c_str(),
                            dtype_name(b), dtype_name(a));
  if (ctx.node().opset() >= 7) return infer_broadcast_bool(ctx);
  const Shape& sa = ctx.input_type(0).shape;
  KILN_ASSIGN_OR_RETURN(Shape sb, legacy_broadcast_shape(ctx.node(), sa, ctx.input_type(1).shape));
  KILN_ASSIGN_OR_RETURN(Shape out, broadcast_shapes(ctx.node(), sa, sb));
  ctx.set_output(0, DataType::kBool, std::move(out));
  return ok_status();
}

// ---- Not ----------------------------------------------------------------------------------

Status not_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype(), kTypeBool));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kBool, x.dims()));
  map_elements(x.data<bool>(), y->data<bool>(), x.num_elements(), [](bool v) { return !v; });
  return ok_status();
}

Status infer_not(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), ctx.input_type(0).dtype, kTypeBool));
  return infer_same_as_input(ctx);
}

// ---- Where ----------------------------------------------------------------------------------

template <typename T>
void select(const BroadcastPlan& plan, const bool* c, const T* x, const T* y, T* out) {
  for_each_block(plan, [&](int64_t o, const int64_t* off, int64_t len) {
    const bool* pc = c + off[0];
    const T* px = x + off[1];
    const T* py = y + off[2];
    const int64_t sc = plan.inner_step[0], sx = plan.inner_step[1], sy = plan.inner_step[2];
    for (int64_t i = 0; i < len; ++i) out[o + i] = pc[i * sc] ? px[i * sx] : py[i * sy];
  });
}

// Elements are copied, never interpreted: any dtype works, dispatched by element size.
Status where_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& c = *ctx.input(0);
  const Tensor& x = *ctx.input(1);
  const Tensor& y = *ctx.input(2);
  if (c.dtype() != DataType::kBool)
    return invalid_argument("node %s: condition must be bool, got %s", node.label().c_str(), dtype_name(c.dtype()));
  if (x.dtype() != y.dtype())
    return invalid_argument("node %s: X is %s but Y is %s", node.label().c_str(), dtype_name(x.dtype()),
                            dtype_name(y.dtype()));
  KILN_ASSIGN_OR_RETURN(BroadcastPlan plan, make_broadcast_plan(node, {c.dims(), x.dims(), y.dims()}));
  KILN_ASSIGN_OR_RETURN(Tensor * out, ctx.allocate_output(0, x.dtype(), plan.out_dims));
  const bool* pc = c.data<bool>();
  if (x.dtype() == DataType::kString) {
    select(plan, pc, x.data<std::string>(), y.data<std::string>(), out->data<std::string>());
    return ok_status();
  }
  switch (dtype_bits(x.dtype())) {
    case 8: select(plan, pc, x.data<uint8_t>(), y.data<uint8_t>(), out->data<uint8_t>()); break;
    case 16: select(plan, pc, x.data<uint16_t>(), y.data<uint16_t>(), out->data<uint16_t>()); break;
    case 32: select(plan, pc, x.data<uint32_t>(), y.data<uint32_t>(), out->data<uint32_t>()); break;
    case 64: select(plan, pc, x.data<uint64_t>(), y.data<uint64_t>(), out->data<uint64_t>()); break;
    default:
      return unsupported("node %s: dtype %s is not supported", node.label().c_str(), dtype_name(x.dtype()));
  }
  return ok_status();
}

Status infer_where(InferContext& ctx) {
  if (!ctx.has_input(0) || !ctx.has_input(1) || !ctx.has_input(2)) return ok_status();
  const ir::Node& node = ctx.node();
  DataType c = ctx.input_type(0).dtype, x = ctx.input_type(1).dtype, y = ctx.input_type(2).dtype;
  KILN_RETURN_IF_ERROR(check_dtype(node, c, kTypeBool, "condition"));
  if (x != DataType::kUndefined && y != DataType::kUndefined && x != y)
    return invalid_argument("node %s: X is %s but Y is %s", node.label().c_str(), dtype_name(x), dtype_name(y));
  KILN_RETURN_IF_ERROR(infer_broadcast(ctx));
  ctx.output(0).dtype = x != DataType::kUndefined ? x : y;
  return ok_status();
}

int register_logical_ops() {
  for (const CompareEntry& e : kCompareOps) {
    const TypeSet types = e.types;
    OpRegistry::instance().add(OpSchema(e.name)
                                   .since(e.since)
                                   .inputs(2, 2)
                                   .outputs(1, 1)
                                   .infer([types](InferContext& ctx) { return infer_compare(ctx, types); })
                                   .kernel(e.kernel));
  }
  OpRegistry::instance().add(OpSchema("Not").since(1).inputs(1, 1).outputs(1, 1).infer(infer_not).kernel(not_kernel));
  OpRegistry::instance().add(
      OpSchema("Where").since(9).inputs(3, 3).outputs(1, 1).infer(infer_where).kernel(where_kernel));
  return static_cast<int>(std::size(kCompareOps)) + 2;
}

[[maybe_unused]] const int kRegistered = register_logical_ops();

}  // namespace
}  // namespace kiln::ops
