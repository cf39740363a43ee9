// Per-layer sensitivity and automatic float fallback (sensitivity.h).
#include "quant/sensitivity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "compiler/compiler.h"
#include "runtime/graph_executor.h"

namespace kiln::quant {
namespace {

using Outputs = std::vector<std::vector<Tensor>>;  // per sample, the model's float32 outputs

// A model variant compiled by Kiln at -O3 for the evaluation samples' shapes, ready to run.
struct Prepared {
  std::shared_ptr<ir::Graph> graph;
  std::unique_ptr<rt::GraphExecutor> executor;
};

// The evaluation samples' input shapes when they all share them (the variants are then compiled
// for those shapes), else empty: the variants keep the model's open dims and prepare their
// kernels per shape as they run (OCR recognition crops differ in width).
compiler::InputShapes common_shapes(const std::vector<ModelInput>& inputs, const std::vector<Sample>& eval) {
  compiler::InputShapes shapes;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (const Sample& s : eval)
      if (s[k].dims() != eval[0][k].dims()) return {};
    shapes[inputs[k].name] = eval[0][k].dims();
  }
  return shapes;
}

Expected<Prepared> prepare(const std::string& bytes, const compiler::InputShapes& shapes, const std::string& what) {
  compiler::CompileOptions options;
  options.passes.opt_level = 3;
  options.input_shapes = shapes;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled,
                        compiler::compile_onnx_bytes(bytes.data(), bytes.size(), what, options), "compiling %s",
                        what.c_str());
  Prepared p;
  p.graph = compiled.graph;
  KILN_ASSIGN_OR_RETURN(p.executor, rt::GraphExecutor::create(p.graph), "preparing %s", what.c_str());
  return p;
}

std::vector<rt::NamedValue> feeds(const std::vector<ModelInput>& inputs, const Sample& sample) {
  std::vector<rt::NamedValue> f;
  for (size_t k = 0; k < inputs.size(); ++k) f.push_back({inputs[k].name, RuntimeValue(sample[k])});
  return f;
}

Expected<Outputs> run_all(const Prepared& p, const std::vector<ModelInput>& inputs, const std::vector<Sample>& eval,
                          const std::string& what) {
  Outputs out;
  for (size_t s = 0; s < eval.size(); ++s) {
    std::vector<RuntimeValue> results;
    KILN_RETURN_IF_ERROR(p.executor->run(feeds(inputs, eval[s]), &results), "running %s on evaluation sample %zu",
                         what.c_str(), s);
    std::vector<Tensor> tensors;
    for (RuntimeValue& r : results) {
      if (!r.is_tensor() || r.tensor().dtype() != DataType::kFloat32)
        return unsupported("%s: the sensitivity metrics take float32 tensor outputs", what.c_str());
      tensors.push_back(std::move(r.tensor()));
    }
    out.push_back(std::move(tensors));
  }
  return out;
}

// Median wall time (ms) of 7 runs on the first sample, after one untimed run.
Expected<double> latency_ms(const Prepared& p, const std::vector<ModelInput>& inputs, const Sample& sample) {
  std::vector<double> ms;
  for (int i = 0; i < 8; ++i) {
    std::vector<RuntimeValue> results;
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(p.executor->run(feeds(inputs, sample), &results));
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) ms.push_back(t);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return ms[ms.size() / 2];
}

double cosine(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t t = 0; t < a.size() && t < b.size(); ++t) {
    const float* x = a[t].data<float>();
    const float* y = b[t].data<float>();
    for (int64_t i = 0; i < std::min(a[t].num_elements(), b[t].num_elements()); ++i) {
      dot += double(x[i]) * y[i];
      na += double(x[i]) * x[i];
      nb += double(y[i]) * y[i];
    }
  }
  if (na == 0 && nb == 0) return 1.0;
  if (na == 0 || nb == 0) return 0.0;
  return dot / std::sqrt(na * nb);
}

// Rows of output 0 (argmax over its last axis) that agree, and how many rows there are.
std::pair<int64_t, int64_t> top1_agreement(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.empty() || b.empty() || a[0].dims() != b[0].dims() || a[0].rank() == 0) return {0, 1};
  const int64_t classes = a[0].dims().back();
  const int64_t rows = classes > 0 ? a[0].num_elements() / classes : 0;
  int64_t agree = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = a[0].data<float>() + r * classes;
    const float* y = b[0].data<float>() + r * classes;
    agree += (std::max_element(x, x + classes) - x) == (std::max_element(y, y + classes) - y);
  }
  return {agree, std::max<int64_t>(rows, 1)};
}

// Elements of output 0 above `threshold` in both, and in either.
std::pair<int64_t, int64_t> mask_overlap(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                                         double threshold) {
  if (a.empty() || b.empty()) return {0, 0};
  const int64_t n = std::min(a[0].num_elements(), b[0].num_elements());
  const float* x = a[0].data<float>();
  const float* y = b[0].data<float>();
  int64_t both = 0, either = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool p = x[i] > threshold, q = y[i] > threshold;
    both += p && q;
    either += p || q;
  }
  // Different extents (a variant that changed the output's shape) count as disagreeing.
  if (a[0].dims() != b[0].dims()) either += std::max(a[0].num_elements(), b[0].num_elements()) - n + 1;
  return {both, either};
}

