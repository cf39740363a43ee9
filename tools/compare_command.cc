// `kiln compare`: runs a model compiled at -O0 (the reference: only what correctness needs)
// and at an optimisation level side by side on the same inputs, and names the first node
// of the optimised graph whose output diverges (what Polygraphy does for TensorRT). Every
// value of the optimised graph whose name also exists in the -O0 graph is compared: the
// fusion passes keep the name of the last replaced node's output, so names line up. Both
// graphs get those values as extra graph outputs, which needs nothing from the runtime.
//
// With --kernels it compares kernels instead of passes: the model compiled once at the chosen
// level runs on fast kernels (src/kernels) and on reference kernels (src/ops), and the
// first node whose fast kernel diverges is named.
//
// For testing the tool itself, KILN_DEBUG_PERTURB_NODE=NAME adds KILN_DEBUG_PERTURB_DELTA
// (default 1e-2) to the first output of node NAME in the optimised graph only
// (apply_debug_perturbation, conformance_compare.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "compiler/compiler.h"
#include "core/npy.h"
#include "core/parallel.h"
#include "kernels/kernel_registry.h"
#include "ops/elementwise_common.h"
#include "ops/layout.h"
#include "ops/registry.h"
#include "runtime/graph_executor.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/conformance_compare.h"
#include "tools/model_source.h"
#include "tools/shape_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct CompareArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE.npy
  std::string input_shape;
  int opt_level = 3;
  std::vector<std::string> disabled_passes;
  double rtol = kLevelRtol;
  double atol = kLevelAtol;
  unsigned seed = 0;
  int threads = 0;
  const CLI::Option* threads_opt = nullptr;
  int rows = 20;
  std::string json;
  bool kernels = false;  // fast vs reference kernels at opt_level, instead of -O0 vs opt_level
  std::string precision = "fp32";  // of the optimised side (kiln compile --precision)
  std::string keep_dtype;
};

// One value compared: produced by `node` in the optimised graph, present in both graphs.
struct Compared {
  std::string value;
  std::string node;
  std::string op;       // domain-qualified op type of the producer in the optimised graph
  std::string pattern;  // the fused pattern the producer stands for, "" for an ONNX op
  bool model_output = false;
  ValueDiff diff;
  // The op type without its domain, to leave out a pattern that only repeats it.
  std::string op_type_only() const { return op.substr(op.rfind('.') + 1); }
};

std::string qualified_op(const ir::Node& n) { return n.domain().empty() ? n.op_type() : n.domain() + "." + n.op_type(); }

// What a fused node replaced, from its op type and attributes (docs/fused-ops.md): e.g.
// FusedConv with a residual and Relu is "Conv+Add+Relu". Empty for nodes that are not fused.
std::string fused_pattern(const ir::Node& n) {
  if (n.domain() != ops::kKilnDomain) return "";
  const std::string& op = n.op_type();
  std::string act = n.attr_string("activation", "");
  std::string tail = act.empty() ? "" : "+" + act;
  if (op == "FusedConv") return std::string("Conv") + (n.input(3) ? "+Add" : "") + tail;
  if (op == "FusedMatMul") return std::string("MatMul") + (n.input(2) ? "+Add" : "") + (n.input(3) ? "+Add" : "") + tail;
  if (op == "FusedGemm") return "Gemm" + tail;
  if (op == "Gelu") return n.attr_string("approximate", "none") == "tanh" ? "Gelu(tanh)" : "Gelu(erf)";
  if (op == "FusedElementwise") {
    std::string chain;
    for (const ir::Graph* body : n.subgraphs())
      for (const auto& b : body->nodes()) chain += (chain.empty() ? "" : "+") + b->op_type();
    return "Elementwise(" + chain + ")";
  }
  return op;  // LayerNorm, HardSwish, Attention: the op names its pattern
}

