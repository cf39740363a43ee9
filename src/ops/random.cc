// Random generators: RandomUniform, RandomNormal, their *Like forms, Bernoulli and
// Multinomial. A 'seed' attribute makes a node's draws repeatable from run to run (not
// equal to other runtimes' draws, which ONNX does not specify); without one each run
// draws afresh.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

std::mt19937_64 make_engine(const ir::Node& node) {
  if (const ir::Attribute* a = node.attr("seed")) {
    uint32_t bits;
    std::memcpy(&bits, &a->f, sizeof(bits));
    return std::mt19937_64(bits);
  }
  std::random_device rd;
  return std::mt19937_64((static_cast<uint64_t>(rd()) << 32) ^ rd());
}

bool random_float_dtype(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// The output dtype: the 'dtype' attribute, else `fallback` (the input's, or float32).
Expected<DataType> random_dtype(const ir::Node& node, DataType fallback, bool floats_only) {
  DataType t = fallback;
  if (const ir::Attribute* a = node.attr("dtype")) {
    if (!dtype_is_valid(static_cast<int32_t>(a->i)) || a->i == 0)
      return invalid_argument("node %s: dtype %lld is not a valid type", node.label().c_str(),
                              (long long)a->i);
    t = static_cast<DataType>(a->i);
  }
  bool ok = random_float_dtype(t) ||
            (!floats_only && (dtype_is_integer(t) || t == DataType::kBool) && type_bit(t) != 0);
  if (!ok && t != DataType::kUndefined)
    return invalid_argument("node %s: cannot generate %s values", node.label().c_str(),
                            dtype_name(t));
  return t;
}

// RandomUniform / RandomNormal (shape from the attribute) and the *Like forms (shape and
// default dtype from the input).
Status random_kernel(KernelContext& ctx, bool normal, bool like) {
  const ir::Node& node = ctx.node();
  std::vector<int64_t> dims;
  DataType fallback = DataType::kFloat32;
  if (like) {
    dims = ctx.input(0)->dims();
    fallback = ctx.input(0)->dtype();
  } else {
    dims = node.attr_ints("shape");
  }
  KILN_ASSIGN_OR_RETURN(DataType dtype, random_dtype(node, fallback, true));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype, dims));
  std::mt19937_64 engine = make_engine(node);
  if (normal) {
    std::normal_distribution<double> dist(node.attr_float("mean", 0.0f),
                                          node.attr_float("scale", 1.0f));
    for (int64_t i = 0; i < y->num_elements(); ++i) store_double(*y, i, dist(engine));
  } else {
    const double low = node.attr_float("low", 0.0f), high = node.attr_float("high", 1.0f);
    if (!(low <= high))
      return invalid_argument("node %s: low %g is above high %g", node.label().c_str(), low, high);
    std::uniform_real_distribution<double> dist(low, high);
    for (int64_t i = 0; i < y->num_elements(); ++i) {
      double v = dist(engine);
      // Rounding to a narrower type may land on `high`; keep the half-open range.
      store_double(*y, i, v);
      if (y->element_as_double(i) >= high && high > low) store_double(*y, i, low);
    }
  }
  return ok_status();
}

Status infer_random(InferContext& ctx, bool like) {
  DataType fallback = like && ctx.has_input(0) ? ctx.input_type(0).dtype : DataType::kFloat32;
  KILN_ASSIGN_OR_RETURN(DataType dtype, random_dtype(ctx.node(), fallback, true));
  Shape shape;
  if (like) {
    if (ctx.has_input(0)) shape = ctx.input_type(0).shape;
  } else {
    std::vector<int64_t> dims = ctx.node().attr_ints("shape");
    for (int64_t d : dims)
      if (d < 0)
        return invalid_argument("node %s: shape %s has a negative dim", ctx.node().label().c_str(),
                                dims_to_string(dims).c_str());
    shape = Shape::from_static(dims);
  }
  ctx.set_output(0, dtype, shape);
  return ok_status();
}

// ---- Bernoulli -----------------------------------------------------------------------

Status bernoulli_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& p = *ctx.input(0);
  if (!random_float_dtype(p.dtype()))
    return invalid_argument("node %s: input must be float, got %s", node.label().c_str(),
                            dtype_name(p.dtype()));
  KILN_ASSIGN_OR_RETURN(DataType dtype, random_dtype(node, p.dtype(), false));
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype, p.dims()));
  std::mt19937_64 engine = make_engine(node);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  for (int64_t i = 0; i < p.num_elements(); ++i) {
    const double prob = p.element_as_double(i);
    if (!(prob >= 0 && prob <= 1))
      return invalid_argument("node %s: probability %g at element %lld is not in [0, 1]",
                              node.label().c_str(), prob, (long long)i);
    store_double(*y, i, dist(engine) < prob ? 1.0 : 0.0);
  }
  return ok_status();
}

