// The compile driver behind `kiln compile`.
#include "compiler/compiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "core/logging.h"
#include "core/version.h"
#include "ops/registry.h"

namespace kiln::compiler {

namespace {

// The non-empty ';'-separated items of an option value ("x:1,3;y:2").
std::vector<std::string> option_items(const std::string& spec) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos < spec.size()) {
    size_t end = spec.find(';', pos);
    if (end == std::string::npos) end = spec.size();
    if (end > pos) items.push_back(spec.substr(pos, end - pos));
    pos = end + 1;
  }
  return items;
}

// Splits "NAME:VALUE" at the last ':' (a name may itself contain ':', e.g. "input:0"); false
// when there is no name.
bool split_named_item(const std::string& item, std::string* name, std::string* value) {
  size_t colon = item.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *name = item.substr(0, colon);
  *value = item.substr(colon + 1);
  return true;
}

}  // namespace

Expected<InputShapes> parse_input_shapes(const std::string& spec) {
  InputShapes out;
  for (const std::string& item : option_items(spec)) {
    std::string name, rest;
    if (!split_named_item(item, &name, &rest))
      return invalid_argument("--input-shape item '%s' is not NAME:D1,D2,...", item.c_str());
    std::vector<int64_t> dims;
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

Expected<std::vector<int64_t>> parse_dynamic_batch(const std::string& spec) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = spec.substr(pos, comma - pos);
    pos = comma + 1;
    char* e = nullptr;
    long long v = std::strtoll(item.c_str(), &e, 10);
    if (item.empty() || *e != '\0' || v < 1)
      return invalid_argument("--dynamic-batch-size '%s': '%s' is not a batch size >= 1", spec.c_str(),
                              item.c_str());
    for (int64_t have : out)
      if (have == v) return invalid_argument("--dynamic-batch-size '%s' gives %lld twice", spec.c_str(), v);
    out.push_back(v);
    if (comma == spec.size()) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

Expected<std::vector<InputShapes>> parse_dynamic_dims(const std::string& spec) {
  // Each item binds one input; InputShapes keeps one entry per name, so parse item by item.
  std::map<std::string, std::vector<std::vector<int64_t>>> items;
  std::vector<std::string> order;
  for (const std::string& item : option_items(spec)) {
    auto one = parse_input_shapes(item);
    if (!one.ok()) {
      Status st = one.status();
      return st.add_context("--dynamic-dims");
    }
    const auto& [name, dims] = *one->begin();
    if (!items.count(name)) order.push_back(name);
    items[name].push_back(dims);
  }
  if (items.empty()) return invalid_argument("--dynamic-dims '%s' gives no shapes", spec.c_str());
  const size_t n = items.begin()->second.size();
  for (const auto& [name, shapes] : items)
    if (shapes.size() != n)
      return invalid_argument(
          "--dynamic-dims gives input '%s' %zu shapes and input '%s' %zu: every input must appear "
          "once per bucket",
          items.begin()->first.c_str(), n, name.c_str(), shapes.size());
  std::vector<InputShapes> out(n);
  for (const auto& [name, shapes] : items)
    for (size_t k = 0; k < n; ++k) out[k][name] = shapes[k];
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b)
      if (out[a] == out[b]) return invalid_argument("--dynamic-dims gives bucket %zu twice (as bucket %zu)", a, b);
  return out;
}

Expected<std::map<std::string, double>> parse_pad_values(const std::string& spec) {
  std::map<std::string, double> out;
  for (const std::string& item : option_items(spec)) {
    std::string name, value;
    if (!split_named_item(item, &name, &value))
      return invalid_argument("--pad-value item '%s' is not NAME:VALUE", item.c_str());
    char* e = nullptr;
    double v = std::strtod(value.c_str(), &e);
    if (value.empty() || *e != '\0' || std::isnan(v))
      return invalid_argument("--pad-value '%s': '%s' is not a number", item.c_str(), value.c_str());
    if (!out.emplace(name, v).second) return invalid_argument("--pad-value names input '%s' twice", name.c_str());
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
        if (want < 0) continue;  // left open (the dynamic variant of a bucketed model)
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
    if (!s.has_rank()) {
      s = Shape::from_static(dims);
    } else {
      for (int i = 0; i < s.rank(); ++i)
        if (dims[static_cast<size_t>(i)] >= 0) s[i] = Dim(dims[static_cast<size_t>(i)]);
    }
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
  // Constants nothing reads any more (those of the removed nodes, and initializers a model
  // ships unused, such as the float weights a QDQ model replaced) are not stored. A graph
  // input keeps its initializer: it is the default of a value the caller may feed.
  const std::unordered_set<const ir::Value*> inputs(graph.inputs().begin(), graph.inputs().end());
  for (const auto& v : graph.values())
    if (v->has_initializer() && !live.count(v.get()) && !inputs.count(v.get())) v->clear_initializer();
  return static_cast<int>(before - graph.nodes().size());
}

namespace {

Expected<CompiledModel> compile_imported(frontend::ImportResult imported, const std::string& name,
                                         const CompileOptions& options) {
  ir::Graph& g = *imported.graph;
  KILN_RETURN_IF_ERROR(apply_input_shapes(g, options.input_shapes));
  KILN_RETURN_IF_ERROR(insert_aipp(g, options.aipp), "%s", name.c_str());
  CompiledModel out;
  KILN_LOG(kInfo, "%s: imported %zu nodes", name.c_str(), g.nodes().size());
  out.nodes_before = g.nodes().size();
  out.precision = options.passes.precision;
  PassContext ctx(options.passes);
  Status passes = run_passes(g, ctx);
  out.passes = ctx.records();
  KILN_RETURN_IF_ERROR(passes, "%s", name.c_str());
  for (const PassRecord& r : out.passes)
    out.notes.insert(out.notes.end(), r.notes.begin(), r.notes.end());
  if (log_enabled(LogLevel::kDebug))
    KILN_LOG(kDebug, "%s: graph after the passes:\n%s", name.c_str(), ir::to_text(g).c_str());
  KILN_RETURN_IF_ERROR(ir::verify(g), "%s", name.c_str());
  {
    KILN_ASSIGN_OR_RETURN(PrepackSummary packed, prepack_weights(g, options.prepack_weights), "%s", name.c_str());
    if (packed.weights)
      out.notes.push_back(str_format("weights pre-packed for this CPU's kernels: %zu weights of %zu nodes, %.1f MB",
                                     packed.weights, packed.nodes, packed.bytes / 1e6));
    if (packed.workspace_nodes)
      out.notes.push_back(str_format("kernel workspaces planned into the arena: %zu nodes, the largest %.1f MB",
                                     packed.workspace_nodes, packed.workspace_max_bytes / 1e6));
  }
  out.info.kiln_version = KILN_VERSION_STRING;
  out.info.source_hash = imported.source_hash;
  out.info.source_name = std::filesystem::path(name).filename().string();
  out.info.producer = imported.producer;
  out.info.target_arch = "x86_64";
  out.info.target_features = model::host_cpu_features();
  out.graph = std::move(imported.graph);
  return out;
}

using Importer = std::function<Expected<frontend::ImportResult>()>;

int64_t bucket_elements(const InputShapes& shapes) {
  int64_t total = 0;
  for (const auto& [name, dims] : shapes) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    total += n;
  }
  return total;
}

std::string shapes_text(const InputShapes& shapes) {
  std::string s;
  for (const auto& [name, dims] : shapes) {
    if (!s.empty()) s += ";";
    s += name + ":";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  }
  return s;
}

const ir::Value* model_input(const ir::Graph& g, const std::string& name) {
  for (const ir::Value* v : g.inputs())
    if (v->name() == name && !v->has_initializer()) return v;
  return nullptr;
}

// Compiles one bucket per shape set plus the dynamic variant. `first` is an import already
// made (to find the inputs); every other compile re-imports, since the passes rewrite the
// graph in place.
Expected<CompiledModel> compile_buckets(frontend::ImportResult first, const Importer& importer,
                                        const std::string& name, const CompileOptions& options) {
  const ir::Graph& g = *first.graph;
  if (!options.dynamic_batch.empty() && !options.dynamic_dims.empty())
    return invalid_argument("%s: give --dynamic-batch-size or --dynamic-dims, not both", name.c_str());
  if (!options.aipp.empty())
    return unsupported("%s: --insert-op-conf with shape buckets is not supported yet; compile one model per size",
                       name.c_str());
  const bool batch = !options.dynamic_batch.empty();
  std::vector<InputShapes> buckets;  // the bucketed inputs' shapes, per bucket
  InputShapes open_shapes;           // the bucketed inputs as the dynamic variant keeps them
  if (batch) {
    std::vector<const ir::Value*> batch_inputs;
    for (const ir::Value* v : g.inputs())
      if (!v->has_initializer() && v->shape().has_rank() && v->shape().rank() >= 1 && !v->shape()[0].is_static())
        batch_inputs.push_back(v);
    if (batch_inputs.empty())
      return invalid_argument(
          "%s: --dynamic-batch-size needs an input whose axis 0 is symbolic; the model's inputs are: %s",
          name.c_str(), input_list(g).c_str());
    buckets.resize(options.dynamic_batch.size());
    for (const ir::Value* v : batch_inputs) {
      // The other dims: as declared, or as --input-shape gives them (its axis 0 is replaced).
      std::vector<int64_t> dims;
      auto given = options.input_shapes.find(v->name());
      if (given != options.input_shapes.end()) {
        if (static_cast<int>(given->second.size()) != v->shape().rank())
          return invalid_argument("--input-shape gives input '%s' rank %zu, the model declares %s",
                                  v->name().c_str(), given->second.size(), v->shape().to_string().c_str());
        dims = given->second;
      } else {
        for (int i = 0; i < v->shape().rank(); ++i) {
          const Dim& d = v->shape()[i];
          if (i > 0 && !d.is_static())
            return invalid_argument(
                "%s: input '%s' has shape %s: with --dynamic-batch-size only axis 0 may stay open; fix "
                "the others with --input-shape (axis 0 of that shape is replaced by each batch size)",
                name.c_str(), v->name().c_str(), v->shape().to_string().c_str());
          dims.push_back(d.is_static() ? d.value : -1);
        }
      }
      dims[0] = -1;
      open_shapes[v->name()] = dims;
      for (size_t k = 0; k < buckets.size(); ++k) {
        dims[0] = options.dynamic_batch[k];
        buckets[k][v->name()] = dims;
      }
    }
  } else {
    buckets = options.dynamic_dims;
    for (const auto& [in, dims] : buckets[0]) {
      const ir::Value* v = model_input(g, in);
      if (!v)
        return invalid_argument("--dynamic-dims names '%s', but the model's inputs are: %s", in.c_str(),
                                input_list(g).c_str());
      if (options.input_shapes.count(in))
        return invalid_argument("input '%s' is given by both --input-shape and --dynamic-dims", in.c_str());
      if (v->shape().has_rank()) {
        std::vector<int64_t> dims;
        for (const Dim& d : v->shape().dims()) dims.push_back(d.is_static() ? d.value : -1);
        open_shapes[in] = dims;
      }
    }
    for (const ir::Value* v : g.inputs())
      if (!v->has_initializer() && !v->shape().is_static() && !buckets[0].count(v->name()) &&
          !options.input_shapes.count(v->name()))
        return invalid_argument(
            "%s: input '%s' has shape %s and is not in --dynamic-dims: give it in every bucket, or fix "
            "it with --input-shape",
            name.c_str(), v->name().c_str(), v->shape().to_string().c_str());
  }
  for (const auto& [in, value] : options.pad_values)
    if (!buckets[0].count(in))
      return invalid_argument("--pad-value names '%s', which is not a bucketed input (bucketed: %s)", in.c_str(),
                              shapes_text(buckets[0]).c_str());
  std::stable_sort(buckets.begin(), buckets.end(), [](const InputShapes& a, const InputShapes& b) {
    return bucket_elements(a) < bucket_elements(b);
  });

  CompiledModel out;
  out.precision = options.passes.precision;
  std::optional<frontend::ImportResult> pending(std::move(first));
  auto next_import = [&]() -> Expected<frontend::ImportResult> {
    if (pending) {
      frontend::ImportResult r = std::move(*pending);
      pending.reset();
      return r;
    }
    return importer();
  };
  for (size_t k = 0; k < buckets.size(); ++k) {
    auto start = std::chrono::steady_clock::now();
    CompileOptions o = options;
    o.dynamic_batch.clear();
    o.dynamic_dims.clear();
    for (const auto& [in, dims] : buckets[k]) o.input_shapes[in] = dims;
    KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, next_import());
    KILN_ASSIGN_OR_RETURN(CompiledModel variant, compile_imported(std::move(imported), name, o),
                          "bucket %zu (%s)", k + 1, shapes_text(buckets[k]).c_str());
    if (options.progress) {
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      options.progress(str_format("bucket %zu/%zu (%s): %zu -> %zu nodes, %.0f ms", k + 1, buckets.size(),
                                  shapes_text(buckets[k]).c_str(), variant.nodes_before,
                                  variant.graph->nodes().size(), ms));
    }
    if (k == 0) {
      out = std::move(variant);
      out.variants.push_back({buckets[k], out.graph});
    } else {
      out.variants.push_back({buckets[k], variant.graph});
    }
  }
  // The dynamic variant: the same pipeline with the bucketed dims left open.
  auto start = std::chrono::steady_clock::now();
  CompileOptions o = options;
  o.dynamic_batch.clear();
  o.dynamic_dims.clear();
  for (const auto& [in, dims] : open_shapes) o.input_shapes[in] = dims;
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, next_import());
  KILN_ASSIGN_OR_RETURN(CompiledModel dynamic, compile_imported(std::move(imported), name, o),
                        "the dynamic variant (bucketed dims left open)");
  if (options.progress) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    options.progress(str_format("dynamic variant (for shapes no bucket fits): %zu -> %zu nodes, %.0f ms",
                                dynamic.nodes_before, dynamic.graph->nodes().size(), ms));
  }
  out.dynamic_graph = dynamic.graph;
  out.bucket_kind = batch ? model::BucketKind::kBatch : model::BucketKind::kDims;
  for (const auto& [in, value] : options.pad_values) out.pad_values[in] = value;
  return out;
}

