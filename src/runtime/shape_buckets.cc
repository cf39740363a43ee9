// Output-shape inference for concrete input shapes, input padding and output slicing for
// the shape buckets of a model.
#include "runtime/shape_buckets.h"

#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/runtime_value.h"
#include "ops/registry.h"

namespace kiln::rt {
namespace {

// Shape computations produce a few integers; anything larger is data, left to run time.
constexpr int64_t kMaxEvaluatedElements = 1 << 16;

bool nondeterministic(const ir::Node& n) {
  static const std::unordered_set<std::string> kOps = {"RandomNormal",      "RandomNormalLike",
                                                       "RandomUniform",     "RandomUniformLike",
                                                       "Multinomial",       "Bernoulli",
                                                       "Dropout"};
  return n.domain().empty() && kOps.count(n.op_type()) > 0;
}

// What inference gives, completed by what the compiled graph already knew: a dim the
// compiler fixed holds whatever the inputs are.
ir::TensorType merge(const ir::TensorType& inferred, const ir::TensorType& declared) {
  ir::TensorType out = inferred;
  if (out.dtype == DataType::kUndefined) out.dtype = declared.dtype;
  out.kind = declared.kind;
  if (!out.shape.has_rank()) {
    out.shape = declared.shape;
  } else if (declared.shape.has_rank() && declared.shape.rank() == out.shape.rank()) {
    for (int i = 0; i < out.shape.rank(); ++i)
      if (!out.shape[i].is_static() && declared.shape[i].is_static()) out.shape[i] = declared.shape[i];
  }
  return out;
}

// Shape (opset 15 start/end included) and Size of a statically shaped value.
std::optional<Tensor> shape_constant(const ir::Node& n, const ir::TensorType& in) {
  if (!n.domain().empty() || !in.is_tensor() || !in.shape.is_static()) return std::nullopt;
  const std::vector<Dim>& dims = in.shape.dims();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (n.op_type() == "Size") return Tensor::scalar<int64_t>(in.shape.num_elements());
  if (n.op_type() != "Shape") return std::nullopt;
  auto clamp = [&](int64_t v) {
    if (v < 0) v += rank;
    return std::min(std::max<int64_t>(v, 0), rank);
  };
  int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  std::vector<int64_t> out;
  for (int64_t i = start; i < end; ++i) out.push_back(dims[static_cast<size_t>(i)].value);
  return Tensor::from_vector<int64_t>(out, {static_cast<int64_t>(out.size())});
}

// Element `value` converted to `dtype`, as bytes.
Expected<std::vector<uint8_t>> element_bytes(DataType dtype, double value) {
  std::vector<uint8_t> b(dtype_bytes(dtype, 1));
  auto put = [&](auto v) { std::memcpy(b.data(), &v, sizeof(v)); };
  switch (dtype) {
    case DataType::kFloat32:
      put(static_cast<float>(value));
      break;
    case DataType::kFloat64:
      put(value);
      break;
    case DataType::kFloat16:
      put(float_to_fp16(static_cast<float>(value)));
      break;
    case DataType::kBFloat16:
      put(float_to_bf16(static_cast<float>(value)));
      break;
    case DataType::kInt8:
      put(static_cast<int8_t>(value));
      break;
    case DataType::kInt16:
      put(static_cast<int16_t>(value));
      break;
    case DataType::kInt32:
      put(static_cast<int32_t>(value));
      break;
    case DataType::kInt64:
      put(static_cast<int64_t>(value));
      break;
    case DataType::kUInt8:
      put(static_cast<uint8_t>(value));
      break;
    case DataType::kUInt16:
      put(static_cast<uint16_t>(value));
      break;
    case DataType::kUInt32:
      put(static_cast<uint32_t>(value));
      break;
    case DataType::kUInt64:
      put(static_cast<uint64_t>(value));
      break;
    case DataType::kBool:
      put(static_cast<uint8_t>(value != 0));
      break;
    default:
      if (value != 0 || dtype_bits(dtype) % 8 != 0)
        return unsupported("cannot pad a %s input with %g", dtype_name(dtype), value);
      break;  // zero bytes
  }
  return b;
}

// Calls fn(src_offset, dst_offset) (in elements) for each innermost row of the leading
// block `block` of a tensor of dims `a` (source) inside one of dims `b` (destination).
template <typename Fn>
void for_each_row(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                  const std::vector<int64_t>& block, Fn fn) {
  const size_t r = block.size();
  for (int64_t d : block)
    if (d == 0) return;
  if (r <= 1) {
    fn(0, 0);
    return;
  }
  std::vector<int64_t> idx(r - 1, 0);
  for (;;) {
    int64_t sa = 0, sb = 0;
    for (size_t k = 0; k < r - 1; ++k) {
      sa = sa * a[k] + idx[k];
      sb = sb * b[k] + idx[k];
    }
    fn(sa * a[r - 1], sb * b[r - 1]);
    size_t k = r - 1;
    while (k > 0) {
      --k;
      if (++idx[k] < block[k]) break;
      idx[k] = 0;
      if (k == 0) return;
    }
  }
}

}  // namespace

Expected<std::vector<std::vector<int64_t>>> infer_output_dims(
    const ir::Graph& graph, const std::vector<std::pair<size_t, std::vector<int64_t>>>& input_dims) {
  std::unordered_map<const ir::Value*, ir::TensorType> types;
  std::unordered_map<const ir::Value*, Tensor> constants;
  for (const auto& [index, dims] : input_dims) {
    if (index >= graph.inputs().size()) return invalid_argument("input index %zu out of range", index);
    const ir::Value* v = graph.inputs()[index];
    ir::TensorType t = v->type();
    t.shape = Shape::from_static(dims);
    types[v] = std::move(t);
  }
  auto type_of = [&](const ir::Value* v) -> const ir::TensorType* {
    auto it = types.find(v);
    return it != types.end() ? &it->second : &v->type();
  };
  auto constant_of = [&](const ir::Value* v) -> const Tensor* {
    if (v->has_initializer()) return v->initializer();
    auto it = constants.find(v);
    return it != constants.end() ? &it->second : nullptr;
  };
  for (const auto& owned : graph.nodes()) {
    const ir::Node& n = *owned;
    KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(n));
    std::vector<const ir::TensorType*> in_types;
    std::vector<const Tensor*> in_constants;
    bool all_constant = true;
    for (const ir::Value* v : n.inputs()) {
      in_types.push_back(v ? type_of(v) : nullptr);
      const Tensor* c = v ? constant_of(v) : nullptr;
      in_constants.push_back(c);
      if (v && !c) all_constant = false;
    }
    ops::InferContext ctx(n, in_types, in_constants);
    if (schema->infer_fn())
      KILN_RETURN_IF_ERROR(schema->infer_fn()(ctx), "inferring node %s", n.label().c_str());
    bool outputs_small = true;
    for (int i = 0; i < n.num_outputs(); ++i) {
      const ir::Value* v = n.output(static_cast<size_t>(i));
      if (!v) continue;
      ir::TensorType t = merge(ctx.outputs()[static_cast<size_t>(i)], v->type());
      if (!t.is_tensor() || !t.shape.is_static() || t.shape.num_elements() > kMaxEvaluatedElements)
        outputs_small = false;
      types[v] = std::move(t);
    }
    // Evaluate shape computations so that the shapes they feed (Reshape, Expand, Slice...)
    // become static.
    if (n.num_outputs() == 1 && n.num_inputs() == 1 && n.input(0) && n.output(0)) {
      if (std::optional<Tensor> c = shape_constant(n, *type_of(n.input(0)))) {
        types[n.output(0)].shape = c->shape();
        constants[n.output(0)] = std::move(*c);
        continue;
      }
    }
    if (!all_constant || !outputs_small || !n.subgraphs().empty() || nondeterministic(n) ||
        !schema->kernel_fn())
      continue;
    std::vector<RuntimeValue> in_values;
    in_values.reserve(n.inputs().size());
    for (const Tensor* c : in_constants) in_values.push_back(c ? RuntimeValue(*c) : RuntimeValue());
    std::vector<const RuntimeValue*> in_ptrs;
    for (size_t k = 0; k < in_values.size(); ++k) in_ptrs.push_back(in_constants[k] ? &in_values[k] : nullptr);
    std::vector<RuntimeValue> outs(static_cast<size_t>(n.num_outputs()));
    ops::KernelContext kctx(n, in_ptrs, &outs);
    if (!schema->kernel_fn()(kctx).ok()) continue;  // inference alone then decides
    for (int i = 0; i < n.num_outputs(); ++i) {
      const ir::Value* v = n.output(static_cast<size_t>(i));
      if (!v || !outs[static_cast<size_t>(i)].is_tensor()) continue;
      Tensor t = outs[static_cast<size_t>(i)].tensor();
      types[v].shape = t.shape();
      constants[v] = std::move(t);
    }
  }
  std::vector<std::vector<int64_t>> out;
  for (const ir::Value* v : graph.outputs()) {
    const ir::TensorType* t = type_of(v);
    if (!t->is_tensor() || !t->shape.is_static())
      return unsupported("output '%s' has shape %s for these input shapes", v->name().c_str(),
                         t->to_string().c_str());
    std::vector<int64_t> dims;
    for (const Dim& d : t->shape.dims()) dims.push_back(d.value);
    out.push_back(std::move(dims));
  }
  return out;
}

