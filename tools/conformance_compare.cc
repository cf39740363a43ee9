// Reading ONNX test data and comparing outputs for `kiln conformance`.
#include "tools/conformance_compare.h"

#include <cmath>
#include <cstring>

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

}  // namespace kiln::tools
