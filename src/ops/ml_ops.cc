// ai.onnx.ml ops: LabelEncoder (opsets 1, 2 and 4), ArrayFeatureExtractor, Binarizer and
// TreeEnsemble (opset 5).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <string>
#include <unordered_map>
#include <vector>

#include "ops/elementwise_common.h"

namespace kiln::ops {
namespace {

constexpr const char* kMlDomain = "ai.onnx.ml";

// ---- LabelEncoder --------------------------------------------------------------------

// Keys of any supported type as one hashable string: integers and floats by value (so an
// int32 input meets int64 keys, a float input meets double keys), NaN as one key.
std::string key_of(const Tensor& t, int64_t i) {
  std::string key;
  if (t.dtype() == DataType::kString) {
    key.push_back('s');
    key.append(t.data<std::string>()[i]);
  } else if (dtype_is_integer(t.dtype())) {
    key.push_back('i');
    key.append(std::to_string(t.element_as_int64(i)));
  } else {
    double d = t.element_as_double(i);
    if (std::isnan(d)) return "nan";
    if (d == 0) d = 0;  // -0 and +0 are one key
    char buf[sizeof(double)];
    std::memcpy(buf, &d, sizeof(d));
    key.push_back('f');
    key.append(buf, sizeof(buf));
  }
  return key;
}

struct LabelMap {
  Tensor keys, values, fallback;  // fallback: one element of the values' dtype
};

Tensor strings_tensor(const std::vector<std::string>& v) {
  return Tensor::from_vector<std::string>(v);
}

// The keys, values and default of the node's attributes, as tensors.
Expected<LabelMap> label_map(const ir::Node& node, DataType input_dtype) {
  LabelMap m;
  const std::string label = node.label();
  if (node.opset() < 2) {
    // Opset 1: classes_strings maps strings to their index, or the reverse.
    const ir::Attribute* classes = node.attr("classes_strings");
    std::vector<std::string> names = classes ? classes->strings : std::vector<std::string>{};
    std::vector<int64_t> ids(names.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    if (input_dtype == DataType::kString) {
      m.keys = strings_tensor(names);
      m.values = Tensor::from_vector<int64_t>(ids);
      m.fallback = Tensor::from_vector<int64_t>({node.attr_int("default_int64", -1)});
    } else {
      m.keys = Tensor::from_vector<int64_t>(ids);
      m.values = strings_tensor(names);
      m.fallback = strings_tensor({node.attr_string("default_string", "_Unused")});
    }
    return m;
  }
  auto list = [&](const char* ints, const char* floats, const char* strings,
                  const char* tensor) -> Tensor {
    if (const ir::Attribute* a = node.attr(tensor)) return a->t;
    if (const ir::Attribute* a = node.attr(strings)) return strings_tensor(a->strings);
    if (const ir::Attribute* a = node.attr(ints)) return Tensor::from_vector<int64_t>(a->ints);
    if (const ir::Attribute* a = node.attr(floats)) return Tensor::from_vector<float>(a->floats);
    return Tensor();
  };
  m.keys = list("keys_int64s", "keys_floats", "keys_strings", "keys_tensor");
  m.values = list("values_int64s", "values_floats", "values_strings", "values_tensor");
  if (!m.keys.defined() || !m.values.defined())
    return invalid_argument("node %s: LabelEncoder needs keys_* and values_* attributes",
                            label.c_str());
  if (m.keys.num_elements() != m.values.num_elements())
    return invalid_argument("node %s: %lld keys but %lld values", label.c_str(),
                            (long long)m.keys.num_elements(), (long long)m.values.num_elements());
  const DataType vt = m.values.dtype();
  if (const ir::Attribute* a = node.attr("default_tensor")) {
    if (a->t.dtype() != vt || a->t.num_elements() != 1)
      return invalid_argument("node %s: default_tensor must hold one %s", label.c_str(),
                              dtype_name(vt));
    m.fallback = a->t;
  } else if (vt == DataType::kString) {
    m.fallback = strings_tensor({node.attr_string("default_string", "_Unused")});
  } else if (vt == DataType::kInt64) {
    m.fallback = Tensor::from_vector<int64_t>({node.attr_int("default_int64", -1)});
  } else if (vt == DataType::kFloat32) {
    m.fallback = Tensor::from_vector<float>({node.attr_float("default_float", -0.0f)});
  } else {
    // Other value types (double, int16, int32 tensors) default to zero without default_tensor.
    KILN_ASSIGN_OR_RETURN(m.fallback, Tensor::allocate(vt, {1}));
  }
  return m;
}

Status label_encoder_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  KILN_ASSIGN_OR_RETURN(LabelMap m, label_map(node, x.dtype()));
  if ((x.dtype() == DataType::kString) != (m.keys.dtype() == DataType::kString))
    return invalid_argument("node %s: input is %s but the keys are %s", node.label().c_str(),
                            dtype_name(x.dtype()), dtype_name(m.keys.dtype()));
  std::unordered_map<std::string, int64_t> index;
  for (int64_t i = 0; i < m.keys.num_elements(); ++i) index.emplace(key_of(m.keys, i), i);
  const DataType vt = m.values.dtype();
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, vt, x.dims()));
  const size_t width = vt == DataType::kString ? 0 : dtype_bytes(vt, 1);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    auto it = index.find(key_of(x, i));
    const Tensor& src = it == index.end() ? m.fallback : m.values;
    const int64_t at = it == index.end() ? 0 : it->second;
    if (vt == DataType::kString) {
      y->data<std::string>()[i] = src.data<std::string>()[at];
    } else {
      std::memcpy(static_cast<char*>(y->raw_data()) + static_cast<size_t>(i) * width,
                  static_cast<const char*>(src.raw_data()) + static_cast<size_t>(at) * width,
                  width);
    }
  }
  return ok_status();
}

