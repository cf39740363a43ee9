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

// Who reads and writes what in a graph, as the folds need it.
struct GraphIndex {
  std::map<std::string, int> inits;     // name -> index in g.initializer
  std::set<std::string> names;          // every tensor name (for fresh ones)
  std::map<std::string, int> uses;      // how many node inputs and graph outputs read a tensor
  std::map<std::string, int> consumer;  // the (last) node reading a tensor
  std::map<std::string, int> producer;
  std::set<std::string> graph_inputs;

  const onnx::GraphProto& graph;
  const frontend::TensorProtoContext ctx;

  GraphIndex(const onnx::GraphProto& g, const std::string& model_dir) : graph(g), ctx{model_dir} {
    for (int i = 0; i < g.initializer_size(); ++i) {
      inits[g.initializer(i).name()] = i;
      names.insert(g.initializer(i).name());
    }
    for (int i = 0; i < g.node_size(); ++i) {
      for (const auto& in : g.node(i).input()) {
        ++uses[in];
        consumer[in] = i;
      }
      for (const auto& o : g.node(i).output()) {
        producer[o] = i;
        names.insert(o);
      }
    }
    for (const auto& o : g.output()) ++uses[o.name()];
    for (const auto& in : g.input()) {
      graph_inputs.insert(in.name());
      names.insert(in.name());
    }
  }
  // A float32 initializer only the folded nodes read (a graph input may be fed instead).
  bool private_constant(const std::string& name) {
    return inits.count(name) && uses[name] == 1 && !graph_inputs.count(name);
  }
  Expected<Tensor> load(const std::string& name) const {
    return frontend::tensor_from_proto(graph.initializer(inits.at(name)), ctx, "initializer '" + name + "'");
  }
};

// The Conv reads new W and B initializers (suffixed `tag`); the old ones join `replaced`.
void set_conv_weights(onnx::GraphProto& g, onnx::NodeProto& conv, GraphIndex& index, const std::vector<int64_t>& w_dims,
                      const std::vector<float>& w, const std::vector<float>& b, const std::string& tag,
                      std::set<std::string>& replaced) {
  const bool has_b = conv.input_size() > 2 && !conv.input(2).empty();
  const std::string wn = unique_name(conv.input(1) + tag, index.names);
  const std::string bname = unique_name((has_b ? conv.input(2) : conv.output(0)) + tag, index.names);
  *g.add_initializer() = float_tensor(wn, w_dims, w);
  *g.add_initializer() = float_tensor(bname, {w_dims[0]}, b);
  replaced.insert(conv.input(1));
  if (has_b) replaced.insert(conv.input(2));
  conv.set_input(1, wn);
  if (has_b)
    conv.set_input(2, bname);
  else
    conv.add_input(bname);
}

// Drops the folded nodes and the initializers only they read (each had one use).
int drop_folded(onnx::GraphProto& g, const std::set<int>& folded, const std::set<std::string>& replaced) {
  if (folded.empty()) return 0;
  onnx::GraphProto kept;
  for (int i = 0; i < g.node_size(); ++i)
    if (!folded.count(i)) *kept.add_node() = g.node(i);
  g.mutable_node()->Swap(kept.mutable_node());
  auto* list = g.mutable_initializer();
  for (int i = list->size() - 1; i >= 0; --i)
    if (replaced.count(list->Get(i).name())) list->DeleteSubrange(i, 1);
  return static_cast<int>(folded.size());
}

}  // namespace

Expected<int> fold_batchnorm_into_conv(onnx::ModelProto& model, const std::string& model_dir) {
  onnx::GraphProto& g = *model.mutable_graph();
  GraphIndex index(g, model_dir);
  auto load = [&](const std::string& name) { return index.load(name); };
  auto private_constant = [&](const std::string& name) { return index.private_constant(name); };
  auto& uses = index.uses;
  auto& producer = index.producer;
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
    set_conv_weights(g, conv, index, w.dims(), new_w, new_b, "_bnfolded", replaced);
    for (int i = 1; i < 5; ++i) replaced.insert(bn.input(i));
    conv.set_output(0, bn.output(0));
    folded.insert(bi);
  }
  return drop_folded(g, folded, replaced);
}

