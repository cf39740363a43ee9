// The compile driver behind `kiln compile`.
#include "compiler/compiler.h"

#include <filesystem>
#include <unordered_map>
#include <unordered_set>

#include "core/logging.h"
#include "core/version.h"
#include "ops/registry.h"

namespace kiln::compiler {

Expected<InputShapes> parse_input_shapes(const std::string& spec) {
  InputShapes out;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty()) continue;
    // The name may itself contain ':' (e.g. "input:0"), so split at the last one.
    size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0)
      return invalid_argument("--input-shape item '%s' is not NAME:D1,D2,...", item.c_str());
    std::string name = item.substr(0, colon);
    std::vector<int64_t> dims;
    std::string rest = item.substr(colon + 1);
    size_t p = 0;
    while (p <= rest.size() && !rest.empty()) {
      size_t comma = rest.find(',', p);
      if (comma == std::string::npos) comma = rest.size();
      std::string d = rest.substr(p, comma - p);
      char* e = nullptr;
      long long v = std::strtoll(d.c_str(), &e, 10);
      if (d.empty() || *e != '\0' || v < 0)
        return invalid_argument("--input-shape '%s': dimension '%s' is not a non-negative integer",
                                item.c_str(), d.c_str());
      dims.push_back(v);
      p = comma + 1;
      if (comma == rest.size()) break;
    }
    if (out.count(name)) return invalid_argument("--input-shape names input '%s' twice", name.c_str());
    out[name] = dims;
  }
  return out;
}

namespace {

void substitute_symbols(ir::Graph& graph, const std::unordered_map<std::string, int64_t>& bound) {
  for (const auto& v : graph.values())
    if (v->type().shape.has_rank())
      for (Dim& d : v->type().shape.dims())
        if (!d.is_static() && !d.symbol.empty()) {
          auto it = bound.find(d.symbol);
          if (it != bound.end()) d = Dim(it->second);
        }
  for (const auto& n : graph.nodes())
    for (ir::Graph* g : n->subgraphs()) substitute_symbols(*g, bound);
}

std::string input_list(const ir::Graph& graph) {
  std::string s;
  for (const ir::Value* v : graph.inputs()) s += (s.empty() ? "" : ", ") + v->name() + v->shape().to_string();
  return s;
}

}  // namespace

Status apply_input_shapes(ir::Graph& graph, const InputShapes& shapes) {
  std::unordered_map<std::string, int64_t> bound;
  for (const auto& [name, dims] : shapes) {
    ir::Value* v = nullptr;
    for (ir::Value* in : graph.inputs())
      if (in->name() == name) v = in;
    if (!v) return invalid_argument("--input-shape names '%s', but the model's inputs are: %s", name.c_str(),
                                    input_list(graph).c_str());
    Shape& s = v->type().shape;
    if (s.has_rank()) {
      if (s.rank() != static_cast<int>(dims.size()))
        return invalid_argument("--input-shape gives input '%s' rank %zu, the model declares %s", name.c_str(),
                                dims.size(), s.to_string().c_str());
      for (int i = 0; i < s.rank(); ++i) {
        const Dim& d = s[i];
        int64_t want = dims[static_cast<size_t>(i)];
        if (d.is_static() && d.value != want)
          return invalid_argument("--input-shape gives input '%s' dim %d = %lld, the model fixes it to %lld",
                                  name.c_str(), i, (long long)want, (long long)d.value);
        if (!d.is_static() && !d.symbol.empty()) {
          auto it = bound.find(d.symbol);
          if (it != bound.end() && it->second != want)
            return invalid_argument("--input-shape binds symbol '%s' to both %lld and %lld", d.symbol.c_str(),
                                    (long long)it->second, (long long)want);
          bound[d.symbol] = want;
        }
      }
    }
    s = Shape::from_static(dims);
  }
  substitute_symbols(graph, bound);
  return ok_status();
}

Expected<int> fold_constant_nodes(ir::Graph& graph) {
  int folded = 0;
  std::unordered_set<const ir::Node*> done;
  for (const auto& n : graph.nodes()) {
    if (n->op_type() != "Constant" || !n->domain().empty() || n->num_outputs() != 1 || !n->output(0)) continue;
    KILN_ASSIGN_OR_RETURN(const ops::OpSchema* schema, ops::schema_for(*n));
    KILN_RETURN_IF_ERROR(schema->validate(*n));
    std::vector<RuntimeValue> out(1);
    ops::KernelContext ctx(*n, {}, &out);
    KILN_RETURN_IF_ERROR(schema->kernel_fn()(ctx), "folding constant node %s", n->label().c_str());
    if (!out[0].is_tensor()) return internal_error("constant node %s gave no tensor", n->label().c_str());
    Tensor t = std::move(out[0].tensor());
    ir::Value* v = n->output(0);
    v->set_producer(nullptr, -1);
    v->type().dtype = t.dtype();
    v->type().shape = t.shape();
    v->set_initializer(std::move(t));
    done.insert(n.get());
    ++folded;
  }
  graph.remove_nodes_if([&](const ir::Node& n) { return done.count(&n) > 0; });
  for (const auto& n : graph.nodes())
    for (ir::Graph* g : n->subgraphs()) {
      KILN_ASSIGN_OR_RETURN(int in_sub, fold_constant_nodes(*g));
      folded += in_sub;
    }
  return folded;
}

