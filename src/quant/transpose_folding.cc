// Transposes of constant weights folded into the weights (transpose_folding.h).
#include "quant/transpose_folding.h"

#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "core/dtype.h"
#include "frontend/onnx/tensor_proto.h"

namespace kiln::quant {

Expected<int> fold_constant_transposes(onnx::ModelProto& model, const std::string& model_dir) {
  onnx::GraphProto& g = *model.mutable_graph();
  std::map<std::string, int> inits;
  for (int i = 0; i < g.initializer_size(); ++i) inits[g.initializer(i).name()] = i;
  std::set<std::string> graph_inputs;
  for (const auto& in : g.input()) graph_inputs.insert(in.name());
  const frontend::TensorProtoContext ctx{model_dir};
  std::set<int> folded;
  std::vector<onnx::TensorProto> made;
  for (int ni = 0; ni < g.node_size(); ++ni) {
    const onnx::NodeProto& n = g.node(ni);
    if (n.op_type() != "Transpose" || !(n.domain().empty() || n.domain() == "ai.onnx") || n.input_size() != 1 ||
        n.output_size() != 1)
      continue;
    auto it = inits.find(n.input(0));
    if (it == inits.end() || graph_inputs.count(n.input(0))) continue;
    const onnx::TensorProto& proto = g.initializer(it->second);
    if (proto.data_type() != onnx::TensorProto::FLOAT) continue;
    KILN_ASSIGN_OR_RETURN(Tensor t, frontend::tensor_from_proto(proto, ctx, "initializer '" + n.input(0) + "'"));
    const int64_t rank = t.rank();
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    std::iota(perm.rbegin(), perm.rend(), 0);  // default: reverse the dims
    for (const auto& a : n.attribute())
      if (a.name() == "perm") perm.assign(a.ints().begin(), a.ints().end());
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    bool valid = static_cast<int64_t>(perm.size()) == rank;
    for (int64_t p : perm) {
      valid = valid && p >= 0 && p < rank && !seen[static_cast<size_t>(p)];
      if (valid) seen[static_cast<size_t>(p)] = true;
    }
    if (!valid) continue;  // the importer will name the bad perm
    const std::vector<int64_t>& in_dims = t.dims();
    std::vector<int64_t> out_dims, in_strides(static_cast<size_t>(rank), 1);
    for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * in_dims[d + 1];
    for (int64_t p : perm) out_dims.push_back(in_dims[static_cast<size_t>(p)]);
    std::vector<float> out(static_cast<size_t>(t.num_elements()));
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    for (size_t o = 0; o < out.size(); ++o) {
      int64_t src = 0;
      for (int64_t d = 0; d < rank; ++d) src += idx[d] * in_strides[perm[d]];
      out[o] = t.data<float>()[src];
      for (int64_t d = rank - 1; d >= 0 && ++idx[d] == out_dims[d]; --d) idx[d] = 0;
    }
    onnx::TensorProto r;
    r.set_name(n.output(0));
    r.set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : out_dims) r.add_dims(d);
    r.set_raw_data(std::string(reinterpret_cast<const char*>(out.data()), out.size() * sizeof(float)));
    made.push_back(std::move(r));
    folded.insert(ni);
  }
  if (folded.empty()) return 0;
  std::set<std::string> sources;
  onnx::GraphProto kept;
  for (int i = 0; i < g.node_size(); ++i) {
    if (folded.count(i))
      sources.insert(g.node(i).input(0));
    else
      *kept.add_node() = g.node(i);
  }
  g.mutable_node()->Swap(kept.mutable_node());
  for (auto& t : made) *g.add_initializer() = std::move(t);
  // A source goes when nothing reads it any more: no node (of this graph or of a subgraph,
  // which may read it by name) and no graph output.
  std::set<std::string> read;
  std::function<void(const onnx::GraphProto&)> collect = [&](const onnx::GraphProto& graph) {
    for (const auto& n : graph.node()) {
      for (const auto& in : n.input()) read.insert(in);
      for (const auto& a : n.attribute()) {
        if (a.has_g()) collect(a.g());
        for (const auto& sub : a.graphs()) collect(sub);
      }
    }
    for (const auto& o : graph.output()) read.insert(o.name());
  };
  collect(g);
  auto* list = g.mutable_initializer();
  for (int i = list->size() - 1; i >= 0; --i)
    if (sources.count(list->Get(i).name()) && !read.count(list->Get(i).name())) list->DeleteSubrange(i, 1);
  return static_cast<int>(folded.size());
}

}  // namespace kiln::quant
