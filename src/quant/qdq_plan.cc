// Choosing the nodes to quantise and the tensors to wrap in Q->DQ (qdq_plan.h).
#include "quant/qdq_plan.h"

#include <algorithm>

namespace kiln::quant {
namespace {

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

}  // namespace

const std::vector<std::string>& quantizable_op_types() {
  static const std::vector<std::string> ops = {"Conv",    "MatMul",      "Gemm",   "Add",  "Mul",  "MaxPool",
                                               "AveragePool", "GlobalAveragePool", "Concat", "Resize", "Relu", "Clip"};
  return ops;
}

const std::vector<std::string>& default_op_types() {
  static const std::vector<std::string> ops = {"Conv",        "MatMul",            "Gemm",   "Add",   "MaxPool",
                                               "AveragePool", "GlobalAveragePool", "Concat", "Resize"};
  return ops;
}

std::string node_label(const onnx::NodeProto& node, int index) {
  return node.name().empty() ? node.op_type() + "#" + std::to_string(index) : node.name();
}

Expected<QdqPlan> plan_qdq(const onnx::ModelProto& model, const QdqPlanOptions& options,
                           const std::function<bool(const std::string&)>& is_float32) {
  const onnx::GraphProto& g = model.graph();
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const auto& t : g.initializer()) inits[t.name()] = &t;
  std::map<std::string, std::vector<int>> consumers;
  for (int i = 0; i < g.node_size(); ++i)
    for (const std::string& in : g.node(i).input())
      if (!in.empty()) consumers[in].push_back(i);
  // Initializers and Constant nodes' outputs: what a Clip's bounds may be.
  std::set<std::string> constants;
  for (const auto& t : g.initializer()) constants.insert(t.name());
  for (const auto& n : g.node())
    if (n.op_type() == "Constant" && is_default_domain(n.domain()) && n.output_size() == 1) constants.insert(n.output(0));
  std::set<std::string> graph_outputs;
  for (const auto& o : g.output()) graph_outputs.insert(o.name());

  auto float_init = [&](const std::string& name, int min_rank) -> const onnx::TensorProto* {
    auto it = inits.find(name);
    if (it == inits.end() || it->second->data_type() != onnx::TensorProto::FLOAT ||
        it->second->dims_size() < min_rank)
      return nullptr;
    return it->second;
  };
  auto activation = [&](const std::string& name) {
    return !name.empty() && !inits.count(name) && is_float32(name);
  };

  QdqPlan plan;
  std::set<std::string> seen_act, seen_weight;
  auto add_act = [&](const std::string& t) {
    if (seen_act.insert(t).second) plan.activations.push_back(t);
  };
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string& op = n.op_type();
    if (!is_default_domain(n.domain()) || !options.op_types.count(op)) continue;
    const std::string label = node_label(n, i);
    auto skip = [&](const std::string& why) { plan.skipped.push_back("node '" + label + "' (" + op + "): " + why); };
    if (options.exclude.count(label)) {
      skip("excluded by --exclude");
      continue;
    }
    std::vector<std::string> acts;
    std::vector<WeightPlan> weights;
    std::vector<BiasPlan> biases;
    const int nin = n.input_size();
    if (op == "Conv" || op == "Gemm" || op == "MatMul") {
      if (nin < 2 || !activation(n.input(0))) {
        skip("input A is not a float32 activation");
        continue;
      }
      acts.push_back(n.input(0));
      int axis = 0;
      const onnx::TensorProto* w = nullptr;
      if (op == "Conv") {
        w = float_init(n.input(1), 3);
        axis = 0;
      } else if (op == "Gemm") {
        w = float_init(n.input(1), 2);
        const auto* tb = find_attr(n, "transB");
        axis = tb && tb->i() ? 0 : 1;
        if (w && w->dims_size() != 2) w = nullptr;
      } else {
        w = float_init(n.input(1), 2);
        if (w) axis = w->dims_size() - 1;
      }
      if (w) {
        weights.push_back({n.input(1), axis});
      } else if (op == "MatMul" && activation(n.input(1))) {
        acts.push_back(n.input(1));
      } else {
        skip("the weights are not a float32 initializer");
        continue;
      }
      if (w && op != "MatMul" && nin > 2 && !n.input(2).empty()) {
        const onnx::TensorProto* b = float_init(n.input(2), 1);
        bool unit = true;
        if (op == "Gemm")
          for (const char* a : {"alpha", "beta"})
            if (const auto* at = find_attr(n, a); at && at->f() != 1.0f) unit = false;
        // A bias shared by several nodes stays float: its int32 scale depends on each
        // node's input scale.
        bool shared = consumers[n.input(2)].size() > 1;
        if (b && b->dims_size() == 1 && b->dims(0) == w->dims(axis) && unit && !shared)
          biases.push_back({n.input(2), n.input(0), n.input(1), axis});
      }
    } else if (op == "Add" || op == "Mul" || op == "Concat") {
      for (const std::string& in : n.input())
        if (activation(in)) acts.push_back(in);
    } else if (nin > 0 && activation(n.input(0))) {
      acts.push_back(n.input(0));
    }
    if (acts.empty()) {
      skip("no float32 activation input");
      continue;
    }
    for (const std::string& a : acts) add_act(a);
    for (const WeightPlan& w : weights)
      if (seen_weight.insert(w.tensor + "@" + std::to_string(w.axis)).second) plan.weights.push_back(w);
    for (const BiasPlan& b : biases) plan.biases.push_back(b);
    // The output pair, moved behind a lone Relu / Clip.
    if (n.output_size() > 0 && !n.output(0).empty() && is_float32(n.output(0))) {
      std::string out = n.output(0);
      auto c = consumers.find(out);
      if ((op == "Conv" || op == "Gemm" || op == "MatMul" || op == "Add") && c != consumers.end() &&
          c->second.size() == 1 && !graph_outputs.count(out)) {
        const onnx::NodeProto& next = g.node(c->second[0]);
        bool act = is_default_domain(next.domain()) && next.output_size() > 0 && next.input(0) == out &&
                   (next.op_type() == "Relu" || next.op_type() == "Clip");
        for (int k = 1; act && k < next.input_size(); ++k) act = next.input(k).empty() || constants.count(next.input(k));
        if (act && is_float32(next.output(0))) out = next.output(0);
      }
      add_act(out);
    }
    plan.nodes.push_back(label);
    plan.node_indices.push_back(i);
    ++plan.nodes_by_op[op];
  }
  std::set<std::string> labels;
  for (int i = 0; i < g.node_size(); ++i) labels.insert(node_label(g.node(i), i));
  for (const std::string& e : options.exclude)
    if (!labels.count(e)) plan.unknown_excludes.push_back(e);
  return plan;
}

}  // namespace kiln::quant
