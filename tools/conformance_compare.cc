// Reading ONNX test data and comparing outputs for `kiln conformance`.
#include "tools/conformance_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/lowp.h"
#include "frontend/onnx/value_proto.h"

namespace kiln::tools {
namespace {

bool is_random_op(const std::string& op) {
  return op == "RandomUniform" || op == "RandomNormal" || op == "RandomUniformLike" || op == "RandomNormalLike" ||
         op == "Bernoulli" || op == "Multinomial";
}

// Element i as a double, for every numeric type (the 8-, 4-bit floats and packed ints too).
double as_double(const Tensor& t, int64_t i) { return lowp_to_double(t.dtype(), t.raw_data(), i); }

// Every floating-point type is compared by value within the tolerance.
bool compared_by_value(DataType t) { return dtype_is_float(t); }

}  // namespace

Expected<RuntimeValue> read_test_value(const std::string& path, const ir::TensorType& declared) {
  return frontend::read_value_proto(path, declared);
}

RandomOutputs random_outputs(const ir::Graph& graph) {
  // An output is random when a random op (or Dropout in training mode, whose mask is
  // random) lies upstream of it, e.g. Bernoulli expanded into RandomUniformLike + Less.
  RandomOutputs out;
  std::unordered_map<const ir::Value*, const ir::Node*> random_source;
  for (const auto& n : graph.nodes()) {
    const ir::Node* source = nullptr;
    bool training_dropout = n->op_type() == "Dropout" && n->num_inputs() >= 3 && n->input(2);
    if (is_random_op(n->op_type()) || training_dropout) source = n.get();
    for (const ir::Value* in : n->inputs()) {
      if (source) break;
      auto it = in ? random_source.find(in) : random_source.end();
      if (it != random_source.end()) source = it->second;
    }
    if (!source) continue;
    for (const ir::Value* o : n->outputs())
      if (o) random_source[o] = source;
  }
  for (const ir::Value* v : graph.outputs()) {
    auto it = random_source.find(v);
    if (it == random_source.end()) continue;
    RandomSpec spec;
    spec.op = it->second->op_type();
    // The range is known only for a random op's own output.
    spec.direct = v->producer() == it->second;
    spec.low = it->second->attr_float("low", 0.0f);
    spec.high = it->second->attr_float("high", 1.0f);
    out.specs[v] = spec;
  }
  return out;
}

Status compare_tensors(const Tensor& got, const Tensor& want, const RandomSpec* random) {
  if (got.dtype() != want.dtype())
    return invalid_argument("dtype %s, expected %s", dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (got.dims() != want.dims())
    return invalid_argument("shape %s, expected %s", dims_to_string(got.dims()).c_str(),
                            dims_to_string(want.dims()).c_str());
  const int64_t n = got.num_elements();
  if (random) {
    for (int64_t i = 0; i < n; ++i) {
      double v = as_double(got, i);
      bool ok = std::isfinite(v);
      if (random->direct && (random->op == "RandomUniform" || random->op == "RandomUniformLike"))
        ok = ok && v >= random->low && v <= random->high;
      if (random->direct && random->op == "Bernoulli") ok = ok && (v == 0 || v == 1);
      if (!ok) return invalid_argument("%s output element %lld = %g is out of range", random->op.c_str(), (long long)i, v);
    }
    return ok_status();
  }
  if (got.dtype() == DataType::kString) {
    for (int64_t i = 0; i < n; ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return invalid_argument("element %lld is \"%s\", expected \"%s\"", (long long)i,
                                got.data<std::string>()[i].c_str(), want.data<std::string>()[i].c_str());
    return ok_status();
  }
  if (compared_by_value(got.dtype())) {
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double a = as_double(got, i), b = as_double(want, i);
      bool ok;
      if (std::isnan(b)) ok = std::isnan(a);
      else if (std::isinf(b)) ok = a == b;
      else ok = std::fabs(a - b) <= kConformanceAtol + kConformanceRtol * std::fabs(b);
      if (!ok) {
        if (first < 0) first = i;
        ++bad;
        if (!std::isnan(a) && !std::isnan(b)) worst = std::max(worst, std::fabs(a - b));
      }
    }
    if (bad)
      return invalid_argument("%lld of %lld elements differ (first at %lld: %g, expected %g; max abs diff %g)",
                              (long long)bad, (long long)n, (long long)first, as_double(got, first),
                              as_double(want, first), worst);
    return ok_status();
  }
  if (got.dtype() == DataType::kBool) {
    for (int64_t i = 0; i < n; ++i)
      if ((got.data<uint8_t>()[i] != 0) != (want.data<uint8_t>()[i] != 0))
        return invalid_argument("element %lld is %d, expected %d", (long long)i, got.data<uint8_t>()[i] != 0,
                                want.data<uint8_t>()[i] != 0);
    return ok_status();
  }
  // Integers and the packed or 8-bit float formats: bit-exact.
  if (got.size_bytes() && std::memcmp(got.raw_data(), want.raw_data(), got.size_bytes()) != 0) {
    for (size_t i = 0; i < got.size_bytes(); ++i)
      if (static_cast<const uint8_t*>(got.raw_data())[i] != static_cast<const uint8_t*>(want.raw_data())[i])
        return invalid_argument("differs at byte %zu (0x%02x, expected 0x%02x)", i,
                                static_cast<const uint8_t*>(got.raw_data())[i],
                                static_cast<const uint8_t*>(want.raw_data())[i]);
  }
  return ok_status();
}

Status compare_values(const RuntimeValue& got, const RuntimeValue& want, const RandomSpec* random) {
  if (got.kind() != want.kind())
    return invalid_argument("is %s, expected %s", got.description().c_str(), want.description().c_str());
  if (want.is_none()) return ok_status();
  if (want.is_tensor()) return compare_tensors(got.tensor(), want.tensor(), random);
  if (got.items().size() != want.items().size())
    return invalid_argument("sequence of %zu items, expected %zu", got.items().size(), want.items().size());
  for (size_t i = 0; i < want.items().size(); ++i)
    KILN_RETURN_IF_ERROR(compare_tensors(got.items()[i], want.items()[i], random), "item %zu", i);
  return ok_status();
}

namespace {

std::string type_string(const RuntimeValue& v) {
  if (v.is_none()) return "none";
  if (v.is_tensor()) return v.tensor().description();
  return v.description();
}

// Folds the difference of one tensor pair into `d` (max_abs and max_ref accumulate over the
// items of a sequence).
void diff_tensor(const Tensor& got, const Tensor& ref, ValueDiff& d) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (got.dtype() != ref.dtype()) {
    d.mismatch = str_format("dtype %s vs %s", dtype_name(got.dtype()), dtype_name(ref.dtype()));
    return;
  }
  if (got.dims() != ref.dims()) {
    d.mismatch = str_format("shape %s vs %s", dims_to_string(got.dims()).c_str(), dims_to_string(ref.dims()).c_str());
    return;
  }
  const int64_t n = got.num_elements();
  if (got.dtype() == DataType::kString) {
    for (int64_t i = 0; i < n; ++i)
      if (got.data<std::string>()[i] != ref.data<std::string>()[i]) d.max_abs = kInf;
    return;
  }
  const bool by_value = compared_by_value(got.dtype());
  for (int64_t i = 0; i < n; ++i) {
    double a = as_double(got, i), b = as_double(ref, i);
    double diff;
    if (std::isnan(b) || std::isnan(a)) diff = std::isnan(a) && std::isnan(b) ? 0 : kInf;
    else if (std::isinf(b) || std::isinf(a)) diff = a == b ? 0 : kInf;
    else diff = std::fabs(a - b);
    // Exact dtypes: any difference is infinitely far.
    if (!by_value && diff != 0) diff = kInf;
    d.max_abs = std::max(d.max_abs, diff);
    if (std::isfinite(b)) d.max_ref = std::max(d.max_ref, std::fabs(b));
  }
}

}  // namespace

ValueDiff diff_values(const RuntimeValue& got, const RuntimeValue& ref, double rtol, double atol) {
  ValueDiff d;
  d.got_shape = type_string(got);
  d.ref_shape = type_string(ref);
  if (got.kind() != ref.kind()) {
    d.mismatch = "is " + d.got_shape + ", the reference " + d.ref_shape;
  } else if (ref.is_tensor()) {
    diff_tensor(got.tensor(), ref.tensor(), d);
  } else if (ref.is_sequence()) {
    if (got.items().size() != ref.items().size())
      d.mismatch = str_format("sequence of %zu items vs %zu", got.items().size(), ref.items().size());
    for (size_t i = 0; d.mismatch.empty() && i < ref.items().size(); ++i) {
      diff_tensor(got.items()[i], ref.items()[i], d);
      if (!d.mismatch.empty()) d.mismatch = str_format("item %zu: ", i) + d.mismatch;
    }
  }
  if (!d.mismatch.empty()) {
    d.error = std::numeric_limits<double>::infinity();
    return d;
  }
  double tolerance = atol + rtol * d.max_ref;
  d.error = d.max_abs == 0 ? 0 : tolerance > 0 ? d.max_abs / tolerance : std::numeric_limits<double>::infinity();
  return d;
}

namespace {

// A scalar tensor of a floating dtype holding `v`.
Expected<Tensor> float_scalar(DataType dtype, double v) {
  Tensor t = Tensor::make(dtype, {});
  switch (dtype) {
    case DataType::kFloat32: t.data<float>()[0] = static_cast<float>(v); break;
    case DataType::kFloat64: t.data<double>()[0] = v; break;
    case DataType::kFloat16: t.data<uint16_t>()[0] = float_to_fp16(static_cast<float>(v)); break;
    case DataType::kBFloat16: t.data<uint16_t>()[0] = float_to_bf16(static_cast<float>(v)); break;
    default: return invalid_argument("cannot perturb a %s value", dtype_name(dtype));
  }
  return t;
}

// The debug hook: re-routes the first output of node `name` through an Add of `delta`, so
// the value of that name (and everything downstream) is off by `delta`.
Status perturb_node(ir::Graph& g, const std::string& name, double delta) {
  ir::Node* node = nullptr;
  for (const auto& n : g.nodes())
    if (n->name() == name) node = n.get();
  if (!node) return not_found("KILN_DEBUG_PERTURB_NODE: the optimised graph has no node '%s'", name.c_str());
  ir::Value* out = node->output(0);
  if (!out || !out->type().is_tensor() || !dtype_is_float(out->dtype()))
    return invalid_argument("KILN_DEBUG_PERTURB_NODE: %s has no floating-point first output", node->label().c_str());
  KILN_ASSIGN_OR_RETURN(Tensor d, float_scalar(out->dtype(), delta));
  KILN_ASSIGN_OR_RETURN(ir::Value* raw, g.add_value(out->name() + "/kiln_debug_unperturbed"));
  KILN_ASSIGN_OR_RETURN(ir::Value* c, g.add_value(out->name() + "/kiln_debug_delta"));
  raw->type() = out->type();
  c->type().dtype = out->dtype();
  c->type().shape = Shape::from_static({});
  c->set_initializer(std::move(d));
  node->outputs()[0] = raw;
  raw->set_producer(node, 0);
  int64_t opset = g.opset_imports().count("") ? g.opset_imports().at("") : 13;
  g.add_node(name + "/kiln_debug_perturb", "Add", "", opset, {raw, c}, {out});
  return g.topological_sort();
}

}  // namespace

Expected<std::string> apply_debug_perturbation(ir::Graph& graph) {
  const char* name = std::getenv("KILN_DEBUG_PERTURB_NODE");
  if (!name || !*name) return std::string();
  double delta = 1e-2;
  if (const char* d = std::getenv("KILN_DEBUG_PERTURB_DELTA"); d && *d) {
    char* end = nullptr;
    delta = std::strtod(d, &end);
    if (*end || !std::isfinite(delta)) return invalid_argument("KILN_DEBUG_PERTURB_DELTA '%s' is not a number", d);
  }
  KILN_RETURN_IF_ERROR(perturb_node(graph, name, delta));
  return str_format("node '%s' perturbed by %g", name, delta);
}

}  // namespace kiln::tools