Expected<CompiledModel> compile_with(const Importer& importer, const std::string& name,
                                     const CompileOptions& options) {
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, importer());
  if (options.dynamic_batch.empty() && options.dynamic_dims.empty()) {
    if (!options.pad_values.empty())
      return invalid_argument("%s: --pad-value needs --dynamic-batch-size or --dynamic-dims", name.c_str());
    return compile_imported(std::move(imported), name, options);
  }
  return compile_buckets(std::move(imported), importer, name, options);
}

}  // namespace

Expected<CompiledModel> compile_onnx_file(const std::string& path, const CompileOptions& options) {
  return compile_with([&] { return frontend::import_onnx_file(path); }, path, options);
}

Expected<CompiledModel> compile_onnx_bytes(const void* data, size_t size, const std::string& name,
                                           const CompileOptions& options) {
  return compile_with([&] { return frontend::import_onnx_bytes(data, size); }, name, options);
}

Status write_compiled_model(const CompiledModel& compiled, const std::string& path) {
  if (compiled.variants.empty()) return model::write_model(*compiled.graph, compiled.info, path);
  model::BucketedModel m;
  m.kind = compiled.bucket_kind;
  for (const CompiledVariant& v : compiled.variants) m.variants.push_back({v.shapes, v.graph});
  m.pad_values = compiled.pad_values;
  m.dynamic_graph = compiled.dynamic_graph;
  return model::write_model(m, compiled.info, path);
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
