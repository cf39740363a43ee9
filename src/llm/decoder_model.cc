// Loading and running the decoder's segments (decoder_model.h).
#include "llm/decoder_model.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"

namespace kiln::llm {

Expected<std::unique_ptr<Segment>> Segment::load(const std::string& path, const std::vector<std::string>& inputs) {
  auto seg = std::make_unique<Segment>();
  seg->path_ = path;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(path, {}),
                        "while compiling decoder segment %s", path.c_str());
  seg->graph_ = compiled.graph;
  KILN_ASSIGN_OR_RETURN(seg->executor_, rt::GraphExecutor::create(seg->graph_), "while preparing %s", path.c_str());
  seg->state_ = std::make_unique<rt::ExecutionState>();
  const auto& graph_inputs = seg->graph_->inputs();
  for (const std::string& name : inputs) {
    bool found = false;
    for (size_t i = 0; i < graph_inputs.size(); ++i) {
      if (graph_inputs[i]->name() != name) continue;
      seg->input_index_.emplace_back(name, i);
      found = true;
    }
    if (!found) return invalid_argument("%s: config.json lists input '%s', which the model lacks", path.c_str(), name.c_str());
  }
  return seg;
}

Status Segment::run(const std::vector<SegmentFeed>& feeds, const std::vector<float*>& dsts,
                    const std::vector<int64_t>& dsts_elements) {
  for (const auto& [name, index] : input_index_) {
    const SegmentFeed* feed = nullptr;
    for (const SegmentFeed& f : feeds)
      if (name == f.name) feed = &f;
    if (!feed) return internal_error("%s: no data for input '%s'", path_.c_str(), name.c_str());
    KILN_RETURN_IF_ERROR(executor_->bind_input(*state_, index, feed->dtype, feed->dims, const_cast<void*>(feed->data)),
                         "in %s", path_.c_str());
  }
  Status st = executor_->run_bound(*state_);
  for (size_t i = 0; st.ok() && i < dsts.size(); ++i) {
    const RuntimeValue& v = executor_->output(*state_, i);
    if (!v.is_tensor() || v.tensor().dtype() != DataType::kFloat32 || v.tensor().num_elements() != dsts_elements[i]) {
      st = internal_error("%s: output %zu is %s, expected %lld float32 elements", path_.c_str(), i,
                          v.description().c_str(), (long long)dsts_elements[i]);
      break;
    }
    std::copy(v.tensor().data<float>(), v.tensor().data<float>() + dsts_elements[i], dsts[i]);
  }
  executor_->end_run(*state_);
  if (!st.ok()) st.add_context("while running %s", path_.c_str());
  return st;
}

std::string Segment::implementations() const {
  std::map<std::string, int> counts;
  for (size_t i = 0; i < executor_->num_steps(); ++i)
    counts[executor_->step_node(i).op_type() + ":" + executor_->implementation(i)]++;
  std::string s;
  for (const auto& [impl, n] : counts) s += (s.empty() ? "" : ", ") + impl + " x" + std::to_string(n);
  return s;
}

namespace {

Expected<nlohmann::json> read_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  if (!std::filesystem::is_directory(dir))
    return invalid_argument("%s is not a Kiln decoder directory (a directory with config.json and the segment .onnx "
                            "files bench/llm/export_decoder.py writes)", dir.c_str());
  std::ifstream in(path);
  if (!in) return not_found("%s: no config.json: not a Kiln decoder directory", dir.c_str());
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return invalid_argument("%s: %s", path.c_str(), e.what());
  }
}

}  // namespace

