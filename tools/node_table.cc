// The node table of `kiln inspect --nodes`.
#include "tools/node_table.h"

#include <string>

#include "kernels/kernel_registry.h"
#include "ops/layout.h"

namespace kiln::tools {
namespace {

// The layout a node computes in, from the attributes layout_assignment sets (a convolution's
// x_format -> y_format, a pool's format, a TransData's src_format -> dst_format); "-" for
// nodes that have none (they compute on plain tensors).
std::string layout_of(const ir::Node& n) {
  const std::string x = n.attr_string("x_format", ""), y = n.attr_string("y_format", "");
  if (!x.empty() || !y.empty())
    return (x.empty() ? std::string(ops::kFormatPlain) : x) + "->" + (y.empty() ? std::string(ops::kFormatPlain) : y);
  if (n.has_attr("format")) return n.attr_string("format", "");
  if (n.has_attr("src_format")) return n.attr_string("src_format", "?") + "->" + n.attr_string("dst_format", "?");
  return "-";
}

std::string kernel_text(const kernels::KernelPlan& plan) {
  if (plan.implementation != "reference") {
    if (!plan.per_shape) return plan.implementation;
    return plan.implementation + " (per shape" + (plan.reason.empty() ? "" : "; " + plan.reason) + ")";
  }
  return "reference: " + plan.reason;
}

template <typename Fn>
void for_each_node(const ir::Graph& graph, const std::string& graph_name, const Fn& fn) {
  for (const auto& n : graph.nodes()) {
    fn(*n, graph_name);
    for (const ir::Graph* sub : n->subgraphs()) for_each_node(*sub, sub->name(), fn);
  }
}

nlohmann::json values_json(const std::vector<ir::Value*>& values) {
  nlohmann::json out = nlohmann::json::array();
  for (const ir::Value* v : values)
    out.push_back(v ? nlohmann::json{{"name", v->name()}, {"type", v->type().to_string()}} : nlohmann::json(nullptr));
  return out;
}

std::string types_text(const std::vector<ir::Value*>& values) {
  std::string s;
  for (const ir::Value* v : values) {
    if (!s.empty()) s += ", ";
    s += v ? v->type().to_string() : "-";
  }
  return s;
}

}  // namespace

nlohmann::json node_table_json(const ir::Graph& graph) {
  nlohmann::json rows = nlohmann::json::array();
  size_t index = 0;
  for_each_node(graph, "", [&](const ir::Node& n, const std::string& sub) {
    const kernels::KernelPlan plan = kernels::plan_kernel(n);
    nlohmann::json row = {{"index", index++},
                          {"name", n.name()},
                          {"op", n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type()},
                          {"kernel", plan.implementation},
                          {"per_shape", plan.per_shape},
                          {"inputs", values_json(n.inputs())},
                          {"outputs", values_json(n.outputs())},
                          {"layout", layout_of(n)}};
    if (!sub.empty()) row["graph"] = sub;
    if (!plan.reason.empty()) row["reason"] = plan.reason;
    if (plan.implementation == "reference") row["shape_related"] = plan.shape_related;
    rows.push_back(std::move(row));
  });
  return rows;
}

void print_node_table(std::FILE* out, const ir::Graph& graph) {
  size_t index = 0;
  for_each_node(graph, "", [&](const ir::Node& n, const std::string& sub) {
    const std::string op = n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type();
    std::fprintf(out, "%4zu  %s%s  %s  [%s]\n", index++, sub.empty() ? "" : (sub + "/").c_str(), n.name().c_str(),
                 op.c_str(), kernel_text(kernels::plan_kernel(n)).c_str());
    std::fprintf(out, "        in  %s\n        out %s\n", types_text(n.inputs()).c_str(), types_text(n.outputs()).c_str());
    if (std::string layout = layout_of(n); layout != "-") std::fprintf(out, "        layout %s\n", layout.c_str());
  });
}

}  // namespace kiln::tools
