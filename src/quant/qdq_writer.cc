// The QDQ ModelProto rewrite (qdq_writer.h).
#include "quant/qdq_writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "frontend/onnx/tensor_proto.h"

namespace kiln::quant {
namespace {

class Names {
 public:
  explicit Names(const onnx::GraphProto& g) { collect(g); }
  std::string fresh(const std::string& base) {
    std::string n = base;
    for (int k = 1; used_.count(n); ++k) n = base + "_" + std::to_string(k);
    used_.insert(n);
    return n;
  }

 private:
  void collect(const onnx::GraphProto& g) {
    for (const auto& t : g.initializer()) used_.insert(t.name());
    for (const auto& v : g.input()) used_.insert(v.name());
    for (const auto& v : g.output()) used_.insert(v.name());
    for (const auto& v : g.value_info()) used_.insert(v.name());
    for (const auto& n : g.node()) {
      used_.insert(n.name());
      for (const auto& s : n.output()) used_.insert(s);
      for (const auto& a : n.attribute()) {
        if (a.has_g()) collect(a.g());
        for (const auto& sg : a.graphs()) collect(sg);
      }
    }
  }
  std::set<std::string> used_;
};

template <typename T>
onnx::TensorProto make_tensor(const std::string& name, int32_t type, const std::vector<int64_t>& dims,
                              const std::vector<T>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  return t;
}

onnx::NodeProto make_node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                          const std::string& output, int axis = -1) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& in : inputs) n.add_input(in);
  n.add_output(output);
  if (axis >= 0) {
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  return n;
}

void collect_inputs(const onnx::GraphProto& g, std::set<std::string>& used) {
  for (const auto& n : g.node()) {
    for (const auto& s : n.input()) used.insert(s);
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_inputs(a.g(), used);
      for (const auto& sg : a.graphs()) collect_inputs(sg, used);
    }
  }
  for (const auto& o : g.output()) used.insert(o.name());
}

}  // namespace

