// TfIdfVectorizer: counts the n-grams of a pool (with skips) in each row of int or string
// tokens and weighs them as TF, IDF or TF-IDF.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "ops/op_util.h"

namespace kiln::ops {
namespace {

struct TfIdfConfig {
  int64_t min_gram = 0, max_gram = 0, max_skip = 0;
  enum Mode { kTf, kIdf, kTfIdf } mode = kTf;
  std::vector<int64_t> counts;   // ngram_counts: pool start of the 1-grams, 2-grams, ...
  std::vector<int64_t> indexes;  // ngram_indexes: output slot of each pool n-gram
  std::vector<float> weights;    // per pool n-gram; empty means 1
  bool strings = false;
  int64_t output_size = 0;
};

Expected<TfIdfConfig> read_config(const ir::Node& node) {
  TfIdfConfig c;
  const std::string label_text = node.label();
  const char* label = label_text.c_str();
  c.min_gram = node.attr_int("min_gram_length", 0);
  c.max_gram = node.attr_int("max_gram_length", 0);
  c.max_skip = node.attr_int("max_skip_count", 0);
  if (c.min_gram < 1 || c.max_gram < c.min_gram)
    return invalid_argument("node %s: need 1 <= min_gram_length (%lld) <= max_gram_length (%lld)",
                            label, (long long)c.min_gram, (long long)c.max_gram);
  if (c.max_skip < 0) return invalid_argument("node %s: max_skip_count is negative", label);
  const std::string mode = node.attr_string("mode", "");
  if (mode == "TF") {
    c.mode = TfIdfConfig::kTf;
  } else if (mode == "IDF") {
    c.mode = TfIdfConfig::kIdf;
  } else if (mode == "TFIDF") {
    c.mode = TfIdfConfig::kTfIdf;
  } else {
    return invalid_argument("node %s: mode '%s' is not TF, IDF or TFIDF", label, mode.c_str());
  }
  c.counts = node.attr_ints("ngram_counts");
  c.indexes = node.attr_ints("ngram_indexes");
  c.weights = node.attr_floats("weights");
  c.strings = node.has_attr("pool_strings");
  if (c.strings == node.has_attr("pool_int64s"))
    return invalid_argument("node %s: needs exactly one of pool_int64s and pool_strings", label);
  for (int64_t i : c.indexes) {
    if (i < 0)
      return invalid_argument("node %s: ngram_indexes has negative index %lld", label,
                              (long long)i);
    c.output_size = std::max(c.output_size, i + 1);
  }
  if (!c.weights.empty() && c.weights.size() != c.indexes.size())
    return invalid_argument("node %s: %zu weights for %zu ngram_indexes", label, c.weights.size(),
                            c.indexes.size());
  return c;
}

// The pool as a map from n-gram to its position among the pool's n-grams.
template <typename T>
Expected<std::map<std::vector<T>, int64_t>> build_pool(const ir::Node& node, const TfIdfConfig& c,
                                                       const std::vector<T>& pool) {
  std::map<std::vector<T>, int64_t> grams;
  const int64_t size = static_cast<int64_t>(pool.size());
  int64_t gram_id = 0;
  for (size_t level = 0; level < c.counts.size(); ++level) {
    const int64_t n = static_cast<int64_t>(level) + 1;
    const int64_t begin = c.counts[level];
    const int64_t end = level + 1 < c.counts.size() ? c.counts[level + 1] : size;
    if (begin < 0 || end < begin || end > size || (end - begin) % n != 0)
      return invalid_argument(
          "node %s: ngram_counts %s do not split a pool of %lld items into %lld-grams",
          node.label().c_str(), dims_to_string(c.counts).c_str(), (long long)size, (long long)n);
    for (int64_t s = begin; s < end; s += n, ++gram_id)
      grams.emplace(std::vector<T>(pool.begin() + s, pool.begin() + s + n), gram_id);
  }
  if (gram_id != static_cast<int64_t>(c.indexes.size()))
    return invalid_argument(
        "node %s: the pool holds %lld n-grams but ngram_indexes has %zu entries",
        node.label().c_str(), (long long)gram_id, c.indexes.size());
  return grams;
}

template <typename T, typename Get>
Status vectorize(KernelContext& ctx, const TfIdfConfig& c, const std::vector<T>& pool, Get get) {
  KILN_ASSIGN_OR_RETURN(auto grams, build_pool(ctx.node(), c, pool));
  const Tensor& x = *ctx.input(0);
  const int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
  const int64_t len = x.rank() == 2 ? x.dim(1) : x.num_elements();
  std::vector<int64_t> out_dims = x.rank() == 2 ? std::vector<int64_t>{rows, c.output_size}
                                                : std::vector<int64_t>{c.output_size};
  KILN_ASSIGN_OR_RETURN(Tensor * y, ctx.allocate_output(0, DataType::kFloat32, out_dims));
  std::vector<int64_t> counts(c.indexes.size());
  std::vector<T> key;
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(counts.begin(), counts.end(), 0);
    auto count = [&]() {
      auto it = grams.find(key);
      if (it != grams.end()) ++counts[static_cast<size_t>(it->second)];
    };
    for (int64_t start = 0; start < len; ++start) {
      // Unigrams have no gaps to skip: each token counts once.
      if (c.min_gram <= 1) {
        key.assign(1, get(r * len + start));
        count();
      }
      for (int64_t skip = 0; skip <= c.max_skip; ++skip) {
        key.assign(1, get(r * len + start));
        for (int64_t n = 2; n <= c.max_gram; ++n) {
          const int64_t pos = start + (n - 1) * (skip + 1);
          if (pos >= len) break;
          key.push_back(get(r * len + pos));
          if (n >= c.min_gram) count();
        }
      }
    }
    float* out = y->data<float>() + r * c.output_size;
    for (size_t g = 0; g < counts.size(); ++g) {
      if (counts[g] == 0) continue;
      const float w = c.weights.empty() ? 1.0f : c.weights[g];
      float v = c.mode == TfIdfConfig::kTf    ? static_cast<float>(counts[g])
                : c.mode == TfIdfConfig::kIdf ? w
                                              : static_cast<float>(counts[g]) * w;
      out[c.indexes[g]] += v;
    }
  }
  return ok_status();
}

Status check_input(const ir::Node& node, DataType t, bool strings) {
  bool ok = strings ? t == DataType::kString : (t == DataType::kInt32 || t == DataType::kInt64);
  if (!ok && t != DataType::kUndefined)
    return invalid_argument("node %s: input is %s but the pool holds %s", node.label().c_str(),
                            dtype_name(t), strings ? "strings" : "integers");
  return ok_status();
}

Status tfidf_kernel(KernelContext& ctx) {
  const ir::Node& node = ctx.node();
  KILN_ASSIGN_OR_RETURN(TfIdfConfig c, read_config(node));
  const Tensor& x = *ctx.input(0);
  KILN_RETURN_IF_ERROR(check_input(node, x.dtype(), c.strings));
  if (x.rank() != 1 && x.rank() != 2)
    return invalid_argument("node %s: input must be [C] or [N, C], got %s", node.label().c_str(),
                            dims_to_string(x.dims()).c_str());
  if (c.strings) {
    const std::vector<std::string>& pool = node.attr("pool_strings")->strings;
    return vectorize<std::string>(ctx, c, pool,
                                  [&](int64_t i) { return x.data<std::string>()[i]; });
  }
  std::vector<int64_t> pool = node.attr_ints("pool_int64s");
  return vectorize<int64_t>(ctx, c, pool, [&](int64_t i) { return x.element_as_int64(i); });
}

Status infer_tfidf(InferContext& ctx) {
  KILN_ASSIGN_OR_RETURN(TfIdfConfig c, read_config(ctx.node()));
  if (!ctx.has_input(0)) return ok_status();
  KILN_RETURN_IF_ERROR(check_input(ctx.node(), ctx.input_type(0).dtype, c.strings));
  const Shape& s = ctx.input_type(0).shape;
  Shape out;
  if (s.has_rank()) {
    if (s.rank() != 1 && s.rank() != 2)
      return invalid_argument("node %s: input must be [C] or [N, C], got %s",
                              ctx.node().label().c_str(), s.to_string().c_str());
    out = s.rank() == 2 ? Shape{s[0], Dim(c.output_size)} : Shape{Dim(c.output_size)};
  }
  ctx.set_output(0, DataType::kFloat32, out);
  return ok_status();
}

KILN_REGISTER_OP(OpSchema("TfIdfVectorizer")
                     .since(9)
                     .inputs(1, 1)
                     .outputs(1, 1)
                     .required_attr("max_gram_length", ir::AttrKind::kInt)
                     .required_attr("min_gram_length", ir::AttrKind::kInt)
                     .required_attr("max_skip_count", ir::AttrKind::kInt)
                     .required_attr("mode", ir::AttrKind::kString)
                     .required_attr("ngram_counts", ir::AttrKind::kInts)
                     .required_attr("ngram_indexes", ir::AttrKind::kInts)
                     .attr("pool_int64s", ir::AttrKind::kInts)
                     .attr("pool_strings", ir::AttrKind::kStrings)
                     .attr("weights", ir::AttrKind::kFloats)
                     .infer(infer_tfidf)
                     .kernel(tfidf_kernel));

}  // namespace
}  // namespace kiln::ops