Status infer_label_encoder(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& t = ctx.input_type(0);
  if (ctx.node().opset() < 2 && t.dtype == DataType::kUndefined) return ok_status();
  KILN_ASSIGN_OR_RETURN(LabelMap m, label_map(ctx.node(), t.dtype));
  ctx.set_output(0, m.values.dtype(), t.shape);
  return ok_status();
}

// ---- ArrayFeatureExtractor -----------------------------------------------------------

Status array_feature_extractor_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  const Tensor& idx = *ctx.input(1);
  if (idx.dtype() != DataType::kInt64)
    return invalid_argument("node %s: indices must be int64, got %s", node.label().c_str(),
                            dtype_name(idx.dtype()));
  if (x.rank() < 1)
    return invalid_argument("node %s: input must have rank >= 1", node.label().c_str());
  const int64_t last = x.dim(x.rank() - 1), k = idx.num_elements();
  for (int64_t i = 0; i < k; ++i)
    if (idx.data<int64_t>()[i] < 0 || idx.data<int64_t>()[i] >= last)
      return out_of_range("node %s: index %lld is out of range for the last dim %lld",
                          node.label().c_str(), (long long)idx.data<int64_t>()[i], (long long)last);
  std::vector<int64_t> dims = x.dims();
  if (dims.size() == 1) dims.insert(dims.begin(), 1);  // a 1-D input gives [1, k]
  dims.back() = k;
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), dims));
  const int64_t rows = last == 0 ? 0 : x.num_elements() / last;
  const bool str = x.dtype() == DataType::kString;
  const size_t width = str ? 0 : dtype_bytes(x.dtype(), 1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int64_t from = r * last + idx.data<int64_t>()[j], to = r * k + j;
      if (str) {
        y->data<std::string>()[to] = x.data<std::string>()[from];
      } else {
        std::memcpy(static_cast<char*>(y->raw_data()) + static_cast<size_t>(to) * width,
                    static_cast<const char*>(x.raw_data()) + static_cast<size_t>(from) * width,
                    width);
      }
    }
  return ok_status();
}