Expected<int> fold_scale_shift_into_conv(onnx::ModelProto& model, const std::string& model_dir) {
  onnx::GraphProto& g = *model.mutable_graph();
  GraphIndex index(g, model_dir);
  auto load = [&](const std::string& name) { return index.load(name); };
  auto private_constant = [&](const std::string& name) { return index.private_constant(name); };
  auto& uses = index.uses;
  const auto& consumer = index.consumer;
  // One value, or one per output channel laid out to broadcast along axis 1 of a rank-`rank`
  // output; else empty.
  auto per_channel = [](const Tensor& t, int64_t c, int64_t rank) -> std::vector<double> {
    if (t.dtype() != DataType::kFloat32 || t.rank() > rank) return {};
    const int64_t n = t.num_elements();
    if (n == 1) return std::vector<double>(static_cast<size_t>(c), t.data<float>()[0]);
    if (n != c) return {};
    for (int64_t j = 0; j < t.rank(); ++j)  // axis rank - t.rank() + j of the output
      if (t.dim(j) != (rank - t.rank() + j == 1 ? c : 1)) return {};
    std::vector<double> v(static_cast<size_t>(c));
    for (int64_t o = 0; o < c; ++o) v[static_cast<size_t>(o)] = t.data<float>()[o];
    return v;
  };
  std::set<int> folded;
  std::set<std::string> replaced;
  for (int ci = 0; ci < g.node_size(); ++ci) {
    onnx::NodeProto& conv = *g.mutable_node(ci);
    if (conv.op_type() != "Conv" || !(conv.domain().empty() || conv.domain() == "ai.onnx") ||
        conv.output_size() != 1 || conv.input_size() < 2)
      continue;
    const bool has_b = conv.input_size() > 2 && !conv.input(2).empty();
    if (!private_constant(conv.input(1)) || (has_b && !private_constant(conv.input(2)))) continue;
    std::vector<double> w, b;  // loaded at the first fold
    std::vector<int64_t> w_dims;
    int steps = 0;
    for (;;) {  // Muls and Adds, as long as each reads the Conv's (renamed) output alone
      const std::string y = conv.output(0);
      if (uses[y] != 1 || !consumer.count(y)) break;
      const int ni = consumer.at(y);
      const onnx::NodeProto& op = g.node(ni);
      const bool mul = op.op_type() == "Mul", add = op.op_type() == "Add";
      if (!(mul || add) || !(op.domain().empty() || op.domain() == "ai.onnx") || op.input_size() != 2 ||
          op.output_size() != 1 || folded.count(ni))
        break;
      const std::string& k_name = op.input(0) == y ? op.input(1) : op.input(0);
      if (k_name == y || !private_constant(k_name)) break;
      if (w.empty()) {
        KILN_ASSIGN_OR_RETURN(Tensor wt, load(conv.input(1)));
        if (wt.dtype() != DataType::kFloat32 || wt.rank() < 3) break;
        w.assign(wt.data<float>(), wt.data<float>() + wt.num_elements());
        w_dims = wt.dims();
        b.assign(static_cast<size_t>(wt.dim(0)), 0.0);
        if (has_b) {
          KILN_ASSIGN_OR_RETURN(Tensor bt, load(conv.input(2)));
          if (bt.dtype() != DataType::kFloat32 || bt.num_elements() != wt.dim(0)) break;
          b.assign(bt.data<float>(), bt.data<float>() + bt.num_elements());
        }
      }
      const int64_t c = w_dims[0];
      KILN_ASSIGN_OR_RETURN(Tensor kt, load(k_name));
      const std::vector<double> k = per_channel(kt, c, static_cast<int64_t>(w_dims.size()));
      if (k.empty()) break;
      const size_t per = w.size() / static_cast<size_t>(c);
      for (size_t o = 0; o < static_cast<size_t>(c); ++o) {
        if (mul) {
          for (size_t i = 0; i < per; ++i) w[o * per + i] *= k[o];
          b[o] *= k[o];
        } else {
          b[o] += k[o];
        }
      }
      replaced.insert(k_name);
      folded.insert(ni);
      conv.set_output(0, op.output(0));
      ++steps;
    }
    if (steps == 0) continue;
    set_conv_weights(g, conv, index, w_dims, std::vector<float>(w.begin(), w.end()),
                     std::vector<float>(b.begin(), b.end()), "_affinefolded", replaced);
  }
  return drop_folded(g, folded, replaced);
}

}  // namespace kiln::quant