Status infer_bernoulli(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_ASSIGN_OR_RETURN(DataType dtype, random_dtype(ctx.node(), ctx.input_type(0).dtype, false));
  ctx.set_output(0, dtype, ctx.input_type(0).shape);
  return ok_status();
}

// ---- Multinomial ---------------------------------------------------------------------

Expected<DataType> multinomial_dtype(const ir::Node& node) {
  int64_t v = node.attr_int("dtype", static_cast<int64_t>(DataType::kInt32));
  if (v != static_cast<int64_t>(DataType::kInt32) && v != static_cast<int64_t>(DataType::kInt64))
    return invalid_argument("node %s: dtype %lld must be int32 (6) or int64 (7)",
                            node.label().c_str(), (long long)v);
  return static_cast<DataType>(v);
}

Status multinomial_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!random_float_dtype(x.dtype()) || x.rank() != 2)
    return invalid_argument("node %s: input must be float [batch, classes], got %s",
                            node.label().c_str(), x.description().c_str());
  KILN_ASSIGN_OR_RETURN(DataType dtype, multinomial_dtype(node));
  const int64_t samples = node.attr_int("sample_size", 1);
  if (samples < 0)
    return invalid_argument("node %s: sample_size is negative", node.label().c_str());
  const int64_t batch = x.dim(0), classes = x.dim(1);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, dtype, {batch, samples}));
  if (classes == 0 && batch > 0 && samples > 0)
    return invalid_argument("node %s: no classes to sample from", node.label().c_str());
  std::mt19937_64 engine = make_engine(node);
  std::vector<double> cdf(static_cast<size_t>(classes));
  for (int64_t b = 0; b < batch; ++b) {
    // Inputs are unnormalised log-probabilities.
    double m = -INFINITY;
    for (int64_t c = 0; c < classes; ++c) m = std::max(m, x.element_as_double(b * classes + c));
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) {
      double v = std::exp(x.element_as_double(b * classes + c) - m);
      sum += std::isnan(v) ? 0 : v;
      cdf[static_cast<size_t>(c)] = sum;
    }
    if (!(sum > 0) || std::isinf(sum))
      return invalid_argument("node %s: row %lld has no finite probability mass",
                              node.label().c_str(), (long long)b);
    std::uniform_real_distribution<double> dist(0.0, sum);
    for (int64_t s = 0; s < samples; ++s) {
      double u = dist(engine);
      int64_t c = std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
      if (c >= classes) c = classes - 1;
      store_double(*y, b * samples + s, static_cast<double>(c));
    }
  }
  return ok_status();
}

Status infer_multinomial(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(DataType dtype, multinomial_dtype(ctx.node()));
  Shape out = unknown_dims(2);
  if (ctx.has_input(0) && ctx.input_type(0).shape.has_rank() && ctx.input_type(0).shape.rank() == 2)
    out[0] = ctx.input_type(0).shape[0];
  out[1] = ctx.node().attr_int("sample_size", 1);
  ctx.set_output(0, dtype, out);
  return ok_status();
}

OpSchema random_schema(const char* name, int64_t since, bool normal, bool like) {
  OpSchema s(name);
  s.since(since)
      .inputs(like ? 1 : 0, like ? 1 : 0)
      .outputs(1, 1)
      .attr("dtype", ir::AttrKind::kInt)
      .attr("seed", ir::AttrKind::kFloat);
  if (normal) {
    s.attr("mean", ir::AttrKind::kFloat).attr("scale", ir::AttrKind::kFloat);
  } else {
    s.attr("low", ir::AttrKind::kFloat).attr("high", ir::AttrKind::kFloat);
  }
  if (!like) s.required_attr("shape", ir::AttrKind::kInts);
  s.infer([like](InferContext& ctx) { return infer_random(ctx, like); });
  s.kernel([normal, like](KernelContext& ctx) { return random_kernel(ctx, normal, like); });
  return s;
}

KILN_REGISTER_OP(random_schema("RandomUniform", 1, false, false));
KILN_REGISTER_OP(random_schema("RandomNormal", 1, true, false));
KILN_REGISTER_OP(random_schema("RandomUniformLike", 1, false, true));
KILN_REGISTER_OP(random_schema("RandomNormalLike", 1, true, true));
KILN_REGISTER_OP(OpSchema("Bernoulli")
                     .since(15)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("dtype", ir::AttrKind::kInt)
                     .attr("seed", ir::AttrKind::kFloat)
                     .infer(infer_bernoulli)
                     .kernel(bernoulli_kernel));
KILN_REGISTER_OP(OpSchema("Multinomial")
                     .since(7)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("dtype", ir::AttrKind::kInt)
                     .attr("sample_size", ir::AttrKind::kInt)
                     .attr("seed", ir::AttrKind::kFloat)
                     .infer(infer_multinomial)
                     .kernel(multinomial_kernel));

}  // namespace
}  // namespace kiln::ops