Status infer_array_feature_extractor(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& t = ctx.input_type(0);
  Shape out;
  if (t.shape.has_rank() && t.shape.rank() >= 1 && ctx.has_input(1)) {
    out = t.shape;
    if (out.rank() == 1) out.dims().insert(out.dims().begin(), Dim(1));
    const Shape& is = ctx.input_type(1).shape;
    out[out.rank() - 1] = is.is_static() ? Dim(is.num_elements()) : Dim();
  }
  ctx.set_output(0, t.dtype, out);
  return ok_status();
}

// ---- Binarizer -----------------------------------------------------------------------

Status binarizer_kernel(KernelContext& ctx) {
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), x.dtype(), kTypeFloat | kTypeSigned));
  const double threshold = ctx.node().attr_float("threshold", 0.0f);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), x.dims()));
  dispatch_types<kTypeFloat | kTypeSigned>(x.dtype(), [&]<typename T>() {
    for (int64_t i = 0; i < x.num_elements(); ++i)
      y->data<T>()[i] = static_cast<double>(x.data<T>()[i]) > threshold ? T(1) : T(0);
  });
  return ok_status();
}

Status infer_binarizer(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_dtype(ctx.node(), ctx.input_type(0).dtype, kTypeFloat | kTypeSigned));
  return infer_same_as_input(ctx);
}

// ---- TreeEnsemble --------------------------------------------------------------------

enum class NodeMode : uint8_t { kLeq = 0, kLt, kGte, kGt, kEq, kNeq, kMember };

struct Ensemble {
  std::vector<double> splits;
  std::vector<int64_t> features, true_ids, false_ids, true_leaf, false_leaf, missing_true;
  std::vector<uint8_t> modes;
  std::vector<std::vector<double>> members;  // per node, for set-membership nodes
  std::vector<int64_t> leaf_targets, roots;
  std::vector<double> leaf_weights;
  int64_t n_targets = 0, aggregate = 1, post = 0;
};

std::vector<double> tensor_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) v[static_cast<size_t>(i)] = t.element_as_double(i);
  return v;
}