// The user-fed inputs: from .npy files, or random (seeded) of the shape the compile fixed.
Expected<std::vector<rt::NamedValue>> make_inputs(const ir::Graph& g, const CompareArgs& args,
                                                  std::vector<std::string>* notes) {
  std::map<std::string, std::string> files;
  for (const std::string& spec : args.inputs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0) return invalid_argument("--input '%s' is not NAME=FILE.npy", spec.c_str());
    if (!files.emplace(spec.substr(0, eq), spec.substr(eq + 1)).second)
      return invalid_argument("--input %s is given twice", spec.substr(0, eq).c_str());
  }
  std::mt19937 rng(args.seed);
  std::vector<rt::NamedValue> feeds;
  for (const ir::Value* v : g.inputs()) {
    if (v->has_initializer()) continue;
    auto it = files.find(v->name());
    if (it != files.end()) {
      KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(it->second), "--input %s", v->name().c_str());
      feeds.push_back({v->name(), RuntimeValue(std::move(t))});
      files.erase(it);
      continue;
    }
    if (!v->type().is_tensor() || !v->shape().has_rank() || v->dtype() == DataType::kString ||
        v->dtype() == DataType::kUndefined)
      return invalid_argument("input '%s' (%s) cannot be generated: give it with --input", v->name().c_str(),
                              v->type().to_string().c_str());
    // Random data never guesses an open dim's size (issue 24): name the input and the option.
    std::vector<int64_t> dims;
    std::string example;
    bool open = false;
    for (const Dim& d : v->shape().dims()) {
      open = open || !d.is_static();
      dims.push_back(d.is_static() ? d.value : 0);
      if (!example.empty()) example += ',';
      example += d.is_static() ? std::to_string(d.value) : std::string("?");
    }
    if (open)
      return invalid_argument("input '%s' has open dims %s: random data needs every size; give them with "
                              "--input-shape %s:%s (each ? a size) or the data with --input %s=FILE.npy",
                              v->name().c_str(), v->shape().to_string().c_str(), v->name().c_str(), example.c_str(),
                              v->name().c_str());
    feeds.push_back({v->name(), RuntimeValue(random_tensor(v->dtype(), dims, rng))});
  }
  if (!files.empty()) return invalid_argument("the model has no input named '%s'", files.begin()->first.c_str());
  return feeds;
}

// Appends `v` to the graph outputs unless it is one already; returns its output index.
size_t observe(ir::Graph& g, ir::Value* v) {
  auto& outs = g.outputs();
  auto it = std::find(outs.begin(), outs.end(), v);
  if (it != outs.end()) return static_cast<size_t>(it - outs.begin());
  outs.push_back(v);
  return outs.size() - 1;
}

Expected<std::vector<RuntimeValue>> run_graph(std::shared_ptr<ir::Graph> g, const std::vector<rt::NamedValue>& feeds,
                                              const char* which) {
  std::vector<rt::NamedValue> mine;
  for (const rt::NamedValue& f : feeds)
    for (const ir::Value* v : g->inputs())
      if (v->name() == f.name) mine.push_back(f);
  KILN_ASSIGN_OR_RETURN(auto executor, rt::GraphExecutor::create(g), "preparing the %s graph", which);
  std::vector<RuntimeValue> outputs;
  KILN_RETURN_IF_ERROR(executor->run(mine, &outputs), "running the %s graph", which);
  return outputs;
}

std::string format_error(const ValueDiff& d) {
  if (!d.mismatch.empty()) return "mismatch";
  if (std::isinf(d.error)) return "inf";
  return str_format("%.3g", d.error);
}

std::string status_of(const ValueDiff& d) { return d.within() ? "ok" : "DIVERGES"; }