double metric(const SensitivityOptions& o, const Outputs& reference, const Outputs& got) {
  const SensitivityMetric m = o.metric;
  if (m == SensitivityMetric::kMaskIou) {
    int64_t both = 0, either = 0;
    for (size_t s = 0; s < reference.size(); ++s) {
      auto [i, u] = mask_overlap(reference[s], got[s], o.mask_threshold);
      both += i;
      either += u;
    }
    return either ? static_cast<double>(both) / static_cast<double>(either) : 1.0;
  }
  if (m == SensitivityMetric::kCosine) {
    double sum = 0;
    for (size_t s = 0; s < reference.size(); ++s) sum += cosine(reference[s], got[s]);
    return reference.empty() ? 1.0 : sum / static_cast<double>(reference.size());
  }
  int64_t agree = 0, rows = 0;
  for (size_t s = 0; s < reference.size(); ++s) {
    auto [a, r] = top1_agreement(reference[s], got[s]);
    agree += a;
    rows += r;
  }
  return rows ? static_cast<double>(agree) / static_cast<double>(rows) : 1.0;
}

}  // namespace

Expected<SensitivityResult> analyse_sensitivity(const std::vector<std::string>& nodes, const VariantBuilder& build,
                                                const std::vector<ModelInput>& inputs,
                                                const std::vector<Sample>& eval, const SensitivityOptions& options) {
  if (eval.empty()) return invalid_argument("the sensitivity analysis needs evaluation samples");
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  // Compiles, runs and scores the variant quantising `quantised`.
  const std::set<std::string> all(nodes.begin(), nodes.end());
  KILN_ASSIGN_OR_RETURN(std::string float_bytes, build({}));
  const compiler::InputShapes shapes = common_shapes(inputs, eval);
  KILN_ASSIGN_OR_RETURN(Prepared float_model, prepare(float_bytes, shapes, "the float model"));
  KILN_ASSIGN_OR_RETURN(Outputs reference, run_all(float_model, inputs, eval, "the float model"));
  auto score = [&](const std::set<std::string>& quantised, const std::string& what,
                   Prepared* keep = nullptr) -> Expected<double> {
    KILN_ASSIGN_OR_RETURN(std::string bytes, build(quantised));
    KILN_ASSIGN_OR_RETURN(Prepared p, prepare(bytes, shapes, what));
    KILN_ASSIGN_OR_RETURN(Outputs got, run_all(p, inputs, eval, what));
    if (keep) *keep = std::move(p);
    return metric(options, reference, got);
  };

  SensitivityResult result;
  Prepared all_int8;
  KILN_ASSIGN_OR_RETURN(result.all_int8, score(all, "the fully quantised model", &all_int8));
  for (size_t i = 0; i < nodes.size(); ++i) {
    say(str_format("sensitivity %zu/%zu: %s", i + 1, nodes.size(), nodes[i].c_str()));
    LayerSensitivity l;
    l.node = nodes[i];
    KILN_ASSIGN_OR_RETURN(l.only_int8, score({nodes[i]}, "the model quantising only " + nodes[i]));
    std::set<std::string> others = all;
    others.erase(nodes[i]);
    KILN_ASSIGN_OR_RETURN(l.only_float, score(others, "the model keeping only " + nodes[i] + " float"));
    result.layers.push_back(std::move(l));
  }
  // Most sensitive first: the lowest metric alone in int8; ties by the gain of keeping it float.
  std::stable_sort(result.layers.begin(), result.layers.end(), [](const LayerSensitivity& a, const LayerSensitivity& b) {
    return a.only_int8 != b.only_int8 ? a.only_int8 < b.only_int8 : a.only_float > b.only_float;
  });

  result.quantised = all;
  result.chosen = result.all_int8;
  Prepared chosen;
  bool chosen_is_all = true;
  if (options.target >= 0) {
    for (LayerSensitivity& l : result.layers) {
      if (result.chosen >= options.target) break;
      l.kept_float = true;
      result.quantised.erase(l.node);
      say(str_format("fallback: %s stays float (%zu of %zu quantised)", l.node.c_str(), result.quantised.size(),
                     nodes.size()));
      KILN_ASSIGN_OR_RETURN(result.chosen, score(result.quantised, "the model with fallbacks", &chosen));
      chosen_is_all = false;
    }
    result.budget_met = result.chosen >= options.target;
  }
  KILN_ASSIGN_OR_RETURN(result.float_ms, latency_ms(float_model, inputs, eval[0]));
  KILN_ASSIGN_OR_RETURN(result.all_int8_ms, latency_ms(all_int8, inputs, eval[0]));
  KILN_ASSIGN_OR_RETURN(result.chosen_ms, latency_ms(chosen_is_all ? all_int8 : chosen, inputs, eval[0]));
  return result;
}

}  // namespace kiln::quant
