// layernorm_fusion: the layer-normalisation decomposition exporters write,
//   mean = ReduceMean(x, trailing axes); d = Sub(x, mean); v = ReduceMean(Pow(d, 2) or Mul(d, d))
//   n = Div(d, Sqrt(Add(v, eps)))  or  Mul(d, Reciprocal(Sqrt(Add(v, eps))))
//   [y = Mul(n, scale)] [y = Add(y, bias)]
// becomes one kiln LayerNorm (docs/fused-ops.md); an ONNX LayerNormalization whose Mean and
// InvStdDev outputs nobody reads becomes one too, so later kernels see a single op.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "compiler/passes/fusion_util.h"
#include "compiler/passes/graph_rewrite.h"
#include "compiler/passes/passes.h"
#include "ops/registry.h"

namespace kiln::compiler {
namespace {

using fusion::constant;
using fusion::fusable_intermediate;
using fusion::is_op;
using fusion::scalar_constant;

// The other input of a binary node reading `v` (null when `v` is not an input).
ir::Value* other_input(const ir::Node& n, const ir::Value* v) {
  if (n.num_inputs() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

// The single consumer of intermediate `v`, or null.
ir::Node* next(const GraphUses& uses, const ir::Value* v) {
  if (!fusable_intermediate(uses, v)) return nullptr;
  return uses.consumers(v)[0];
}

// Pow's exponent 2: a one-element constant of any numeric type (exporters write float or int).
bool exponent_two(const ir::Graph& g, const ir::Value* v, int max_rank) {
  if (!constant(g, v)) return false;
  const Tensor& t = *v->initializer();
  if (t.num_elements() != 1 || t.rank() > max_rank) return false;
  if (!fusion::fusable_dtype(t.dtype()) && !dtype_is_integer(t.dtype())) return false;
  return t.element_as_double(0) == 2.0;
}

// The sorted, non-negative axes a ReduceMean reduces over an input of rank `rank` with
// keepdims=1; nullopt when they are not statically known or keepdims is 0.
std::optional<std::vector<int64_t>> reduce_axes(const ir::Graph& g, const ir::Node& n, int rank) {
  if (n.attr_int("keepdims", 1) != 1) return std::nullopt;
  std::vector<int64_t> axes;
  bool have = false;
  if (n.opset() >= 18) {
    const ir::Value* a = n.input(1);
    if (a) {
      if (!constant(g, a) || a->initializer()->rank() > 1) return std::nullopt;
      DataType t = a->initializer()->dtype();
      if (t != DataType::kInt64 && t != DataType::kInt32) return std::nullopt;
      axes = a->initializer()->to_int64_vector();
      have = !axes.empty();
    }
    if (!have && n.attr_int("noop_with_empty_axes", 0) != 0) return std::nullopt;  // identity
  } else if (n.has_attr("axes")) {
    axes = n.attr_ints("axes");
    have = !axes.empty();
  }
  if (!have) {  // all axes
    axes.clear();
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : axes) {
    if (a < -rank || a >= rank) return std::nullopt;
    if (a < 0) a += rank;
    if (seen[static_cast<size_t>(a)]) return std::nullopt;
    seen[static_cast<size_t>(a)] = true;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

// The first axis of `axes` when they are the trailing axes of rank `rank`, else -1.
int trailing_start(const std::vector<int64_t>& axes, int rank) {
  if (axes.empty()) return -1;
  int start = rank - static_cast<int>(axes.size());
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != start + static_cast<int64_t>(i)) return -1;
  return start;
}

class LayerNormFuser {
 public:
  LayerNormFuser(ir::Graph& g, PassContext& ctx) : g_(g), ctx_(ctx), uses_(g) {}

  Status run() {
    const bool available = fusion::kiln_op_available("LayerNorm");
    if (!available) return ok_status();
    // Snapshot: fusing appends nodes.
    std::vector<ir::Node*> nodes;
    for (const auto& n : g_.nodes()) nodes.push_back(n.get());
    for (ir::Node* n : nodes) {
      if (removed_.count(n)) continue;
      if (is_op(*n, "ReduceMean")) {
        if (fuse_decomposition(*n)) ctx_.count_fusion("LayerNorm");
      } else if (is_op(*n, "LayerNormalization")) {
        if (convert_onnx_layer_norm(*n)) ctx_.count_fusion("onnx:LayerNormalization");
      }
    }
    if (removed_.empty()) return ok_status();
    return fusion::finish(g_, removed_);
  }

 private:
  // `x`'s normalized dims (from `axis` on), all static; empty when one is not.
  static std::vector<int64_t> norm_dims(const ir::Value* x, int axis) {
    std::vector<int64_t> dims;
    for (int i = axis; i < x->shape().rank(); ++i) {
      const Dim& d = x->shape()[i];
      if (!d.is_static()) return {};
      dims.push_back(d.value);
    }
    return dims;
  }

  // An affine parameter (scale or bias) of the decomposition as a LayerNorm input: a value
  // whose shape equals the normalized dims, or a constant broadcast to them (leading dims
  // of 1 dropped, broadcast dims materialised). Null when it is neither.
  ir::Value* affine_param(ir::Value* p, DataType dtype, const std::vector<int64_t>& dims) {
    if (!p || p->dtype() != dtype || !p->type().is_tensor() || !p->shape().is_static())
      return nullptr;
    std::vector<int64_t> pd = p->shape().static_dims();
    if (pd == dims) return p;
    if (!constant(g_, p)) return nullptr;
    // Right-aligned broadcast of pd to dims, without growing dims.
    if (pd.size() > dims.size()) {
      for (size_t i = 0; i < pd.size() - dims.size(); ++i)
        if (pd[i] != 1) return nullptr;
      pd.erase(pd.begin(), pd.begin() + static_cast<std::ptrdiff_t>(pd.size() - dims.size()));
    }
    const size_t lead = dims.size() - pd.size();
    for (size_t i = 0; i < pd.size(); ++i)
      if (pd[i] != 1 && pd[i] != dims[lead + i]) return nullptr;
    const Tensor& src = *p->initializer();
    Tensor t = Tensor::make(dtype, dims);
    const size_t bytes = dtype_bytes(dtype, 1);
    std::vector<int64_t> src_strides(dims.size(), 0);  // 0 along broadcast dims
    int64_t stride = 1;
    for (size_t i = pd.size(); i-- > 0;) {
      if (pd[i] != 1) src_strides[lead + i] = stride;
      stride *= pd[i];
    }
    std::vector<int64_t> idx(dims.size(), 0);
    const char* in = static_cast<const char*>(src.raw_data());
    char* out = static_cast<char*>(t.raw_data());
    for (int64_t e = 0; e < t.num_elements(); ++e) {
      int64_t off = 0;
      for (size_t i = 0; i < dims.size(); ++i) off += idx[i] * src_strides[i];
      std::memcpy(out + e * static_cast<int64_t>(bytes), in + off * static_cast<int64_t>(bytes),
                  bytes);
      for (size_t i = dims.size(); i-- > 0;) {
        if (++idx[i] < dims[i]) break;
        idx[i] = 0;
      }
    }
    return add_initializer(g_, p->name() + "_ln", std::move(t));
  }

  // A constant of `dims` filled with ones (the scale of a decomposition without Mul).
  ir::Value* ones(const std::string& base, DataType dtype, const std::vector<int64_t>& dims) {
    Tensor t = Tensor::make(dtype, dims);
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      switch (dtype) {
        case DataType::kFloat32:
          t.data<float>()[i] = 1.0f;
          break;
        case DataType::kFloat64:
          t.data<double>()[i] = 1.0;
          break;
        case DataType::kFloat16:
          t.data<uint16_t>()[i] = float_to_fp16(1.0f);
          break;
        case DataType::kBFloat16:
          t.data<uint16_t>()[i] = float_to_bf16(1.0f);
          break;
        default:
          return nullptr;
      }
    }
    return add_initializer(g_, base + "_ones", std::move(t));
  }

  // Starting at the first ReduceMean `m1` of the decomposition.
  bool fuse_decomposition(ir::Node& m1) {
    ir::Value* x = m1.input(0);
    ir::Value* mean = m1.output(0);
    if (!x || !mean || !fusion::known_float_tensor(x) || m1.num_outputs() != 1) return false;
    const int rank = x->shape().rank();
    if (rank < 1 || !mean->shape().has_rank() || mean->shape().rank() != rank) return false;
    auto axes = reduce_axes(g_, m1, rank);
    if (!axes) return false;
    const int axis = trailing_start(*axes, rank);
    if (axis < 0) return false;
    const DataType dtype = x->dtype();
    const std::vector<int64_t> ndims = norm_dims(x, axis);
    if (ndims.empty()) return false;

    // d = Sub(x, mean)
    ir::Node* sub = next(uses_, mean);
    if (!sub || !is_op(*sub, "Sub") || sub->input(0) != x || sub->input(1) != mean) return false;
    ir::Value* d = sub->output(0);
    if (!d || uses_.pinned(d) || !(d->shape() == x->shape()) || d->dtype() != dtype) return false;
    // d feeds exactly the square and the normalisation.
    ir::Node* square = nullptr;
    ir::Node* norm = nullptr;
    for (ir::Node* c : uses_.consumers(d)) {
      bool is_square =
          (is_op(*c, "Pow") && c->input(0) == d && exponent_two(g_, c->input(1), rank)) ||
          (is_op(*c, "Mul") && c->input(0) == d && c->input(1) == d);
      if (is_square) {
        if (square && square != c) return false;
        square = c;
      } else {
        if (norm && norm != c) return false;
        norm = c;
      }
    }
    if (!square || !norm) return false;
    // v = ReduceMean(square) over the same axes; Add(v, eps); Sqrt.
    ir::Node* m2 = next(uses_, square->output(0));
    if (!m2 || !is_op(*m2, "ReduceMean") || m2->input(0) != square->output(0)) return false;
    auto axes2 = reduce_axes(g_, *m2, rank);
    if (!axes2 || *axes2 != *axes) return false;
    ir::Node* add_eps = next(uses_, m2->output(0));
    if (!add_eps || !is_op(*add_eps, "Add")) return false;
    ir::Value* eps_v = other_input(*add_eps, m2->output(0));
    double eps;
    if (!eps_v || eps_v == m2->output(0) || !scalar_constant(g_, eps_v, &eps) ||
        eps_v->initializer()->rank() > rank || !(eps >= 0.0) || !std::isfinite(eps))
      return false;
    ir::Node* sqrt = next(uses_, add_eps->output(0));
    if (!sqrt || !is_op(*sqrt, "Sqrt")) return false;
    std::vector<ir::Node*> chain = {&m1, sub, square, m2, add_eps, sqrt};
    // n = Div(d, std) or Mul(d, Reciprocal(std)).
    if (is_op(*norm, "Div")) {
      if (norm->input(0) != d || norm->input(1) != sqrt->output(0) ||
          !fusable_intermediate(uses_, sqrt->output(0)))
        return false;
    } else if (is_op(*norm, "Mul")) {
      ir::Node* recip = next(uses_, sqrt->output(0));
      if (!recip || !is_op(*recip, "Reciprocal") || other_input(*norm, d) != recip->output(0) ||
          !fusable_intermediate(uses_, recip->output(0)))
        return false;
      chain.push_back(recip);
    } else {
      return false;
    }
    chain.push_back(norm);
    ir::Value* out = norm->output(0);
    if (!out || !(out->shape() == x->shape()) || out->dtype() != dtype) return false;

    // Optional Mul(scale) then optional Add(bias), each only if it keeps x's shape.
    ir::Value* scale = nullptr;
    ir::Value* bias = nullptr;
    auto affine_step = [&](const char* op) -> ir::Value* {
      ir::Node* c = next(uses_, out);
      if (!c || !is_op(*c, op) || !c->output(0)) return nullptr;
      ir::Value* p = other_input(*c, out);
      if (!p || p == out || !(c->output(0)->shape() == x->shape()) ||
          c->output(0)->dtype() != dtype)
        return nullptr;
      ir::Value* param = affine_param(p, dtype, ndims);
      if (!param) return nullptr;
      chain.push_back(c);
      out = c->output(0);
      return param;
    };
    scale = affine_step("Mul");
    bias = affine_step("Add");
    if (!scale) scale = ones(x->name(), dtype, ndims);
    if (!scale) return false;

    std::vector<ir::Value*> inputs = {x, scale};
    if (bias) inputs.push_back(bias);
    ir::Node* ln = fusion::add_fused_node(g_, uses_, "LayerNorm", chain, inputs, out, removed_);
    ln->attrs()["axis"] = ir::Attribute::from_int(axis);
    ln->attrs()["epsilon"] = ir::Attribute::from_float(static_cast<float>(eps));
    return true;
  }

  // ONNX LayerNormalization (opset 17) used for its first output only, computing in the
  // input's own precision or fp32 (stash_type 1): exactly kiln LayerNorm.
  bool convert_onnx_layer_norm(ir::Node& n) {
    ir::Value* x = n.input(0);
    ir::Value* y = n.output(0);
    ir::Value* scale = n.input(1);
    if (!x || !y || !scale || !fusion::known_float_tensor(x) || n.num_inputs() > 3) return false;
    if (n.attr_int("stash_type", 1) != 1) return false;
    for (int i = 1; i < n.num_outputs(); ++i)
      if (n.output(static_cast<size_t>(i)) && !uses_.unused(n.output(static_cast<size_t>(i))))
        return false;
    std::vector<ir::Value*> inputs = {x, scale};
    if (n.input(2)) inputs.push_back(n.input(2));
    for (ir::Value* v : inputs)
      if (!v->type().is_tensor() || v->dtype() != x->dtype()) return false;
    const int rank = x->shape().rank();
    int64_t axis = n.attr_int("axis", -1);
    if (axis < -rank || axis >= rank) return false;
    if (axis < 0) axis += rank;
    float eps = n.attr_float("epsilon", 1e-5f);
    ir::Node* ln = fusion::add_fused_node(g_, uses_, "LayerNorm", {&n}, inputs, y, removed_);
    ln->attrs()["axis"] = ir::Attribute::from_int(axis);
    ln->attrs()["epsilon"] = ir::Attribute::from_float(eps);
    return true;
  }

  ir::Graph& g_;
  PassContext& ctx_;
  GraphUses uses_;
  std::unordered_set<const ir::Node*> removed_;
};

}  // namespace

PassInfo layernorm_fusion_pass() {
  PassInfo p;
  p.name = "layernorm_fusion";
  p.min_level = 2;
  p.description =
      "fuse the LayerNorm decomposition (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div[/Mul/Add]) and "
      "ONNX LayerNormalization into kiln LayerNorm";
  p.run = [](ir::Graph& g, PassContext& ctx) -> Status {
    LayerNormFuser f(g, ctx);
    return f.run();
  };
  return p;
}

}  // namespace kiln::compiler
