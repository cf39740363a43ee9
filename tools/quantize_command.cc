// `kiln quantize MODEL.onnx --calibration DATA -o MODEL.int8.onnx`: post-training static
// quantisation into a standard QDQ ONNX model (docs/quantization.md). The float model is
// compiled at -O0 and run on Kiln over the calibration set to collect the ranges of the
// tensors the plan quantises (src/quant/calibrator.h); the QDQ writer then edits the
// ModelProto. A JSON summary goes to stdout, or to --report FILE.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compiler/compiler.h"
#include "core/parallel.h"
#include "quant/batchnorm_folding.h"
#include "quant/calibration_data.h"
#include "quant/calibrator.h"
#include "quant/image_preprocess.h"
#include "quant/constant_nodes.h"
#include "quant/opset_upgrade.h"
#include "quant/qdq_plan.h"
#include "quant/qdq_writer.h"
#include "quant/sensitivity.h"
#include "quant/transpose_folding.h"
#include "quant/quant_params.h"
#include "quant/tensor_stats.h"
#include "tools/cli_options.h"
#include "tools/quantize_command.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

constexpr const char* kCmd = "quantize";


std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

Expected<std::string> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open %s", path.c_str());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Status write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
  f.close();
  if (!f) return unavailable("cannot write %s", path.c_str());
  return ok_status();
}

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

int emit_report(const QuantizeArgs& args, const nlohmann::json& j) {
  std::string text = j.dump(2) + "\n";
  if (args.report.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  Status s = write_bytes(args.report, text);
  if (!s.ok()) return report_error(kCmd, s.to_string());
  return 0;
}

}  // namespace