Expected<Ensemble> read_ensemble(const ir::Node& node) {
  const std::string label = node.label();
  Ensemble e;
  auto tensor_attr = [&](const char* name) -> Expected<std::vector<double>> {
    const ir::Attribute* a = node.attr(name);
    if (!a) return std::vector<double>{};
    if (a->kind != ir::AttrKind::kTensor)
      return invalid_argument("node %s: attribute %s must be a tensor", label.c_str(), name);
    return tensor_doubles(a->t);
  };
  KILN_ASSIGN_OR_RETURN(e.splits, tensor_attr("nodes_splits"));
  KILN_ASSIGN_OR_RETURN(e.leaf_weights, tensor_attr("leaf_weights"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> membership, tensor_attr("membership_values"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> modes, tensor_attr("nodes_modes"));
  e.features = node.attr_ints("nodes_featureids");
  e.true_ids = node.attr_ints("nodes_truenodeids");
  e.false_ids = node.attr_ints("nodes_falsenodeids");
  e.true_leaf = node.attr_ints("nodes_trueleafs");
  e.false_leaf = node.attr_ints("nodes_falseleafs");
  e.missing_true = node.attr_ints("nodes_missing_value_tracks_true");
  e.leaf_targets = node.attr_ints("leaf_targetids");
  e.roots = node.attr_ints("tree_roots");
  e.n_targets = node.attr_int("n_targets", 0);
  e.aggregate = node.attr_int("aggregate_function", 1);
  e.post = node.attr_int("post_transform", 0);
  const size_t n = e.splits.size();
  if (e.features.size() != n || e.true_ids.size() != n || e.false_ids.size() != n ||
      e.true_leaf.size() != n || e.false_leaf.size() != n || modes.size() != n ||
      (!e.missing_true.empty() && e.missing_true.size() != n))
    return invalid_argument("node %s: the nodes_* attributes must all have %zu entries",
                            label.c_str(), n);
  if (e.leaf_targets.size() != e.leaf_weights.size())
    return invalid_argument("node %s: %zu leaf_targetids but %zu leaf_weights", label.c_str(),
                            e.leaf_targets.size(), e.leaf_weights.size());
  if (e.n_targets <= 0)
    return invalid_argument("node %s: n_targets must be positive", label.c_str());
  if (e.aggregate < 0 || e.aggregate > 3)
    return invalid_argument("node %s: aggregate_function %lld is not 0..3", label.c_str(),
                            (long long)e.aggregate);
  if (e.post < 0 || e.post > 4)
    return invalid_argument("node %s: post_transform %lld is not 0..4", label.c_str(),
                            (long long)e.post);
  for (int64_t t : e.leaf_targets)
    if (t < 0 || t >= e.n_targets)
      return invalid_argument("node %s: leaf target %lld is out of range for %lld targets",
                              label.c_str(), (long long)t, (long long)e.n_targets);
  // Set-membership nodes take consecutive runs of membership_values, each ended by NaN.
  size_t next = 0;
  e.members.resize(n);
  e.modes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (modes[i] < 0 || modes[i] > 6)
      return invalid_argument("node %s: node mode %g is not 0..6", label.c_str(), modes[i]);
    e.modes[i] = static_cast<uint8_t>(modes[i]);
    if (e.features[i] < 0)
      return invalid_argument("node %s: negative feature id %lld", label.c_str(),
                              (long long)e.features[i]);
    for (int side = 0; side < 2; ++side) {
      int64_t id = side ? e.false_ids[i] : e.true_ids[i];
      bool leaf = (side ? e.false_leaf[i] : e.true_leaf[i]) != 0;
      size_t limit = leaf ? e.leaf_weights.size() : n;
      if (id < 0 || static_cast<size_t>(id) >= limit)
        return invalid_argument("node %s: node %zu points at %s %lld, out of range", label.c_str(),
                                i, leaf ? "leaf" : "node", (long long)id);
    }
    if (e.modes[i] != static_cast<uint8_t>(NodeMode::kMember)) continue;
    while (next < membership.size() && !std::isnan(membership[next]))
      e.members[i].push_back(membership[next++]);
    if (next >= membership.size())
      return invalid_argument("node %s: membership_values has too few NaN-ended sets",
                              label.c_str());
    ++next;
  }
  for (int64_t r : e.roots)
    if (r < 0 || static_cast<size_t>(r) >= n)
      return invalid_argument("node %s: tree root %lld is out of range", label.c_str(),
                              (long long)r);
  return e;
}

bool goes_true(const Ensemble& e, size_t node, double v) {
  if (std::isnan(v) && !e.missing_true.empty() && e.missing_true[node]) return true;
  const double s = e.splits[node];
  switch (static_cast<NodeMode>(e.modes[node])) {
    case NodeMode::kLeq:
      return v <= s;
    case NodeMode::kLt:
      return v < s;
    case NodeMode::kGte:
      return v >= s;
    case NodeMode::kGt:
      return v > s;
    case NodeMode::kEq:
      return v == s;
    case NodeMode::kNeq:
      return v != s;
    case NodeMode::kMember:
      return std::find(e.members[node].begin(), e.members[node].end(), v) != e.members[node].end();
  }
  return false;
}

// The leaf a row reaches from `root`; error on a cycle (more steps than nodes).
Expected<size_t> find_leaf(const ir::Node& node, const Ensemble& e, size_t root, const double* row,
                           int64_t num_features) {
  size_t cur = root;
  for (size_t steps = 0; steps <= e.splits.size(); ++steps) {
    if (e.features[cur] >= num_features)
      return out_of_range("node %s: tree node %zu reads feature %lld of %lld", node.label().c_str(),
                          cur, (long long)e.features[cur], (long long)num_features);
    bool t = goes_true(e, cur, row[e.features[cur]]);
    int64_t next = t ? e.true_ids[cur] : e.false_ids[cur];
    if ((t ? e.true_leaf[cur] : e.false_leaf[cur]) != 0) return static_cast<size_t>(next);
    cur = static_cast<size_t>(next);
  }
  return invalid_argument("node %s: the tree from root %zu has a cycle", node.label().c_str(),
                          root);
}

// Inverse error function: Giles' single-precision approximation refined by two Newton
// steps on erf, accurate to double rounding over (-1, 1).
double erfinv(double x) {
  if (x <= -1) return -std::numeric_limits<double>::infinity();
  if (x >= 1) return std::numeric_limits<double>::infinity();
  double w = -std::log((1.0 - x) * (1.0 + x)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    for (double c : {3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                     -0.00417768164, 0.246640727, 1.50140941})
      p = c + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    for (double c : {0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                     0.00943887047, 1.00167406, 2.83297682})
      p = c + p * w;
  }
  double y = p * x;
  for (int i = 0; i < 2; ++i)
    y -= (std::erf(y) - x) / (2.0 / std::sqrt(std::numbers::pi) * std::exp(-y * y));
  return y;
}

void post_transform(int64_t kind, std::vector<double>& v) {
  switch (kind) {
    case 1:
    case 3: {  // softmax; softmax_zero keeps zero scores at zero
      double m = -std::numeric_limits<double>::infinity();
      for (double x : v) m = std::max(m, x);
      double sum = 0;
      for (double& x : v) {
        x = (kind == 3 && x == 0) ? 0 : std::exp(x - m);
        sum += x;
      }
      for (double& x : v) x = sum > 0 ? x / sum : 0;
      break;
    }
    case 2:
      for (double& x : v) x = 1.0 / (1.0 + std::exp(-x));
      break;
    case 4:  // probit: the inverse of the standard normal CDF
      for (double& x : v) x = std::sqrt(2.0) * erfinv(2.0 * x - 1.0);
      break;
    default:
      break;
  }
}

Status tree_ensemble_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  const Tensor& x = *ctx.input(0);
  if (!type_in(x.dtype(), kTypeFloats))
    return invalid_argument("node %s: input must be float, double or float16, got %s",
                            node.label().c_str(), dtype_name(x.dtype()));
  if (x.rank() != 2)
    return invalid_argument("node %s: input must be [N, F], got %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  KILN_ASSIGN_OR_RETURN(Ensemble e, read_ensemble(node));
  const int64_t rows = x.dim(0), features = x.dim(1);
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, x.dtype(), {rows, e.n_targets}));
  std::vector<double> row(static_cast<size_t>(features)), acc(static_cast<size_t>(e.n_targets));
  const double init = e.aggregate == 2   ? std::numeric_limits<double>::max()
                      : e.aggregate == 3 ? std::numeric_limits<double>::lowest()
                                         : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t f = 0; f < features; ++f)
      row[static_cast<size_t>(f)] = x.element_as_double(r * features + f);
    std::fill(acc.begin(), acc.end(), init);
    for (int64_t root : e.roots) {
      KILN_ASSIGN_OR_RETURN(size_t leaf,
                            find_leaf(node, e, static_cast<size_t>(root), row.data(), features));
      double& a = acc[static_cast<size_t>(e.leaf_targets[leaf])];
      const double w = e.leaf_weights[leaf];
      switch (e.aggregate) {
        case 0:
          a += w / static_cast<double>(e.roots.size());
          break;
        case 1:
          a += w;
          break;
        case 2:
          a = std::min(a, w);
          break;
        default:
          a = std::max(a, w);
          break;
      }
    }
    post_transform(e.post, acc);
    for (int64_t t = 0; t < e.n_targets; ++t) {
      const double v = acc[static_cast<size_t>(t)];
      const int64_t o = r * e.n_targets + t;
      switch (x.dtype()) {
        case DataType::kFloat64:
          y->data<double>()[o] = v;
          break;
        case DataType::kFloat32:
          y->data<float>()[o] = static_cast<float>(v);
          break;
        case DataType::kFloat16:
          y->data<uint16_t>()[o] = float_to_fp16(static_cast<float>(v));
          break;
        default:
          y->data<uint16_t>()[o] = float_to_bf16(static_cast<float>(v));
          break;
      }
    }
  }
  return ok_status();
}

