// Shared machinery of the element-wise op families: dtype sets, half conversion,
// broadcast plans.
#include "ops/elementwise_common.h"

#include <string>

namespace kiln::ops {

TypeSet type_bit(DataType t) {
  switch (t) {
    case DataType::kFloat32:
    case DataType::kFloat64: return kTypeFloat;
    case DataType::kFloat16:
    case DataType::kBFloat16: return kTypeHalf;
    case DataType::kInt8:
    case DataType::kInt16:
    case DataType::kInt32:
    case DataType::kInt64: return kTypeSigned;
    case DataType::kUInt8:
    case DataType::kUInt16:
    case DataType::kUInt32:
    case DataType::kUInt64: return kTypeUnsigned;
    case DataType::kBool: return kTypeBool;
    default: return 0;
  }
}

Status check_dtype(const ir::Node& node, DataType t, TypeSet set, const char* what) {
  if (t == DataType::kUndefined || type_in(t, set)) return ok_status();
  std::string allowed;
  auto add = [&](TypeSet bit, const char* name) {
    if (set & bit) allowed += allowed.empty() ? name : std::string(", ") + name;
  };
  add(kTypeFloat, "float32/64");
  add(kTypeHalf, "float16/bfloat16");
  add(kTypeSigned, "signed integers");
  add(kTypeUnsigned, "unsigned integers");
  add(kTypeBool, "bool");
  return unsupported("node %s: %s dtype %s is not supported (takes %s)", node.label().c_str(), what,
                     dtype_name(t), allowed.c_str());
}

Tensor half_to_float(const Tensor& t) {
  if (!dtype_is_half(t.dtype())) return t;
  Tensor out = Tensor::make(DataType::kFloat32, t.dims());
  const uint16_t* src = t.data<uint16_t>();
  float* dst = out.data<float>();
  if (t.dtype() == DataType::kFloat16)
    map_elements(src, dst, t.num_elements(), [](uint16_t h) { return fp16_to_float(h); });
  else
    map_elements(src, dst, t.num_elements(), [](uint16_t h) { return bf16_to_float(h); });
  return out;
}

Tensor float_to_half(const Tensor& t, DataType half_type) {
  Tensor out = Tensor::make(half_type, t.dims());
  const float* src = t.data<float>();
  uint16_t* dst = out.data<uint16_t>();
  if (half_type == DataType::kFloat16)
    map_elements(src, dst, t.num_elements(), [](float f) { return float_to_fp16(f); });
  else
    map_elements(src, dst, t.num_elements(), [](float f) { return float_to_bf16(f); });
  return out;
}

Expected<BroadcastPlan> make_broadcast_plan(const ir::Node& node,
                                            const std::vector<std::vector<int64_t>>& inputs) {
  BroadcastPlan p;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (k == 0) {
      p.out_dims = inputs[0];
      continue;
    }
    KILN_ASSIGN_OR_RETURN(p.out_dims, broadcast_dims(node, p.out_dims, inputs[k]));
  }
  const int rank = static_cast<int>(p.out_dims.size());
  std::vector<std::vector<int64_t>> strides;
  for (const auto& d : inputs) strides.push_back(broadcast_strides(d, p.out_dims));

  // Grow the inner block from the last dim while every input keeps one mode over it:
  // it matches the output there (contiguous) or is broadcast there (constant).
  const size_t n = inputs.size();
  std::vector<int> mode(n, -1);  // -1 undecided, 1 contiguous, 0 constant
  int split = rank;
  for (int d = rank - 1; d >= 0; --d) {
    size_t du = static_cast<size_t>(d);
    if (p.out_dims[du] == 1) {
      split = d;
      continue;
    }
    bool fits = true;
    std::vector<int> next = mode;
    for (size_t k = 0; k < n; ++k) {
      int m = strides[k][du] == 0 ? 0 : 1;
      if (next[k] == -1) next[k] = m;
      if (next[k] != m) fits = false;
    }
    if (!fits) break;
    mode = next;
    split = d;
  }
  p.inner = 1;
  for (int d = split; d < rank; ++d) p.inner *= p.out_dims[static_cast<size_t>(d)];
  p.outer_dims.assign(p.out_dims.begin(), p.out_dims.begin() + split);
  for (size_t k = 0; k < n; ++k) {
    p.outer_strides.emplace_back(strides[k].begin(), strides[k].begin() + split);
    p.inner_step.push_back(mode[k] == 1 ? 1 : 0);
  }
  return p;
}

Expected<Shape> legacy_broadcast_shape(const ir::Node& node, const Shape& a, const Shape& b) {
  if (node.opset() >= 7) return b;
  if (node.attr_int("broadcast", 0) == 0) {
    if (!a.has_rank() || !b.has_rank()) return b;
    bool same = a.rank() == b.rank();
    for (int i = 0; same && i < a.rank(); ++i)
      same = !a[i].is_static() || !b[i].is_static() || a[i].value == b[i].value;
    if (!same)
      return invalid_argument("node %s: inputs %s and %s differ in shape and broadcast is not set (opset %lld)",
                              node.label().c_str(), a.to_string().c_str(), b.to_string().c_str(),
                              static_cast<long long>(node.opset()));
    return b;
  }
  if (!node.has_attr("axis")) return b;  // suffix matching: NumPy broadcasting as is
  if (!a.has_rank() || !b.has_rank()) return Shape();
  const int64_t rank = a.rank();
  int64_t axis = node.attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis + b.rank() > rank)
    return invalid_argument("node %s: B %s does not fit A %s at axis %lld", node.label().c_str(),
                            b.to_string().c_str(), a.to_string().c_str(),
                            static_cast<long long>(node.attr_int("axis", 0)));
  std::vector<Dim> dims(static_cast<size_t>(rank), Dim(1));
  for (int i = 0; i < b.rank(); ++i) {
    const Dim& ad = a[static_cast<int>(axis) + i];
    const Dim& bd = b[i];
    if (ad.is_static() && bd.is_static() && bd.value != 1 && bd.value != ad.value)
      return invalid_argument("node %s: B %s does not match A %s at axis %lld", node.label().c_str(),
                              b.to_string().c_str(), a.to_string().c_str(),
                              static_cast<long long>(node.attr_int("axis", 0)));
    dims[static_cast<size_t>(axis + i)] = bd;
  }
  return Shape(std::move(dims));
}

Expected<std::vector<int64_t>> legacy_broadcast_dims(const ir::Node& node, const std::vector<int64_t>& a,
                                                     const std::vector<int64_t>& b) {
  KILN_ASSIGN_OR_RETURN(Shape s, legacy_broadcast_shape(node, Shape::from_static(a), Shape::from_static(b)));
  return s.static_dims();
}

}  // namespace kiln::ops