int run_quantize(const QuantizeArgs& args) {
  // 1. Options, checked before any file is opened (usage errors, exit 2).
  quant::CalibrationMethod method;
  if (args.method == "minmax") method = quant::CalibrationMethod::kMinMax;
  else if (args.method == "percentile") method = quant::CalibrationMethod::kPercentile;
  else if (args.method == "entropy") method = quant::CalibrationMethod::kEntropy;
  else return usage_error(kCmd, "--method " + args.method + ": expected minmax, percentile or entropy");
  if (!(args.percentile > 0 && args.percentile <= 100))
    return usage_error(kCmd, str_format("--percentile %g: expected a value in (0, 100]", args.percentile));
  quant::ActivationType act_type;
  if (args.activation_type == "u8") act_type = quant::ActivationType::kU8;
  else if (args.activation_type == "s8") act_type = quant::ActivationType::kS8;
  else return usage_error(kCmd, "--activation-type " + args.activation_type + ": expected u8 or s8");
  if (args.calibration_size < 0) return usage_error(kCmd, "--calibration-size must not be negative");
  if (args.batch_size < 1) return usage_error(kCmd, "--batch-size must be at least 1");
  quant::QdqPlanOptions plan_options;
  std::vector<std::string> ops = args.op_types.empty() ? quant::default_op_types() : split_list(args.op_types);
  if (ops.empty()) return usage_error(kCmd, "--op-types is empty");
  for (const std::string& op : ops) {
    const auto& known = quant::quantizable_op_types();
    if (std::find(known.begin(), known.end(), op) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ",") + k;
      return usage_error(kCmd, "--op-types: '" + op + "' is not an op kiln quantize handles (" + list + ")");
    }
    plan_options.op_types.insert(op);
  }
  for (const std::string& n : split_list(args.exclude)) plan_options.exclude.insert(n);
  quant::SensitivityOptions sens;
  const bool sensitivity =
      !args.sensitivity.empty() || !args.accuracy_budget.empty() || args.min_cosine >= 0 || args.min_mask_iou >= 0;
  if ((!args.accuracy_budget.empty()) + (args.min_cosine >= 0) + (args.min_mask_iou >= 0) > 1)
    return usage_error(kCmd, "--accuracy-budget, --min-cosine and --min-mask-iou are budgets: give one");
  if (!args.accuracy_budget.empty()) {
    std::string v = args.accuracy_budget;
    if (!v.empty() && v.back() == '%') v.pop_back();
    char* end = nullptr;
    const double pct = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(pct >= 0 && pct < 100))
      return usage_error(kCmd, "--accuracy-budget " + args.accuracy_budget +
                                   ": expected the top-1 agreement drop allowed, in percent (e.g. 0.3%)");
    sens.metric = quant::SensitivityMetric::kTop1;
    sens.target = 1.0 - pct / 100.0;
  } else if (args.min_cosine >= 0) {
    if (!(args.min_cosine <= 1)) return usage_error(kCmd, "--min-cosine: expected a value in [0, 1]");
    sens.target = args.min_cosine;
  } else if (args.min_mask_iou >= 0) {
    if (!(args.min_mask_iou <= 1)) return usage_error(kCmd, "--min-mask-iou: expected a value in [0, 1]");
    if (!std::isfinite(args.mask_threshold))
      return usage_error(kCmd, "--mask-threshold: expected a finite number");
    sens.metric = quant::SensitivityMetric::kMaskIou;
    sens.target = args.min_mask_iou;
    sens.mask_threshold = args.mask_threshold;
  }
  if (sensitivity && !(args.eval_fraction > 0 && args.eval_fraction < 1))
    return usage_error(kCmd, "--eval-fraction: expected a value in (0, 1)");
  if (!args.preprocess.empty()) {
    auto pre = quant::parse_image_preprocess(args.preprocess);
    if (!pre.ok()) return usage_error(kCmd, pre.status().to_string());
  }
  std::string error;
  int threads = checked_threads(kCmd, args.threads_opt, args.threads, 1, &error);
  if (!error.empty()) return usage_error(kCmd, error);
  if (threads > 0) set_num_threads(threads);
  for (auto [opt, path] : {std::pair{"-o", &args.output}, std::pair{"--report", &args.report}})
    if (std::string bad = check_output_file(opt, *path); !bad.empty()) return report_error(kCmd, bad);

  // 2. The model: its protobuf (to edit) and its -O0 compile (types, and the calibration run).
  auto bytes = read_bytes(args.model);
  if (!bytes.ok()) return report_error(kCmd, bytes.status().to_string());
  auto model = std::make_unique<onnx::ModelProto>();
  bool parsed = false;
  try {
    parsed = model->ParseFromString(*bytes);
  } catch (const std::exception&) {
    parsed = false;
  }
  if (!parsed) return report_error(kCmd, args.model + ": not an ONNX model (the protobuf does not parse)");
  for (const auto& n : model->graph().node())
    if (n.op_type() == "QuantizeLinear" || n.op_type() == "DequantizeLinear" || n.op_type().rfind("QLinear", 0) == 0)
      return report_error(kCmd, args.model + " is quantised already (node '" + n.name() + "' is " + n.op_type() + ")");
  for (const auto& t : model->graph().initializer())
    if (t.data_location() == onnx::TensorProto::EXTERNAL)
      return report_error(kCmd, args.model + ": initializer '" + t.name() +
                                    "' is stored as external data, which kiln quantize does not write yet");
  // An older opset is converted to 13 first (per-channel DequantizeLinear needs its `axis`),
  // with the ranks Kiln infers (quant/opset_upgrade.h).
  bool upgraded = false;
  if (quant::onnx_opset(*model) > 0 && quant::onnx_opset(*model) < 13) {
    compiler::CompileOptions typing;
    typing.passes.opt_level = 0;
    auto typed = compiler::compile_onnx_file(args.model, typing);
    if (!typed.ok()) return report_error(kCmd, typed.status().to_string());
    auto up = quant::upgrade_opset(*model, 13, *typed->graph);
    if (!up.ok()) return report_error(kCmd, args.model + ": " + up.status().to_string());
    upgraded = *up;
    if (upgraded) std::fprintf(stderr, "kiln quantize: %s: converted to ai.onnx opset 13\n", args.model.c_str());
  }
  // Weights stored as Constant nodes become initializers (quant/constant_nodes.h).
  const int constants = quant::constant_nodes_to_initializers(*model);
  // BatchNormalization folded into the convolutions first (quant/batchnorm_folding.h): the
  // calibration then runs, and the QDQ pairs go, on the model the int8 kernels compute.
  std::string model_dir = std::filesystem::path(args.model).parent_path().string();
  auto bn_folded = quant::fold_batchnorm_into_conv(*model, model_dir);
  if (!bn_folded.ok()) return report_error(kCmd, args.model + ": " + bn_folded.status().to_string());
  // So are Mul / Add by per-channel constants after a convolution (the same header).
  auto affine_folded = quant::fold_scale_shift_into_conv(*model, model_dir);
  if (!affine_folded.ok()) return report_error(kCmd, args.model + ": " + affine_folded.status().to_string());
  // Transposed constant weights (MatMul(x, Transpose(W))) stored transposed, so that they are
  // quantised as weights (quant/transpose_folding.h).
  auto transposes = quant::fold_constant_transposes(*model, model_dir);
  if (!transposes.ok()) return report_error(kCmd, args.model + ": " + transposes.status().to_string());
  const int prepared = constants + *bn_folded + *affine_folded + *transposes + (upgraded ? 1 : 0);
  compiler::CompileOptions options;
  options.passes.opt_level = 0;
  std::string folded_bytes;
  if (prepared > 0 && !model->SerializeToString(&folded_bytes))
    return report_error(kCmd, args.model + ": cannot serialise the model after folding BatchNormalization");
  auto compiled = prepared > 0
                      ? compiler::compile_onnx_bytes(folded_bytes.data(), folded_bytes.size(), args.model, options)
                      : compiler::compile_onnx_file(args.model, options);
  if (!compiled.ok()) return report_error(kCmd, compiled.status().to_string());
  std::shared_ptr<ir::Graph> graph = compiled->graph;
  auto is_float32 = [&](const std::string& name) {
    const ir::Value* v = graph->find_value(name);
    return v && v->dtype() == DataType::kFloat32;
  };

  // 3. The plan: which nodes, which tensors.
  auto plan = quant::plan_qdq(*model, plan_options, is_float32);
  if (!plan.ok()) return report_error(kCmd, plan.status().to_string());
  for (const std::string& e : plan->unknown_excludes)
    report_warning(kCmd, "--exclude " + e + ": the model has no node of that name (unnamed nodes are <OpType>#<index>)");
  nlohmann::json j;
  j["model"] = args.model;
  j["output"] = args.output;
  j["method"] = args.method;
  if (method == quant::CalibrationMethod::kPercentile) j["percentile"] = args.percentile;
  j["activation_type"] = args.activation_type;
  j["weight_type"] = "s8 per channel, symmetric";
  j["skipped"] = plan->skipped;
  if (plan->empty()) {
    std::fprintf(stderr, "kiln quantize: nothing to quantise in %s (no float %s node); wrote the model unchanged to %s\n",
                 args.model.c_str(), args.op_types.empty() ? "Conv, MatMul, Gemm, Add, pooling, Concat or Resize"
                                                           : ("'" + args.op_types + "'").c_str(),
                 args.output.c_str());
    Status w = write_bytes(args.output, *bytes);
    if (!w.ok()) return report_error(kCmd, w.to_string());
    j["samples"] = 0;
    j["quantized_nodes"] = {{"total", 0}, {"by_op", nlohmann::json::object()}};
    j["tensors"] = nlohmann::json::array();
    j["weights"] = nlohmann::json::array();
    return emit_report(args, j);
  }
  if (quant::onnx_opset(*model) < 13)
    return report_error(kCmd, str_format("%s imports ai.onnx opset %lld; per-channel DequantizeLinear needs opset 13 or "
                                         "newer: convert it first (onnx.version_converter.convert_version(model, 13))",
                                         args.model.c_str(), static_cast<long long>(quant::onnx_opset(*model))));

  // 4. Calibration data and statistics.
  std::vector<quant::ModelInput> inputs = quant::model_inputs(*graph);
  quant::CalibrationDataOptions data_options{args.calibration, args.preprocess, args.calibration_size, args.seed};
  auto data = quant::load_calibration_data(inputs, data_options);
  if (!data.ok()) return report_error(kCmd, data.status().to_string());
  // The sensitivity analysis measures on held-out samples: the last part of the set.
  std::vector<quant::Sample> eval;
  if (sensitivity) {
    const size_t n = data->samples.size();
    if (n < 2)
      return report_error(kCmd, str_format("the sensitivity analysis needs at least 2 samples (one to calibrate, one "
                                           "to evaluate); %s has %zu", args.calibration.c_str(), n));
    const size_t k = std::clamp<size_t>(static_cast<size_t>(std::lround(args.eval_fraction * n)), 1, n - 1);
    eval.assign(std::make_move_iterator(data->samples.end() - k), std::make_move_iterator(data->samples.end()));
    data->samples.resize(n - k);
  }
  quant::CalibratorOptions cal;
  cal.batch_size = args.batch_size;
  cal.histograms = method != quant::CalibrationMethod::kMinMax;
  const bool tty = isatty(fileno(stderr));
  const int passes = cal.histograms ? 2 : 1;
  int64_t last_reported = -1;
  cal.progress = [&](int pass, int64_t done, int64_t total) {
    // A terminal gets one line redrawn; a log gets a line per tenth.
    int64_t tenth = total >= 10 ? done * 10 / total : done;
    if (!tty && tenth == last_reported && done != total) return;
    last_reported = tenth;
    std::fprintf(stderr, "%scalibrating %lld/%lld samples%s%s", tty ? "\r" : "", static_cast<long long>(done),
                 static_cast<long long>(total),
                 passes == 2 ? (pass == 1 ? " (pass 1/2: ranges)" : " (pass 2/2: histograms)") : "",
                 tty && !(done == total && pass == passes) ? "" : "\n");
    std::fflush(stderr);
  };
  int64_t samples_used = 0;
  auto stats = quant::collect_statistics(graph, inputs, plan->activations, *data, cal, &samples_used);
  if (!stats.ok()) return report_error(kCmd, stats.status().to_string());
  if (samples_used < static_cast<int64_t>(data->samples.size()))
    report_warning(kCmd, str_format("the model's static batch does not divide the %zu samples: the last %lld left out",
                                    data->samples.size(),
                                    static_cast<long long>(data->samples.size()) - static_cast<long long>(samples_used)));

  // 5. Ranges, parameters, the QDQ model.
  std::map<std::string, quant::QuantParams> params;
  nlohmann::json tensors = nlohmann::json::array();
  for (const std::string& name : plan->activations) {
    const quant::TensorStats& s = stats->at(name);
    quant::CalibratedRange r = quant::choose_range(s, method, args.percentile);
    quant::QuantParams p = quant::activation_params(r.lo, r.hi, act_type);
    params[name] = p;
    tensors.push_back({{"name", name},
                       {"min", finite_or_null(s.min())},
                       {"max", finite_or_null(s.max())},
                       {"threshold", finite_or_null(r.threshold)},
                       {"range", {finite_or_null(r.lo), finite_or_null(r.hi)}},
                       {"scale", p.scale},
                       {"zero_point", p.zero_point}});
  }
  const onnx::ModelProto float_model = *model;  // before the QDQ pairs: the sensitivity variants' base
  auto weights = quant::write_qdq(*model, *plan, params, act_type, model_dir);
  if (!weights.ok()) return report_error(kCmd, weights.status().to_string());
  std::string out;
  if (!model->SerializeToString(&out)) return report_error(kCmd, "cannot serialise the quantised model (over 2 GiB?)");
  if (sensitivity) {
    // A variant quantises a subset of the plan's nodes with the same calibrated parameters.
    quant::VariantBuilder build = [&](const std::set<std::string>& quantised) -> Expected<std::string> {
      onnx::ModelProto variant = float_model;
      if (!quantised.empty()) {
        quant::QdqPlanOptions o = plan_options;
        for (const std::string& node : plan->nodes)
          if (!quantised.count(node)) o.exclude.insert(node);
        KILN_ASSIGN_OR_RETURN(quant::QdqPlan sub, quant::plan_qdq(variant, o, is_float32));
        KILN_RETURN_IF_ERROR(quant::write_qdq(variant, sub, params, act_type, model_dir).status());
      }
      std::string bytes;
      if (!variant.SerializeToString(&bytes)) return internal_error("cannot serialise a sensitivity variant");
      return bytes;
    };
    sens.progress = [&](const std::string& line) {
      std::fprintf(stderr, "%s%s%s", tty ? "\r\033[K" : "", line.c_str(), tty ? "" : "\n");
      std::fflush(stderr);
    };
    auto result = quant::analyse_sensitivity(plan->nodes, build, inputs, eval, sens);
    if (tty) std::fprintf(stderr, "\n");
    if (!result.ok()) return report_error(kCmd, result.status().to_string());
    if (sens.target >= 0 && result->quantised.size() != plan->nodes.size()) {
      auto chosen = build(result->quantised);
      if (!chosen.ok()) return report_error(kCmd, chosen.status().to_string());
      out = std::move(*chosen);
    }
    const char* metric = sens.metric == quant::SensitivityMetric::kTop1       ? "top1"
                         : sens.metric == quant::SensitivityMetric::kMaskIou ? "mask_iou"
                                                                              : "cosine";
    nlohmann::json layers = nlohmann::json::array();
    for (const auto& l : result->layers)
      layers.push_back({{"node", l.node},
                        {"only_int8", l.only_int8},
                        {"only_float", l.only_float},
                        {"choice", l.kept_float ? "float" : "int8"}});
    nlohmann::json sj = {{"metric", metric},
                         {"mask_threshold", sens.metric == quant::SensitivityMetric::kMaskIou
                                                ? nlohmann::json(sens.mask_threshold)
                                                : nlohmann::json(nullptr)},
                         {"evaluation_samples", eval.size()},
                         {"target", sens.target >= 0 ? nlohmann::json(sens.target) : nlohmann::json(nullptr)},
                         {"all_int8", result->all_int8},
                         {"chosen", result->chosen},
                         {"budget_met", result->budget_met},
                         {"kept_float", nlohmann::json::array()},
                         {"latency_ms", {{"float", result->float_ms}, {"all_int8", result->all_int8_ms},
                                         {"chosen", result->chosen_ms}}},
                         {"speedup_over_float", {{"all_int8", result->float_ms / result->all_int8_ms},
                                                 {"chosen", result->float_ms / result->chosen_ms}}},
                         {"layers", layers}};
    for (const auto& l : result->layers)
      if (l.kept_float) sj["kept_float"].push_back(l.node);
    j["sensitivity"] = sj;
    if (!args.sensitivity.empty()) {
      Status sw = write_bytes(args.sensitivity, sj.dump(2) + "\n");
      if (!sw.ok()) return report_error(kCmd, sw.to_string());
    }
    std::fprintf(stderr,
                 "kiln quantize: %s on %zu held-out samples: float 1, all int8 %.4f, chosen %.4f with %zu of %zu nodes "
                 "int8 (%zu kept float)%s; %.2f / %.2f / %.2f ms float / all int8 / chosen\n",
                 metric, eval.size(), result->all_int8, result->chosen, result->quantised.size(), plan->nodes.size(),
                 plan->nodes.size() - result->quantised.size(),
                 result->budget_met ? "" : ", BUDGET NOT MET even with every node float", result->float_ms,
                 result->all_int8_ms, result->chosen_ms);
  }
  Status w = write_bytes(args.output, out);
  if (!w.ok()) return report_error(kCmd, w.to_string());

  j["calibration"] = {{"path", args.calibration},
                      {"layout", data->layout},
                      {"samples_found", data->available},
                      {"samples_used", samples_used},
                      {"seed", args.seed}};
  j["samples"] = samples_used;
  nlohmann::json by_op = nlohmann::json::object();
  for (const auto& [op, n] : plan->nodes_by_op) by_op[op] = n;
  j["quantized_nodes"] = {{"total", plan->nodes.size()}, {"by_op", by_op}, {"names", plan->nodes}};
  j["tensors"] = tensors;
  nlohmann::json wj = nlohmann::json::array();
  for (const auto& r : *weights)
    wj.push_back({{"name", r.tensor},
                  {"kind", r.bias ? "bias int32" : "weight int8"},
                  {"axis", r.axis},
                  {"channels", r.channels},
                  {"scale_min", r.scale_min},
                  {"scale_max", r.scale_max}});
  j["weights"] = wj;
  std::fprintf(stderr, "kiln quantize: %zu nodes quantised, %zu activations calibrated on %zu samples (%s); wrote %s\n",
               plan->nodes.size(), plan->activations.size(), static_cast<size_t>(samples_used), args.method.c_str(),
               args.output.c_str());
  return emit_report(args, j);
}