Status infer_tree_ensemble(InferContext& ctx) {
  if (!ctx.has_input(0)) return ok_status();
  const ir::TensorType& t = ctx.input_type(0);
  if (t.dtype != DataType::kUndefined && !type_in(t.dtype, kTypeFloats))
    return invalid_argument("node %s: input must be float, double or float16, got %s",
                            ctx.node().label().c_str(), dtype_name(t.dtype));
  const int64_t targets = ctx.node().attr_int("n_targets", 0);
  Shape out{t.shape.has_rank() && t.shape.rank() == 2 ? t.shape[0] : Dim(),
            targets > 0 ? Dim(targets) : Dim()};
  ctx.set_output(0, t.dtype, out);
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("LabelEncoder", kMlDomain)
                     .since(1, 1)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("classes_strings", ir::AttrKind::kStrings)
                     .attr("default_int64", ir::AttrKind::kInt)
                     .attr("default_string", ir::AttrKind::kString)
                     .infer(infer_label_encoder)
                     .kernel(label_encoder_kernel));
KILN_REGISTER_OP(OpSchema("LabelEncoder", kMlDomain)
                     .since(2)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("keys_int64s", ir::AttrKind::kInts)
                     .attr("keys_floats", ir::AttrKind::kFloats)
                     .attr("keys_strings", ir::AttrKind::kStrings)
                     .attr("keys_tensor", ir::AttrKind::kTensor)
                     .attr("values_int64s", ir::AttrKind::kInts)
                     .attr("values_floats", ir::AttrKind::kFloats)
                     .attr("values_strings", ir::AttrKind::kStrings)
                     .attr("values_tensor", ir::AttrKind::kTensor)
                     .attr("default_int64", ir::AttrKind::kInt)
                     .attr("default_float", ir::AttrKind::kFloat)
                     .attr("default_string", ir::AttrKind::kString)
                     .attr("default_tensor", ir::AttrKind::kTensor)
                     .infer(infer_label_encoder)
                     .kernel(label_encoder_kernel));