void print_row(size_t i, const Compared& c) {
  std::string op = c.pattern.empty() || c.pattern == c.op_type_only() ? c.op : c.op + " [" + c.pattern + "]";
  std::printf("%4zu  %-28s %-28s %-30s %-22s %-11.4g %-11.4g %-9s %s%s\n", i,
              (c.value + (c.model_output ? " (output)" : "")).c_str(), c.node.c_str(), op.c_str(),
              c.diff.got_shape.c_str(), c.diff.max_abs, c.diff.max_ref, format_error(c.diff).c_str(),
              status_of(c.diff).c_str(), c.diff.mismatch.empty() ? "" : (": " + c.diff.mismatch).c_str());
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json compared_json(const Compared& c) {
  return {{"value", c.value},
          {"node", c.node},
          {"op_type", c.op},
          {"pattern", c.pattern},
          {"model_output", c.model_output},
          {"shape", c.diff.got_shape},
          {"reference_shape", c.diff.ref_shape},
          {"max_abs_error", finite_or_null(c.diff.max_abs)},
          {"max_abs_reference", c.diff.max_ref},
          {"error", finite_or_null(c.diff.error)},
          {"mismatch", c.diff.mismatch},
          {"within_tolerance", c.diff.within()}};
}

int run_compare(CompareArgs args) {
  if (args.rtol < 0 || args.atol < 0 || !(args.rtol + args.atol > 0))
    return usage_error("compare", "--rtol and --atol must be >= 0 and not both 0");
  std::string error;
  args.threads = checked_threads("compare", args.threads_opt, args.threads, 1, &error);
  if (!error.empty()) return usage_error("compare", error);
  if (args.threads > 0) set_num_threads(args.threads);
  auto shapes = parse_shape_list(args.input_shape);
  if (!shapes.ok()) return usage_error("compare", shapes.status().to_string());
  auto kind = sniff_model_kind(args.model);
  if (!kind.ok()) return report_error("compare", kind.status().to_string());
  if (std::string bad = check_output_file("--json", args.json); !bad.empty()) return report_error("compare", bad);
  if (*kind != ModelKind::kOnnx)
    return report_error("compare", args.model + " is a compiled .kiln model: compare needs the ONNX model, "
                                                 "to compile it at -O0 and at the chosen level");
  compiler::CompileOptions ref_options, opt_options;
  ref_options.input_shapes = opt_options.input_shapes = to_input_shapes(*shapes);
  ref_options.passes.opt_level = args.kernels ? args.opt_level : 0;
  opt_options.passes.opt_level = args.opt_level;
  opt_options.passes.disabled.insert(args.disabled_passes.begin(), args.disabled_passes.end());
  // The optimised side's precision (the reference stays float32 at -O0): which node's output
  // a reduced precision moves most, value by value.
  auto precision = compiler::precision_from_name(args.precision);
  if (!precision) return usage_error("compare", "--precision " + args.precision + ": expected fp32, bf16 or mixed");
  opt_options.passes.precision = *precision;
  if (!args.keep_dtype.empty()) {
    auto keep = compiler::parse_keep_dtype(args.keep_dtype);
    if (!keep.ok()) return report_error("compare", keep.status().to_string());
    opt_options.passes.keep_dtype = *keep;
  }
  // Comparing kernels, both sides are the same graph: the same level, passes and precision.
  if (args.kernels) ref_options.passes = opt_options.passes;
  // How the two runs are named in the output.
  const std::string ref_name = args.kernels ? "reference kernels" : "-O0";
  std::string opt_name = args.kernels ? "fast kernels" : str_format("-O%d", args.opt_level);
  if (*precision != compiler::Precision::kFp32) opt_name += std::string(" ") + compiler::precision_name(*precision);
  Status valid = compiler::validate_pass_options(opt_options.passes);
  if (!valid.ok()) return report_error("compare", valid.to_string());

  auto ref = compiler::compile_onnx_file(args.model, ref_options);
  if (!ref.ok()) return report_error("compare", str_format("-O%d: ", ref_options.passes.opt_level) +
                                                    ref.status().to_string());
  auto opt = compiler::compile_onnx_file(args.model, opt_options);
  if (!opt.ok()) return report_error("compare", str_format("-O%d: ", args.opt_level) + opt.status().to_string());
  ir::Graph& rg = *ref->graph;
  ir::Graph& og = *opt->graph;

  std::vector<std::string> notes;
  auto feeds = make_inputs(rg, args, &notes);
  if (!feeds.ok()) return report_error("compare", feeds.status().to_string());

  // The model outputs, matched by name (the compiler keeps them).
  const size_t num_outputs = og.outputs().size();
  if (rg.outputs().size() != num_outputs)
    return report_error("compare", str_format("%s has %zu outputs, %s has %zu", ref_name.c_str(),
                                              rg.outputs().size(), opt_name.c_str(), num_outputs));
  std::set<std::string> output_names;
  for (size_t i = 0; i < num_outputs; ++i) {
    if (og.outputs()[i]->name() != rg.outputs()[i]->name())
      return report_error("compare", str_format("output %zu is '%s' in the %s run but '%s' in the %s run", i,
                                                rg.outputs()[i]->name().c_str(), ref_name.c_str(),
                                                og.outputs()[i]->name().c_str(), opt_name.c_str()));
    output_names.insert(og.outputs()[i]->name());
  }

  // The values to compare, in the optimised graph's execution order, then any model output
  // not produced by a node (an input or a constant passed through).
  std::vector<Compared> compared;
  std::vector<std::pair<ir::Value*, ir::Value*>> pairs;  // (optimised, reference)
  std::vector<int64_t> blocks;  // per pair: C0 of an optimised value stored NC1HWC0, else 0
  std::set<std::string> seen;
  for (const auto& n : og.nodes()) {
    // A layout conversion's output is a copy of a value compared at its producer.
    if (n->domain() == ops::kKilnDomain && n->op_type() == "TransData") continue;
    for (ir::Value* v : n->outputs()) {
      if (!v || v->name().empty() || seen.count(v->name())) continue;
      ir::Value* r = rg.find_value(v->name());
      bool is_output = output_names.count(v->name()) > 0;
      if (!r || (!r->producer() && !is_output)) continue;
      seen.insert(v->name());
      compared.push_back({v->name(), n->name(), qualified_op(*n), fused_pattern(*n), is_output, {}});
      pairs.emplace_back(v, r);
      blocks.push_back(ops::blocked_output_c0(*n));
    }
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    ir::Value* v = og.outputs()[i];
    if (seen.count(v->name())) continue;
    seen.insert(v->name());
    compared.push_back({v->name(), "", v->has_initializer() ? "constant" : "input", "", true, {}});
    pairs.emplace_back(v, rg.outputs()[i]);
    blocks.push_back(0);
  }

  const size_t opt_nodes = og.nodes().size();
  auto perturbed = apply_debug_perturbation(og);
  if (!perturbed.ok()) return report_error("compare", perturbed.status().to_string());
  if (!perturbed->empty())
    std::printf("debug: %s in the %s run (KILN_DEBUG_PERTURB_NODE)\n", perturbed->c_str(), opt_name.c_str());

  std::vector<std::pair<size_t, size_t>> slots;  // output index in (optimised, reference)
  for (const auto& [v, r] : pairs) slots.emplace_back(observe(og, v), observe(rg, r));

  // Kernels are selected when a graph's executor is prepared (in run_graph).
  if (args.kernels) kernels::set_fast_kernels_enabled(false);
  auto ref_values = run_graph(ref->graph, *feeds, args.kernels ? "reference-kernel" : "-O0");
  if (!ref_values.ok()) return report_error("compare", ref_values.status().to_string());
  if (args.kernels) kernels::set_fast_kernels_enabled(true);
  auto opt_values = run_graph(opt->graph, *feeds, args.kernels ? "fast-kernel" : "optimised");
  if (args.kernels) kernels::reset_fast_kernels_enabled();
  if (!opt_values.ok()) return report_error("compare", opt_values.status().to_string());

  int diverged = 0, outputs_diverged = 0;
  const Compared* first = nullptr;
  size_t first_index = 0;
  for (size_t i = 0; i < compared.size(); ++i) {
    Compared& c = compared[i];
    RuntimeValue& got = (*opt_values)[slots[i].first];
    // With --kernels both sides run the same graph, layouts included; otherwise the -O0
    // reference is plain.
    if (blocks[i] > 0 && !args.kernels && got.is_tensor()) {
      // Compared in the reference's layout: the blocked value's plain view.
      Expected<Tensor> plain = ops::to_plain(got.tensor(), blocks[i]);
      if (plain.ok()) got = RuntimeValue(std::move(*plain));
    }
    const RuntimeValue& ref = (*ref_values)[slots[i].second];
    // A value the optimised side stores in bfloat16 (--precision bf16|mixed: a bf16
    // convolution's output that only bf16 convolutions read) is compared by its value.
    if (got.is_tensor() && ref.is_tensor() && got.tensor().dtype() == DataType::kBFloat16 &&
        ref.tensor().dtype() == DataType::kFloat32)
      got = RuntimeValue(ops::half_to_float(got.tensor()));
    c.diff = diff_values(got, ref, args.rtol, args.atol);
    if (c.diff.within()) continue;
    ++diverged;
    if (c.model_output) ++outputs_diverged;
    if (!first) {
      first = &c;
      first_index = i;
    }
  }

  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("compare %s: %s%s (%zu nodes) vs %s%s (%zu nodes), %zu values compared, rtol %g, atol %g\n",
              args.model.c_str(), ref_name.c_str(), args.kernels ? str_format(" at -O%d", args.opt_level).c_str() : "",
              rg.nodes().size(), opt_name.c_str(),
              args.kernels ? str_format(" at -O%d", args.opt_level).c_str() : "", opt_nodes, compared.size(),
              args.rtol, args.atol);
  std::printf("error = max|opt - ref| / (atol + rtol * max|ref|); above 1 diverges\n");
  std::printf("%4s  %-28s %-28s %-30s %-22s %-11s %-11s %-9s %s\n", "#", "value", "node", "op [fused pattern]",
              "type", "max abs err", "max |ref|", "error", "status");
  const size_t rows = static_cast<size_t>(std::max(0, args.rows));
  for (size_t i = 0; i < compared.size() && i < rows; ++i) print_row(i, compared[i]);
  if (compared.size() > rows) {
    // The rows past the limit that matter: the first divergence and the model outputs.
    std::printf("  ... %zu more values (all in --json; --rows N prints more)\n", compared.size() - rows);
    for (size_t i = rows; i < compared.size(); ++i)
      if (compared[i].model_output || &compared[i] == first) print_row(i, compared[i]);
  }
  if (first) {
    std::printf("first divergence: value '%s' (#%zu) produced by node '%s' (%s%s): %s %s vs %s %s, max abs error "
                "%.4g (max |ref| %.4g, error %s x tolerance)%s\n",
                first->value.c_str(), first_index, first->node.c_str(), first->op.c_str(),
                first->pattern.empty() ? "" : (", fused pattern " + first->pattern).c_str(), opt_name.c_str(),
                first->diff.got_shape.c_str(), ref_name.c_str(), first->diff.ref_shape.c_str(), first->diff.max_abs,
                first->diff.max_ref, format_error(first->diff).c_str(),
                first->diff.mismatch.empty() ? "" : ("; " + first->diff.mismatch).c_str());
  }
  const bool agree = outputs_diverged == 0;
  std::printf("verdict: %s: %d of %zu model outputs differ, %d of %zu values diverge (%s vs %s, rtol %g)\n",
              agree ? "AGREE" : "DIFFER", outputs_diverged, num_outputs, diverged, compared.size(), opt_name.c_str(),
              ref_name.c_str(), args.rtol);

  if (!args.json.empty()) {
    nlohmann::json j;
    j["model"] = args.model;
    j["opt_level"] = args.opt_level;
    j["compared"] = args.kernels ? "kernels" : "levels";
    j["rtol"] = args.rtol;
    j["atol"] = args.atol;
    j["nodes"] = {{"reference", rg.nodes().size()}, {"optimised", og.nodes().size()}};
    j["notes"] = notes;
    j["values"] = nlohmann::json::array();
    for (const Compared& c : compared) j["values"].push_back(compared_json(c));
    j["first_divergence"] = first ? compared_json(*first) : nlohmann::json(nullptr);
    j["diverged"] = diverged;
    j["outputs_diverged"] = outputs_diverged;
    j["outputs_agree"] = agree;
    std::ofstream f(args.json, std::ios::binary | std::ios::trunc);
    f << j.dump(2) << "\n";
    if (!f) return report_error("compare", "cannot write " + args.json);
  }
  return agree ? 0 : kExitDiffer;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<CompareArgs>();
  app.add_option("model", args->model, "ONNX model to compare")->required();
  app.add_option("--input", args->inputs, "Input as NAME=FILE.npy (repeatable); missing inputs are random");
  app.add_option("--input-shape", args->input_shape,
                 "Fix input shapes, as kiln compile: \"x:1,3,224,224;y:1,128\"; needed for random inputs whose "
                 "dims are open");
  app.add_option("-O,--opt-level", args->opt_level, "Level compared with -O0 (default 3)")->check(CLI::Range(0, 3));
  app.add_option("--disable-pass", args->disabled_passes,
                 "Switch a pass off in the optimised compile (repeatable), to bisect a divergence");
  app.add_option("--precision", args->precision,
                 "Precision of the optimised side, as kiln compile --precision (fp32, bf16, mixed): find the "
                 "values a reduced precision moves most (raise --rtol to about 1e-2 for bf16)");
  app.add_option("--keep-dtype", args->keep_dtype, "As kiln compile --keep-dtype, for the optimised side");
  app.add_option("--rtol", args->rtol, "Tolerance relative to max|ref| of each value (default 1e-4)");
  app.add_option("--atol", args->atol, "Absolute tolerance added to it, for values near 0 (default 1e-6)");
  app.add_option("--seed", args->seed, "Seed for random inputs (default 0)");
  args->threads_opt = app.add_option("--threads", args->threads,
                                     "Intra-op threads, at most the cores (default: KILN_NUM_THREADS or all cores)");
  app.add_option("--rows", args->rows, "Table rows to print (default 20; the first divergence and outputs always)");
  app.add_option("--json", args->json, "Write every compared value to this JSON file");
  app.add_flag("--kernels", args->kernels,
               "Compare fast kernels with reference kernels, both at the -O level, instead of -O0 with it");
  return [args] { return run_compare(*args); };
}

KILN_REGISTER_SUBCOMMAND("compare",
                         "Compare a model at -O0 and -O3 and name the first diverging node (exit code 3 if "
                         "outputs differ)",
                         setup);

}  // namespace
}  // namespace kiln::tools