int remove_dead_nodes(ir::Graph& graph) {
  std::unordered_set<const ir::Value*> live(graph.outputs().begin(), graph.outputs().end());
  std::unordered_set<const ir::Node*> keep;
  const auto& nodes = graph.nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node& n = *nodes[i];
    bool needed = false;
    for (const ir::Value* v : n.outputs())
      if (v && live.count(v)) needed = true;
    if (!needed) continue;
    keep.insert(&n);
    for (const ir::Value* v : n.inputs())
      if (v) live.insert(v);
    // Values a subgraph reads from this scope are live too.
    for (ir::Graph* g : n.subgraphs())
      for (const auto& sv : g->values())
        if (sv->is_outer_scope())
          if (const ir::Value* outer = graph.find_value(sv->name())) live.insert(outer);
  }
  size_t before = nodes.size();
  graph.remove_nodes_if([&](const ir::Node& n) { return !keep.count(&n); });
  return static_cast<int>(before - graph.nodes().size());
}

namespace {

Expected<CompiledModel> compile_imported(frontend::ImportResult imported, const std::string& name,
                                         const CompileOptions& options) {
  ir::Graph& g = *imported.graph;
  KILN_RETURN_IF_ERROR(apply_input_shapes(g, options.input_shapes));
  CompiledModel out;
  KILN_LOG(kInfo, "%s: imported %zu nodes", name.c_str(), g.nodes().size());
  out.nodes_before = g.nodes().size();
  PassContext ctx(options.passes);
  Status passes = run_passes(g, ctx);
  out.passes = ctx.records();
  KILN_RETURN_IF_ERROR(passes, "%s", name.c_str());
  for (const PassRecord& r : out.passes)
    out.notes.insert(out.notes.end(), r.notes.begin(), r.notes.end());
  if (log_enabled(LogLevel::kDebug))
    KILN_LOG(kDebug, "%s: graph after the passes:\n%s", name.c_str(), ir::to_text(g).c_str());
  KILN_RETURN_IF_ERROR(ir::verify(g), "%s", name.c_str());
  out.info.kiln_version = KILN_VERSION_STRING;
  out.info.source_hash = imported.source_hash;
  out.info.source_name = std::filesystem::path(name).filename().string();
  out.info.producer = imported.producer;
  out.info.target_arch = "x86_64";
  out.info.target_features = model::host_cpu_features();
  out.graph = std::move(imported.graph);
  return out;
}

}  // namespace

Expected<CompiledModel> compile_onnx_file(const std::string& path, const CompileOptions& options) {
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, frontend::import_onnx_file(path));
  return compile_imported(std::move(imported), path, options);
}

Expected<CompiledModel> compile_onnx_bytes(const void* data, size_t size, const std::string& name,
                                           const CompileOptions& options) {
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, frontend::import_onnx_bytes(data, size));
  return compile_imported(std::move(imported), name, options);
}

Expected<CheckReport> check_onnx_file(const std::string& path, const CompileOptions& options) {
  frontend::ImportOptions import_options;
  import_options.require_supported_ops = false;
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, frontend::import_onnx_file(path, import_options));
  ir::Graph& g = *imported.graph;
  CheckReport report;
  report.unsupported_nodes = frontend::list_unsupported_nodes(g);
  Status s = apply_input_shapes(g, options.input_shapes);
  if (!s.ok()) report.shape_problems.push_back(s.to_string());
  // Infer node by node so that every problem is listed, not only the first.
  for (const auto& n : g.nodes()) {
    if (!ops::OpRegistry::instance().find(n->domain(), n->op_type(), n->opset())) continue;
    Status ns = ops::infer_node(*n);
    if (!ns.ok()) report.shape_problems.push_back(ns.to_string());
  }
  for (const ir::Value* v : g.inputs())
    if (!v->has_initializer() && !v->shape().is_static())
      report.notes.push_back(str_format("input '%s' has shape %s: fix it with --input-shape to compile statically",
                                        v->name().c_str(), v->shape().to_string().c_str()));
  return report;
}

}  // namespace kiln::compiler