KILN_REGISTER_OP(OpSchema("ArrayFeatureExtractor", kMlDomain)
                     .since(1)
                     .inputs(2, 2)
                     .outputs(1, 1)
                     .infer(infer_array_feature_extractor)
                     .kernel(array_feature_extractor_kernel));
KILN_REGISTER_OP(OpSchema("Binarizer", kMlDomain)
                     .since(1)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("threshold", ir::AttrKind::kFloat)
                     .infer(infer_binarizer)
                     .kernel(binarizer_kernel));
KILN_REGISTER_OP(OpSchema("TreeEnsemble", kMlDomain)
                     .since(5)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .attr("aggregate_function", ir::AttrKind::kInt)
                     .required_attr("leaf_targetids", ir::AttrKind::kInts)
                     .required_attr("leaf_weights", ir::AttrKind::kTensor)
                     .attr("membership_values", ir::AttrKind::kTensor)
                     .attr("n_targets", ir::AttrKind::kInt)
                     .required_attr("nodes_falseleafs", ir::AttrKind::kInts)
                     .required_attr("nodes_falsenodeids", ir::AttrKind::kInts)
                     .required_attr("nodes_featureids", ir::AttrKind::kInts)
                     .attr("nodes_hitrates", ir::AttrKind::kTensor)
                     .attr("nodes_missing_value_tracks_true", ir::AttrKind::kInts)
                     .required_attr("nodes_modes", ir::AttrKind::kTensor)
                     .required_attr("nodes_splits", ir::AttrKind::kTensor)
                     .required_attr("nodes_trueleafs", ir::AttrKind::kInts)
                     .required_attr("nodes_truenodeids", ir::AttrKind::kInts)
                     .attr("post_transform", ir::AttrKind::kInt)
                     .required_attr("tree_roots", ir::AttrKind::kInts)
                     .infer(infer_tree_ensemble)
                     .kernel(tree_ensemble_kernel));

}  // namespace
}  // namespace kiln::ops
