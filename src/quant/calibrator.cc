// Calibration on Kiln (calibrator.h).
#include "quant/calibrator.h"

#include <algorithm>
#include <cstring>

#include "runtime/graph_executor.h"

namespace kiln::quant {
namespace {

// Consecutive samples that run together: [begin, end).
struct Batch {
  size_t begin, end;
};

// The static batch every input shares (> 1), or 0.
int64_t static_batch(const std::vector<ModelInput>& inputs) {
  int64_t b = -1;
  for (const ModelInput& in : inputs) {
    if (in.dims.empty() || in.dims[0] <= 1 || (b >= 0 && in.dims[0] != b)) return 0;
    b = in.dims[0];
  }
  return b > 1 ? b : 0;
}

std::vector<Batch> make_batches(const std::vector<ModelInput>& inputs, const CalibrationSet& data, int64_t batch_size) {
  std::vector<Batch> out;
  const auto& s = data.samples;
  // A model with a static batch B > 1 takes exactly B samples per run; a remainder is left out.
  if (int64_t b = static_batch(inputs); b > 0) {
    for (size_t i = 0; i + static_cast<size_t>(b) <= s.size(); i += static_cast<size_t>(b))
      out.push_back({i, i + static_cast<size_t>(b)});
    return out;
  }
  bool stackable = batch_size > 1;
  for (const ModelInput& in : inputs) stackable = stackable && !in.dims.empty() && in.dims[0] < 0;
  for (size_t i = 0; i < s.size();) {
    size_t j = i + 1;
    while (stackable && j < s.size() && static_cast<int64_t>(j - i) < batch_size) {
      bool same = true;
      for (size_t k = 0; same && k < inputs.size(); ++k) same = s[j][k].dims() == s[i][k].dims();
      if (!same) break;
      ++j;
    }
    out.push_back({i, j});
    i = j;
  }
  return out;
}

Tensor stack(const CalibrationSet& data, const Batch& b, size_t input) {
  const Tensor& first = data.samples[b.begin][input];
  if (b.end - b.begin == 1) return first;
  std::vector<int64_t> dims = first.dims();
  dims[0] = static_cast<int64_t>(b.end - b.begin);
  Tensor t = Tensor::make(first.dtype(), dims);
  size_t off = 0;
  for (size_t i = b.begin; i < b.end; ++i) {
    const Tensor& r = data.samples[i][input];
    std::memcpy(static_cast<char*>(t.raw_data()) + off, r.raw_data(), r.size_bytes());
    off += r.size_bytes();
  }
  return t;
}

}  // namespace

std::vector<ModelInput> model_inputs(const ir::Graph& graph) {
  std::vector<ModelInput> out;
  for (const ir::Value* v : graph.inputs()) {
    if (v->has_initializer()) continue;
    ModelInput in{v->name(), v->dtype(), {}};
    if (v->shape().has_rank())
      for (const Dim& d : v->shape().dims()) in.dims.push_back(d.is_static() ? d.value : -1);
    out.push_back(std::move(in));
  }
  return out;
}

Expected<std::map<std::string, TensorStats>> collect_statistics(std::shared_ptr<ir::Graph> graph,
                                                                const std::vector<ModelInput>& inputs,
                                                                const std::vector<std::string>& tensors,
                                                                const CalibrationSet& data,
                                                                const CalibratorOptions& options,
                                                                int64_t* samples_used) {
  // 1. Every tensor to calibrate becomes a graph output (once).
  std::vector<size_t> slots;
  auto& outs = graph->outputs();
  for (const std::string& name : tensors) {
    ir::Value* v = graph->find_value(name);
    if (!v) return internal_error("tensor '%s' to calibrate is not in the imported graph", name.c_str());
    if (v->dtype() != DataType::kFloat32)
      return invalid_argument("tensor '%s' to calibrate is %s, not float32", name.c_str(), dtype_name(v->dtype()));
    auto it = std::find(outs.begin(), outs.end(), v);
    if (it == outs.end()) {
      outs.push_back(v);
      slots.push_back(outs.size() - 1);
    } else {
      slots.push_back(static_cast<size_t>(it - outs.begin()));
    }
  }
  KILN_ASSIGN_OR_RETURN(auto executor, rt::GraphExecutor::create(graph), "preparing the float model for calibration");

  // 2. One pass for min/max, a second for the histograms over the ranges the first found.
  std::map<std::string, TensorStats> stats;
  for (const std::string& name : tensors) stats[name];
  const std::vector<Batch> batches = make_batches(inputs, data, options.batch_size);
  if (batches.empty())
    return invalid_argument("the model's inputs have a static batch of %lld but there are only %zu calibration samples",
                            static_cast<long long>(static_batch(inputs)), data.samples.size());
  const int passes = options.histograms ? 2 : 1;
  const int64_t total = static_cast<int64_t>(batches.back().end);
  if (samples_used) *samples_used = total;
  for (int pass = 1; pass <= passes; ++pass) {
    for (const Batch& b : batches) {
      std::vector<rt::NamedValue> feeds;
      for (size_t k = 0; k < inputs.size(); ++k) feeds.push_back({inputs[k].name, RuntimeValue(stack(data, b, k))});
      std::vector<RuntimeValue> results;
      KILN_RETURN_IF_ERROR(executor->run(feeds, &results), "calibration samples %zu..%zu", b.begin, b.end - 1);
      for (size_t t = 0; t < tensors.size(); ++t) {
        const RuntimeValue& r = results[slots[t]];
        if (!r.is_tensor() || r.tensor().dtype() != DataType::kFloat32)
          return internal_error("calibrated tensor '%s' did not come back as a float32 tensor", tensors[t].c_str());
        const Tensor& x = r.tensor();
        TensorStats& s = stats[tensors[t]];
        if (pass == 1) s.add_minmax(x.data<float>(), x.num_elements());
        else s.add_histogram(x.data<float>(), x.num_elements());
      }
      if (options.progress) options.progress(pass, static_cast<int64_t>(b.end), total);
    }
  }
  return stats;
}

}  // namespace kiln::quant