int64_t onnx_opset(const onnx::ModelProto& model) {
  for (const auto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  return 0;
}

Expected<std::vector<WeightReport>> write_qdq(onnx::ModelProto& model, const QdqPlan& plan,
                                              const std::map<std::string, QuantParams>& activations,
                                              ActivationType type, const std::string& model_dir) {
  const int64_t opset = onnx_opset(model);
  if (opset < 13)
    return unsupported("the model imports ai.onnx opset %lld; per-channel DequantizeLinear needs opset 13 or newer: "
                       "convert it first (onnx.version_converter.convert_version(model, 13))",
                       static_cast<long long>(opset));
  onnx::GraphProto& g = *model.mutable_graph();
  Names names(g);
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  std::vector<onnx::TensorProto> new_inits;
  std::vector<onnx::NodeProto> head;                              // weight DQs, then graph-input pairs
  std::map<std::string, std::vector<onnx::NodeProto>> after;      // Q/DQ pairs behind a tensor's producer
  std::map<std::string, std::string> act_rename, weight_rename, bias_rename;
  std::map<std::string, std::vector<float>> weight_scales;
  std::vector<WeightReport> report;
  frontend::TensorProtoContext ctx{model_dir};

  // 1. Weights: int8 per channel + DequantizeLinear(axis).
  for (const WeightPlan& w : plan.weights) {
    if (weight_rename.count(w.tensor)) continue;
    KILN_ASSIGN_OR_RETURN(Tensor t, frontend::tensor_from_proto(*inits.at(w.tensor), ctx, "initializer '" + w.tensor + "'"));
    const float* data = t.data<float>();
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (!std::isfinite(data[i])) return invalid_argument("weight '%s' holds a NaN or infinite value", w.tensor.c_str());
    PerChannelWeights q = quantize_weights_per_channel(data, t.dims(), w.axis);
    const int64_t c = t.dim(w.axis);
    std::string qn = names.fresh(w.tensor + "_quantized"), sn = names.fresh(w.tensor + "_scale"),
                zn = names.fresh(w.tensor + "_zero_point"), out = names.fresh(w.tensor + "_dequantized");
    new_inits.push_back(make_tensor(qn, onnx::TensorProto::INT8, t.dims(), q.data));
    new_inits.push_back(make_tensor(sn, onnx::TensorProto::FLOAT, {c}, q.scales));
    new_inits.push_back(make_tensor(zn, onnx::TensorProto::INT8, {c}, std::vector<int8_t>(static_cast<size_t>(c), 0)));
    head.push_back(make_node("DequantizeLinear", names.fresh(w.tensor + "_DequantizeLinear"), {qn, sn, zn}, out, w.axis));
    weight_rename[w.tensor] = out;
    auto [lo, hi] = std::minmax_element(q.scales.begin(), q.scales.end());
    report.push_back({w.tensor, w.axis, c, *lo, *hi, false});
    weight_scales[w.tensor] = std::move(q.scales);
  }
  // 2. Biases: int32 with scale x_scale * w_scale[c].
  for (const BiasPlan& b : plan.biases) {
    if (bias_rename.count(b.tensor)) continue;
    auto act = activations.find(b.input);
    if (act == activations.end()) return internal_error("bias '%s': input '%s' has no scale", b.tensor.c_str(), b.input.c_str());
    KILN_ASSIGN_OR_RETURN(Tensor t, frontend::tensor_from_proto(*inits.at(b.tensor), ctx, "initializer '" + b.tensor + "'"));
    const float* data = t.data<float>();
    for (int64_t i = 0; i < t.num_elements(); ++i)
      if (!std::isfinite(data[i])) return invalid_argument("bias '%s' holds a NaN or infinite value", b.tensor.c_str());
    Int32Bias q = quantize_bias(data, static_cast<size_t>(t.num_elements()), act->second.scale, weight_scales.at(b.weight));
    const int64_t n = t.num_elements();
    std::string qn = names.fresh(b.tensor + "_quantized"), sn = names.fresh(b.tensor + "_scale"),
                zn = names.fresh(b.tensor + "_zero_point"), out = names.fresh(b.tensor + "_dequantized");
    new_inits.push_back(make_tensor(qn, onnx::TensorProto::INT32, {n}, q.data));
    new_inits.push_back(make_tensor(sn, onnx::TensorProto::FLOAT, {n}, q.scales));
    new_inits.push_back(make_tensor(zn, onnx::TensorProto::INT32, {n}, std::vector<int32_t>(static_cast<size_t>(n), 0)));
    head.push_back(make_node("DequantizeLinear", names.fresh(b.tensor + "_DequantizeLinear"), {qn, sn, zn}, out, 0));
    bias_rename[b.tensor] = out;
    auto [lo, hi] = std::minmax_element(q.scales.begin(), q.scales.end());
    report.push_back({b.tensor, 0, n, *lo, *hi, true});
  }
  // 3. Activations: Q -> DQ behind the producer (or at the top for graph inputs).
  std::set<std::string> produced, graph_outputs;
  for (const auto& n : g.node())
    for (const auto& o : n.output()) produced.insert(o);
  for (const auto& o : g.output()) graph_outputs.insert(o.name());
  std::map<std::string, std::string> output_rename;
  const int32_t qtype = type == ActivationType::kU8 ? onnx::TensorProto::UINT8 : onnx::TensorProto::INT8;
  for (const std::string& a : plan.activations) {
    auto it = activations.find(a);
    if (it == activations.end()) return internal_error("activation '%s' was not calibrated", a.c_str());
    std::string sn = names.fresh(a + "_scale"), zn = names.fresh(a + "_zero_point");
    std::string qo = names.fresh(a + "_quantized"), dqo = names.fresh(a + "_dequantized");
    new_inits.push_back(make_tensor(sn, onnx::TensorProto::FLOAT, {}, std::vector<float>{it->second.scale}));
    if (type == ActivationType::kU8)
      new_inits.push_back(make_tensor(zn, qtype, {}, std::vector<uint8_t>{static_cast<uint8_t>(it->second.zero_point)}));
    else
      new_inits.push_back(make_tensor(zn, qtype, {}, std::vector<int8_t>{static_cast<int8_t>(it->second.zero_point)}));
    auto& dst = produced.count(a) ? after[a] : head;
    std::string src = a;
    if (graph_outputs.count(a) && produced.count(a)) {
      // A graph output keeps its name on the DQ output (as onnxruntime's quantiser): the
      // producer's float output is renamed and consumers read the DQ under the old name.
      src = names.fresh(a + "_float");
      output_rename[a] = src;
      dqo = a;
    } else {
      act_rename[a] = dqo;
    }
    dst.push_back(make_node("QuantizeLinear", names.fresh(a + "_QuantizeLinear"), {src, sn, zn}, qo));
    dst.push_back(make_node("DequantizeLinear", names.fresh(a + "_DequantizeLinear"), {qo, sn, zn}, dqo));
  }
  // 4. Rewire: every consumer reads the DQ of an activation; quantised nodes read the DQ of
  //    their weights and biases.
  std::set<int> quantised(plan.node_indices.begin(), plan.node_indices.end());
  std::vector<onnx::NodeProto> nodes = std::move(head);
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto n = g.node(i);
    for (int k = 0; k < n.input_size(); ++k) {
      const std::string& in = n.input(k);
      if (auto a = act_rename.find(in); a != act_rename.end()) n.set_input(k, a->second);
      else if (quantised.count(i) && k == 1 && weight_rename.count(in)) n.set_input(k, weight_rename[in]);
      else if (quantised.count(i) && k == 2 && bias_rename.count(in)) n.set_input(k, bias_rename[in]);
    }
    for (int k = 0; k < n.output_size(); ++k)
      if (auto r = output_rename.find(n.output(k)); r != output_rename.end()) n.set_output(k, r->second);
    nodes.push_back(std::move(n));
    for (const std::string& o : g.node(i).output())
      if (auto p = after.find(o); p != after.end())
        for (auto& q : p->second) nodes.push_back(std::move(q));
  }
  g.clear_node();
  for (auto& n : nodes) *g.add_node() = std::move(n);
  for (auto& t : new_inits) *g.add_initializer() = std::move(t);
  // 5. Drop float initializers nothing reads any more.
  std::set<std::string> used, graph_inputs;
  collect_inputs(g, used);
  for (const auto& v : g.input()) graph_inputs.insert(v.name());
  auto* list = g.mutable_initializer();
  list->erase(std::remove_if(list->begin(), list->end(),
                             [&](const onnx::TensorProto& t) {
                               return !used.count(t.name()) && !graph_inputs.count(t.name());
                             }),
              list->end());
  return report;
}

}  // namespace kiln::quant