Expected<std::unique_ptr<DecoderModel>> DecoderModel::load(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(nlohmann::json j, read_config(dir));
  auto model = std::make_unique<DecoderModel>();
  DecoderConfig& c = model->config_;
  std::vector<std::string> layer_pre, layer_post;
  std::string embed_file, head_file;
  nlohmann::json inputs;
  try {
    c.name = j.at("name").get<std::string>();
    c.style = j.at("style").get<std::string>();
    c.vocab = j.at("vocab").get<int64_t>();
    c.d_model = j.at("d_model").get<int64_t>();
    c.layers = j.at("layers").get<int64_t>();
    c.heads = j.at("heads").get<int64_t>();
    c.kv_heads = j.at("kv_heads").get<int64_t>();
    c.head_dim = j.at("head_dim").get<int64_t>();
    c.context = j.at("context").get<int64_t>();
    const auto& files = j.at("files");
    embed_file = files.at("embed").get<std::string>();
    head_file = files.at("head").get<std::string>();
    for (const auto& layer : files.at("layers")) {
      layer_pre.push_back(layer.at("pre").get<std::string>());
      layer_post.push_back(layer.at("post").get<std::string>());
    }
    inputs = files.at("inputs");
  } catch (const std::exception& e) {
    return invalid_argument("%s/config.json: %s", dir.c_str(), e.what());
  }
  if (c.style != "gpt2" && c.style != "llama")
    return unsupported("%s/config.json: unknown decoder style '%s' (gpt2 or llama)", dir.c_str(), c.style.c_str());
  if (c.vocab <= 0 || c.d_model <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.heads % c.kv_heads ||
      c.head_dim <= 0 || c.context <= 0 || static_cast<int64_t>(layer_pre.size()) != c.layers)
    return invalid_argument("%s/config.json: inconsistent sizes (vocab, d_model, layers, heads %% kv_heads, "
                            "head_dim, context, one file pair per layer)", dir.c_str());
  const auto start = std::chrono::steady_clock::now();
  auto load = [&](const std::string& file) -> Expected<std::unique_ptr<Segment>> {
    std::vector<std::string> names;
    if (inputs.contains(file)) names = inputs[file].get<std::vector<std::string>>();
    return Segment::load((std::filesystem::path(dir) / file).string(), names);
  };
  KILN_ASSIGN_OR_RETURN(model->embed_, load(embed_file));
  KILN_ASSIGN_OR_RETURN(model->head_, load(head_file));
  for (int64_t l = 0; l < c.layers; ++l) {
    KILN_ASSIGN_OR_RETURN(auto pre, load(layer_pre[l]));
    KILN_ASSIGN_OR_RETURN(auto post, load(layer_post[l]));
    model->pre_.push_back(std::move(pre));
    model->post_.push_back(std::move(post));
  }
  model->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Status DecoderModel::embed(int64_t t, const int64_t* ids, const int64_t* positions, float* hidden) {
  return embed_->run({{"input_ids", DataType::kInt64, {t}, ids}, {"position_ids", DataType::kInt64, {t}, positions}},
                     {hidden}, {t * config_.d_model});
}

Status DecoderModel::attention_inputs(int64_t layer, int64_t t, const float* hidden, const int64_t* positions,
                                      float* q, float* k, float* v) {
  const int64_t q_row = config_.heads * config_.head_dim, kv_row = config_.kv_heads * config_.head_dim;
  return pre_[layer]->run({{"hidden", DataType::kFloat32, {t, config_.d_model}, hidden},
                           {"position_ids", DataType::kInt64, {t}, positions}},
                          {q, k, v}, {t * q_row, t * kv_row, t * kv_row});
}

Status DecoderModel::attention_output(int64_t layer, int64_t t, const float* hidden, const float* attn,
                                      float* hidden_out) {
  return post_[layer]->run({{"hidden", DataType::kFloat32, {t, config_.d_model}, hidden},
                            {"attn", DataType::kFloat32, {t, config_.heads * config_.head_dim}, attn}},
                           {hidden_out}, {t * config_.d_model});
}

Status DecoderModel::head(int64_t t, const float* hidden, float* logits) {
  return head_->run({{"hidden", DataType::kFloat32, {t, config_.d_model}, hidden}}, {logits}, {t * config_.vocab});
}

}  // namespace kiln::llm