Expected<Tensor> pad_tensor(const Tensor& src, const std::vector<int64_t>& to, double pad_value) {
  if (static_cast<int>(to.size()) != src.rank())
    return invalid_argument("cannot pad %s to rank %zu", src.description().c_str(), to.size());
  for (int i = 0; i < src.rank(); ++i)
    if (to[static_cast<size_t>(i)] < src.dim(i))
      return invalid_argument("cannot pad %s to %s", src.description().c_str(), dims_to_string(to).c_str());
  if (dtype_bits(src.dtype()) % 8 != 0 || src.dtype() == DataType::kString)
    return unsupported("cannot pad a %s input", dtype_name(src.dtype()));
  KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> pad, element_bytes(src.dtype(), pad_value));
  KILN_ASSIGN_OR_RETURN(Tensor out, Tensor::allocate(src.dtype(), to));
  const size_t esize = pad.size();
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  bool zero = true;
  for (uint8_t b : pad) zero = zero && b == 0;
  if (!zero)
    for (int64_t i = 0; i < out.num_elements(); ++i) std::memcpy(dst + i * esize, pad.data(), esize);
  const auto* s = static_cast<const uint8_t*>(src.raw_data());
  const size_t row = esize * static_cast<size_t>(src.rank() ? src.dim(src.rank() - 1) : 1);
  for_each_row(src.dims(), to, src.dims(), [&](int64_t sa, int64_t sb) {
    std::memcpy(dst + sb * static_cast<int64_t>(esize), s + sa * static_cast<int64_t>(esize), row);
  });
  return out;
}

void copy_leading_block(const Tensor& src, const std::vector<int64_t>& to, void* dst) {
  const size_t esize = dtype_bytes(src.dtype(), 1);
  const auto* s = static_cast<const uint8_t*>(src.raw_data());
  auto* d = static_cast<uint8_t*>(dst);
  const size_t row = esize * static_cast<size_t>(to.empty() ? 1 : to.back());
  for_each_row(src.dims(), to, to, [&](int64_t sa, int64_t sb) {
    std::memcpy(d + sb * static_cast<int64_t>(esize), s + sa * static_cast<int64_t>(esize), row);
  });
}

}  // namespace kiln::rt