namespace {

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<QuantizeArgs>();
  app.add_option("model", args->model, "Float ONNX model to quantise")->required();
  app.add_option("--calibration", args->calibration,
                 "Calibration data folder: one sub-folder per sample holding <input>.npy, or .npy files / images "
                 "for a one-input model (docs/quantization.md)")
      ->required();
  app.add_option("-o,--output", args->output, "The QDQ ONNX model to write")->required();
  app.add_option("--preprocess", args->preprocess,
                 "How images become the input: resize=H,W:scale=1/255:mean=M,M,M:std=S,S,S:layout=NCHW|NHWC:"
                 "color=RGB|BGR|GRAY");
  app.add_option("--method", args->method, "Calibration: minmax (default), percentile or entropy (KL divergence)");
  app.add_option("--percentile", args->percentile, "Percentile of |x| kept by --method percentile (default 99.99)");
  app.add_option("--activation-type", args->activation_type,
                 "Activations: u8 (asymmetric, default) or s8 (symmetric); weights are always s8 per channel");
  app.add_option("--op-types", args->op_types,
                 "Ops to quantise, comma-separated (default Conv,MatMul,Gemm,Add,MaxPool,AveragePool,"
                 "GlobalAveragePool,Concat,Resize; also Mul, Relu, Clip)");
  app.add_option("--exclude", args->exclude, "Node names to keep in float, comma-separated");
  app.add_option("--sensitivity", args->sensitivity,
                 "Measure every quantised node's effect on held-out samples and write the per-layer report here "
                 "(JSON; docs/quantization.md)");
  app.add_option("--accuracy-budget", args->accuracy_budget,
                 "Keep the most sensitive nodes float until top-1 agreement with the float model drops by at most "
                 "this much (e.g. 0.3%)");
  app.add_option("--min-cosine", args->min_cosine,
                 "Keep the most sensitive nodes float until the outputs' cosine to the float model's is at least this");
  app.add_option("--min-mask-iou", args->min_mask_iou,
                 "Keep the most sensitive nodes float until the mask {output 0 > --mask-threshold} overlaps the float "
                 "model's with at least this intersection over union (a detector's probability map)");
  app.add_option("--mask-threshold", args->mask_threshold, "The threshold of --min-mask-iou's mask (default 0.5)");
  app.add_option("--eval-fraction", args->eval_fraction,
                 "Share of the calibration samples held out for the sensitivity analysis (default 0.2)");
  app.add_option("--calibration-size", args->calibration_size, "Samples to use, picked with --seed (default: all)");
  app.add_option("--seed", args->seed, "Seed picking the samples (default 0)");
  app.add_option("--batch-size", args->batch_size,
                 "Samples per execution when the model's batch dim is open (default 8)");
  app.add_option("--report", args->report, "Write the JSON summary here instead of stdout");
  args->threads_opt = app.add_option("--threads", args->threads,
                                     "Intra-op threads, at most the cores (default: KILN_NUM_THREADS or all cores)");
  return [args] { return run_quantize(*args); };
}

KILN_REGISTER_SUBCOMMAND("quantize",
                         "Post-training int8 quantisation: calibrate on Kiln and write a QDQ ONNX model", setup);

}  // namespace
}  // namespace kiln::tools
