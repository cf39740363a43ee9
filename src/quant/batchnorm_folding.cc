// BatchNormalization folded into the Conv before it (batchnorm_folding.h).
#include "quant/batchnorm_folding.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "frontend/onnx/tensor_proto.h"

namespace kiln::quant {
namespace {

float attr_float(const onnx::NodeProto& n, const char* name, float fallback) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.f();
  return fallback;
}

onnx::TensorProto float_tensor(const std::string& name, const std::vector<int64_t>& dims,
                               const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
  return t;
}

// A fresh initializer name from `base`.
std::string unique_name(const std::string& base, std::set<std::string>& taken) {
  std::string name = base;
  for (int i = 1; taken.count(name); ++i) name = base + "_" + std::to_string(i);
  taken.insert(name);
  return name;
}

}  // namespace

Expected<int> fold_batchnorm_into_conv(onnx::ModelProto& model, const std::string& model_dir) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::map<std::string, int> inits;  // name -> index in g.initializer
  std::set<std::string> names;
  for (int i = 0; i < g.initializer_size(); ++i) {
    inits[g.initializer(i).name()] = i;
    names.insert(g.initializer(i).name());
  }
  std::map<std::string, int> uses;  // how many node inputs and graph outputs read a tensor
  for (const auto& n : g.node())
    for (const auto& in : n.input()) ++uses[in];
  for (const auto& o : g.output()) ++uses[o.name()];
  for (const auto& in : g.input()) names.insert(in.name());
  for (const auto& n : g.node())
    for (const auto& o : n.output()) names.insert(o);
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  const frontend::TensorProtoContext ctx{model_dir};
  auto load = [&](const std::string& name) -> Expected<Tensor> {
    return frontend::tensor_from_proto(g.initializer(inits.at(name)), ctx, "initializer '" + name + "'");
  };
  // A float32 initializer only the folded pair reads (a graph input may be fed instead).
  std::set<std::string> graph_inputs;
  for (const auto& in : g.input()) graph_inputs.insert(in.name());
  auto private_constant = [&](const std::string& name) {
    return inits.count(name) && uses[name] == 1 && !graph_inputs.count(name);
  };
  std::set<int> folded;
  std::set<std::string> replaced;  // initializers of the folded pairs, read by nothing else
  for (int bi = 0; bi < g.node_size(); ++bi) {
    const onnx::NodeProto& bn = g.node(bi);
    if (bn.op_type() != "BatchNormalization" || !(bn.domain().empty() || bn.domain() == "ai.onnx") ||
        bn.input_size() != 5 || bn.output_size() != 1)
      continue;
    auto p = producer.find(bn.input(0));
    if (p == producer.end() || uses[bn.input(0)] != 1) continue;
    onnx::NodeProto& conv = *g.mutable_node(p->second);
    if (conv.op_type() != "Conv" || conv.output_size() != 1 || conv.input_size() < 2) continue;
    const bool has_b = conv.input_size() > 2 && !conv.input(2).empty();
    bool constants = private_constant(conv.input(1)) && (!has_b || private_constant(conv.input(2)));
    for (int i = 1; i < 5; ++i) constants = constants && private_constant(bn.input(i));
    if (!constants) continue;
    KILN_ASSIGN_OR_RETURN(Tensor w, load(conv.input(1)));
    std::vector<Tensor> bn_params;
    for (int i = 1; i < 5; ++i) {
      KILN_ASSIGN_OR_RETURN(Tensor t, load(bn.input(i)));
      bn_params.push_back(std::move(t));
    }
    Tensor b;
    if (has_b) {
      KILN_ASSIGN_OR_RETURN(b, load(conv.input(2)));
    }
    if (w.dtype() != DataType::kFloat32 || w.rank() < 3) continue;
    const int64_t c = w.dim(0);
    bool ok = !has_b || (b.dtype() == DataType::kFloat32 && b.num_elements() == c);
    for (const Tensor& t : bn_params) ok = ok && t.dtype() == DataType::kFloat32 && t.num_elements() == c;
    if (!ok) continue;
    const double eps = attr_float(bn, "epsilon", 1e-5f);
    const int64_t per = w.num_elements() / c;
    std::vector<float> new_w(static_cast<size_t>(w.num_elements())), new_b(static_cast<size_t>(c));
    for (int64_t o = 0; o < c; ++o) {
      const double gamma = bn_params[0].data<float>()[o], beta = bn_params[1].data<float>()[o];
      const double mean = bn_params[2].data<float>()[o], var = bn_params[3].data<float>()[o];
      const double s = gamma / std::sqrt(var + eps);
      for (int64_t k = 0; k < per; ++k)
        new_w[static_cast<size_t>(o * per + k)] = static_cast<float>(w.data<float>()[o * per + k] * s);
      const double b0 = has_b ? b.data<float>()[o] : 0.0;
      new_b[static_cast<size_t>(o)] = static_cast<float>((b0 - mean) * s + beta);
    }
    const std::string wn = unique_name(conv.input(1) + "_bnfolded", names);
    const std::string bname = unique_name((has_b ? conv.input(2) : conv.output(0)) + "_bnfolded", names);
    *g.add_initializer() = float_tensor(wn, w.dims(), new_w);
    *g.add_initializer() = float_tensor(bname, {c}, new_b);
    replaced.insert(conv.input(1));
    if (has_b) replaced.insert(conv.input(2));
    for (int i = 1; i < 5; ++i) replaced.insert(bn.input(i));
    conv.set_input(1, wn);
    if (has_b)
      conv.set_input(2, bname);
    else
      conv.add_input(bname);
    conv.set_output(0, bn.output(0));
    folded.insert(bi);
  }
  if (folded.empty()) return 0;
  // Drop the normalisations and the initializers only the folded pairs read (each had one use).
  onnx::GraphProto kept;
  for (int i = 0; i < g.node_size(); ++i)
    if (!folded.count(i)) *kept.add_node() = g.node(i);
  g.mutable_node()->Swap(kept.mutable_node());
  auto* list = g.mutable_initializer();
  for (int i = list->size() - 1; i >= 0; --i)
    if (replaced.count(list->Get(i).name())) list->DeleteSubrange(i, 1);
  return static_cast<int>(folded.size());
}

}  // namespace kiln::quant
