// Loading and running the decoder's segments (decoder_model.h).
#include "llm/decoder_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "compiler/compiler.h"
#include "core/logging.h"
#include "frontend/onnx/onnx_importer.h"

namespace kiln::llm {

Status Segment::bind(std::vector<SegmentPort> inputs) {
  const auto& graph_inputs = graph_->inputs();
  for (SegmentPort& port : inputs)
    for (size_t i = 0; i < graph_inputs.size(); ++i)
      if (graph_inputs[i]->name() == port.name) {
        input_index_.push_back(i);
        inputs_.push_back(std::move(port));
        break;
      }
  const auto& graph_outputs = graph_->outputs();
  for (const SegmentPort& port : outputs_) {
    size_t i = 0;
    while (i < graph_outputs.size() && graph_outputs[i]->name() != port.name) ++i;
    if (i == graph_outputs.size()) return internal_error("%s: no output '%s'", path_.c_str(), port.name.c_str());
    output_index_.push_back(i);
  }
  KILN_ASSIGN_OR_RETURN(executor_, rt::GraphExecutor::create(graph_), "while preparing %s", path_.c_str());
  state_ = std::make_unique<rt::ExecutionState>();
  return ok_status();
}

Expected<std::unique_ptr<Segment>> Segment::load(const std::string& path, std::vector<SegmentPort> inputs,
                                                 std::vector<SegmentPort> outputs) {
  auto seg = std::make_unique<Segment>();
  seg->path_ = path;
  KILN_ASSIGN_OR_RETURN(compiler::CompiledModel compiled, compiler::compile_onnx_file(path, {}),
                        "while compiling decoder segment %s", path.c_str());
  seg->graph_ = compiled.graph;
  seg->outputs_ = std::move(outputs);
  KILN_RETURN_IF_ERROR(seg->bind(std::move(inputs)));
  return seg;
}

Expected<std::unique_ptr<Segment>> Segment::create(SegmentGraph segment) {
  auto seg = std::make_unique<Segment>();
  seg->path_ = segment.label;
  seg->graph_ = segment.graph;
  KILN_ASSIGN_OR_RETURN(auto executor, prepare_graph(seg->graph_, seg->path_));
  (void)executor;  // bind() prepares the one the segment keeps
  seg->outputs_ = std::move(segment.outputs);
  KILN_RETURN_IF_ERROR(seg->bind(std::move(segment.inputs)));
  KILN_LOG(kDebug, "%s runs on %s", seg->path_.c_str(), seg->implementations().c_str());
  return seg;
}

Status Segment::run(StepStore& store) {
  for (size_t p = 0; p < inputs_.size(); ++p) {
    const SegmentPort& port = inputs_[p];
    auto it = store.find(port.key);
    if (it == store.end()) return internal_error("%s: no data for input '%s'", path_.c_str(), port.key.c_str());
    StepValue& v = it->second;
    std::vector<int64_t> dims = port.dims.empty() ? v.dims : port.dims;
    for (int64_t& d : dims)
      if (d == -1) d = v.tokens();
    KILN_RETURN_IF_ERROR(executor_->bind_input(*state_, input_index_[p], v.dtype, dims, v.bytes.data()),
                         "in %s", path_.c_str());
  }
  Status st = executor_->run_bound(*state_);
  for (size_t p = 0; st.ok() && p < outputs_.size(); ++p) {
    const RuntimeValue& r = executor_->output(*state_, output_index_[p]);
    if (!r.is_tensor()) {
      st = internal_error("%s: output '%s' is %s", path_.c_str(), outputs_[p].name.c_str(), r.description().c_str());
      break;
    }
    const Tensor& t = r.tensor();
    StepValue& v = store[outputs_[p].key];
    v.dtype = t.dtype();
    v.dims = t.dims();
    v.token_axis = outputs_[p].token_axis;
    const auto* bytes = static_cast<const unsigned char*>(t.raw_data());
    v.bytes.assign(bytes, bytes + t.size_bytes());
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

// The context of a decoder.onnx with no config.json beside it saying otherwise.
constexpr int64_t kDefaultContext = 2048;

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

Expected<std::unique_ptr<DecoderModel>> DecoderModel::load_split(const std::string& dir) {
  KILN_ASSIGN_OR_RETURN(nlohmann::json j, read_config(dir));
  auto model = std::make_unique<DecoderModel>();
  DecoderConfig& c = model->config_;
  std::vector<std::string> layer_pre, layer_post;
  std::string embed_file, head_file;
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
  auto load = [&](const std::string& file, std::vector<SegmentPort> in,
                  std::vector<SegmentPort> out) -> Expected<std::unique_ptr<Segment>> {
    return Segment::load((std::filesystem::path(dir) / file).string(), std::move(in), std::move(out));
  };
  // The exporter's segments take [T] ids and positions and [T, width] activations.
  const SegmentPort ids{"input_ids", "input_ids", {-1}}, positions{"position_ids", "position_ids", {-1}};
  auto hidden = [](int64_t l) { return SegmentPort{"hidden", "hidden." + std::to_string(l), {}, 0}; };
  model->stages_.resize(c.layers + 1);
  KILN_ASSIGN_OR_RETURN(auto embed, load(embed_file, {ids, positions}, {{"hidden", "hidden.0", {}, 0}}));
  model->stages_[0].push_back(std::move(embed));
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string n = std::to_string(l);
    KILN_ASSIGN_OR_RETURN(auto pre, load(layer_pre[l], {hidden(l), positions},
                                         {{"q", "q." + n, {}, 0}, {"k", "k." + n, {}, 0}, {"v", "v." + n, {}, 0}}));
    KILN_ASSIGN_OR_RETURN(auto post, load(layer_post[l], {hidden(l), {"attn", "attn." + n, {-1, c.heads * c.head_dim}}},
                                          {{"hidden_out", "hidden." + std::to_string(l + 1), {}, 0}}));
    model->stages_[l].push_back(std::move(pre));
    model->stages_[l + 1].push_back(std::move(post));
  }
  KILN_ASSIGN_OR_RETURN(auto head, load(head_file, {hidden(c.layers)}, {{"logits", "logits", {}, 0}}));
  model->stages_[c.layers].push_back(std::move(head));
  model->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Expected<std::unique_ptr<DecoderModel>> DecoderModel::load_recognised(const std::string& file) {
  const auto start = std::chrono::steady_clock::now();
  KILN_ASSIGN_OR_RETURN(frontend::ImportResult imported, frontend::import_onnx_file(file));
  KILN_ASSIGN_OR_RETURN(RecognisedDecoder rec, recognise_decoder(*imported.graph, file));
  auto model = std::make_unique<DecoderModel>();
  DecoderConfig& c = model->config_;
  const std::filesystem::path path(file);
  c.name = path.parent_path().filename().string();
  if (c.name.empty()) c.name = path.stem().string();
  c.style = "onnx";
  c.vocab = rec.vocab;
  c.layers = rec.layers;
  c.heads = rec.heads;
  c.kv_heads = rec.kv_heads;
  c.head_dim = rec.head_dim;
  c.d_model = rec.heads * rec.head_dim;
  // The graph does not say how far positions go: config.json beside it may ("context").
  c.context = kDefaultContext;
  const auto config = path.parent_path() / "config.json";
  if (std::filesystem::exists(config)) {
    KILN_ASSIGN_OR_RETURN(nlohmann::json j, read_config(path.parent_path().string()));
    if (j.contains("context") && j["context"].is_number_integer()) c.context = j["context"].get<int64_t>();
    if (j.contains("name") && j["name"].is_string()) c.name = j["name"].get<std::string>();
  }
  for (SegmentGraph& seg : rec.stages) {
    std::vector<std::unique_ptr<Segment>> stage;
    KILN_ASSIGN_OR_RETURN(auto s, Segment::create(std::move(seg)));
    stage.push_back(std::move(s));
    model->stages_.push_back(std::move(stage));
  }
  KILN_RETURN_IF_ERROR(model->find_token_axes());
  KILN_RETURN_IF_ERROR(model->check_token_independence());
  model->note_ = str_format("%s: recognised %lld layers of attention with past (heads %lld, kv_heads %lld, head_dim "
                            "%lld, scale %.6g = 1/sqrt(%lld)); %lld stages run on Kiln's kernels, attention paged",
                            file.c_str(), (long long)c.layers, (long long)c.heads, (long long)c.kv_heads,
                            (long long)c.head_dim, rec.scale, (long long)c.head_dim, (long long)c.layers + 1);
  model->compile_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return model;
}

Expected<std::unique_ptr<DecoderModel>> DecoderModel::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::unique_ptr<DecoderModel> model;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".onnx") {
    KILN_ASSIGN_OR_RETURN(model, load_recognised(path));
  } else if (fs::is_directory(path) && !fs::exists(fs::path(path) / "embed.onnx") &&
             fs::exists(fs::path(path) / "decoder.onnx")) {
    KILN_ASSIGN_OR_RETURN(model, load_recognised((fs::path(path) / "decoder.onnx").string()));
  } else {
    KILN_ASSIGN_OR_RETURN(model, load_split(path));
  }
  // What the last stage reads from earlier ones: the rows head() needs.
  std::set<std::string> made_here;
  for (const auto& seg : model->stages_.back()) {
    for (const SegmentPort& in : seg->inputs())
      if (!made_here.count(in.key) &&
          std::find(model->head_inputs_.begin(), model->head_inputs_.end(), in.key) == model->head_inputs_.end())
        model->head_inputs_.push_back(in.key);
    for (const SegmentPort& out : seg->outputs()) made_here.insert(out.key);
  }
  return model;
}

Status DecoderModel::begin(int64_t t, const int64_t* ids, const int64_t* positions) {
  auto put = [&](const char* key, const int64_t* data) {
    StepValue& v = store_[key];
    v.dtype = DataType::kInt64;
    v.dims = {t};
    v.token_axis = 0;
    v.bytes.assign(reinterpret_cast<const unsigned char*>(data), reinterpret_cast<const unsigned char*>(data + t));
  };
  put("input_ids", ids);
  put("position_ids", positions);
  return ok_status();
}

Status DecoderModel::take(const std::string& key, float* dst, int64_t elements) const {
  auto it = store_.find(key);
  if (it == store_.end() || it->second.dtype != DataType::kFloat32 ||
      static_cast<int64_t>(it->second.bytes.size()) != elements * 4)
    return internal_error("%s: stage output '%s' is missing or not %lld float32 elements", config_.name.c_str(),
                          key.c_str(), (long long)elements);
  std::memcpy(dst, it->second.bytes.data(), elements * 4);
  return ok_status();
}

Status DecoderModel::attention_inputs(int64_t layer, float* q, float* k, float* v) {
  for (const auto& seg : stages_[layer]) KILN_RETURN_IF_ERROR(seg->run(store_));
  const int64_t t = store_.at("input_ids").tokens();
  const std::string n = std::to_string(layer);
  const int64_t q_row = config_.heads * config_.head_dim, kv_row = config_.kv_heads * config_.head_dim;
  KILN_RETURN_IF_ERROR(take("q." + n, q, t * q_row));
  KILN_RETURN_IF_ERROR(take("k." + n, k, t * kv_row));
  return take("v." + n, v, t * kv_row);
}

Status DecoderModel::attention_output(int64_t layer, const float* attn) {
  const int64_t t = store_.at("input_ids").tokens();
  StepValue& v = store_["attn." + std::to_string(layer)];
  v.dtype = DataType::kFloat32;
  v.dims = {t, config_.heads * config_.head_dim};
  v.token_axis = 0;
  v.bytes.assign(reinterpret_cast<const unsigned char*>(attn),
                 reinterpret_cast<const unsigned char*>(attn + t * config_.heads * config_.head_dim));
  return ok_status();
}

Status DecoderModel::keep_rows(const std::vector<int64_t>& rows) {
  for (const std::string& key : head_inputs_) {
    auto it = store_.find(key);
    if (it == store_.end()) return internal_error("%s: no '%s' for the head", config_.name.c_str(), key.c_str());
    const StepValue& v = it->second;
    // [outer, T, inner] around the token axis.
    int64_t outer = 1, inner = dtype_bytes(v.dtype, 1);
    for (int i = 0; i < v.token_axis; ++i) outer *= v.dims[i];
    for (size_t i = v.token_axis + 1; i < v.dims.size(); ++i) inner *= v.dims[i];
    const int64_t t = v.tokens(), n = static_cast<int64_t>(rows.size());
    StepValue& kept = kept_[key];
    const int64_t before = kept.dims.empty() ? 0 : kept.tokens();
    std::vector<unsigned char> bytes(outer * (before + n) * inner);
    for (int64_t o = 0; o < outer; ++o) {
      if (before)
        std::memcpy(&bytes[o * (before + n) * inner], &kept.bytes[o * before * inner], before * inner);
      for (int64_t r = 0; r < n; ++r)
        std::memcpy(&bytes[(o * (before + n) + before + r) * inner], &v.bytes[(o * t + rows[r]) * inner], inner);
    }
    kept.dtype = v.dtype;
    kept.dims = v.dims;
    kept.dims[v.token_axis] = before + n;
    kept.token_axis = v.token_axis;
    kept.bytes = std::move(bytes);
  }
  return ok_status();
}

Status DecoderModel::head(int64_t t, float* logits) {
  // The kept rows, padded with zero rows to t, become the last stage's inputs.
  for (auto& [key, v] : kept_) {
    int64_t outer = 1, inner = dtype_bytes(v.dtype, 1);
    for (int i = 0; i < v.token_axis; ++i) outer *= v.dims[i];
    for (size_t i = v.token_axis + 1; i < v.dims.size(); ++i) inner *= v.dims[i];
    const int64_t n = v.tokens();
    if (n > t) return internal_error("%lld rows kept for a head of %lld", (long long)n, (long long)t);
    StepValue& dst = store_[key];
    dst.dtype = v.dtype;
    dst.dims = v.dims;
    dst.dims[v.token_axis] = t;
    dst.token_axis = v.token_axis;
    dst.bytes.assign(outer * t * inner, 0);
    for (int64_t o = 0; o < outer; ++o) std::memcpy(&dst.bytes[o * t * inner], &v.bytes[o * n * inner], n * inner);
  }
  kept_.clear();
  for (const auto& seg : stages_.back()) KILN_RETURN_IF_ERROR(seg->run(store_));
  return take("logits", logits, t * config_.vocab);
}

// Where inference lost the sequence dim's name (a view of flattened tokens, as Hugging Face's
// Conv1D writes), the token axis of a value passed between stages is the one axis whose
// extent follows T: every stage runs on 2 and on 3 tokens (attention replaced by the queries).
Status DecoderModel::find_token_axes() {
  const int64_t q_row = config_.heads * config_.head_dim, kv_row = config_.kv_heads * config_.head_dim;
  std::map<std::string, std::vector<int64_t>> dims[2];
  for (int64_t t : {2, 3}) {
    std::vector<int64_t> ids(t, 0), pos(t);
    for (int64_t i = 0; i < t; ++i) pos[i] = i;
    std::vector<float> q(t * q_row), k(t * kv_row), v(t * kv_row);
    KILN_RETURN_IF_ERROR(begin(t, ids.data(), pos.data()));
    for (int64_t l = 0; l < config_.layers; ++l) {
      KILN_RETURN_IF_ERROR(attention_inputs(l, q.data(), k.data(), v.data()));
      KILN_RETURN_IF_ERROR(attention_output(l, q.data()));
    }
    for (const auto& seg : stages_.back()) KILN_RETURN_IF_ERROR(seg->run(store_));
    for (const auto& [key, value] : store_) dims[t - 2][key] = value.dims;
  }
  for (auto& stage : stages_)
    for (auto& seg : stage)
      for (size_t o = 0; o < seg->outputs().size(); ++o) {
        const SegmentPort& port = seg->outputs()[o];
        if (port.token_axis >= 0) continue;
        const auto& a = dims[0][port.key];
        const auto& b = dims[1][port.key];
        int axis = -1, differ = 0;
        for (size_t i = 0; i < a.size() && a.size() == b.size(); ++i)
          if (a[i] != b[i]) {
            ++differ;
            axis = a[i] == 2 && b[i] == 3 ? static_cast<int>(i) : -1;
          }
        if (differ != 1 || axis < 0)
          return unsupported("%s: value %s, passed between stages, has no single axis of the tokens (dims with 2 "
                             "and 3 tokens: %s and %s): the stages cannot run over a flat batch of tokens",
                             config_.name.c_str(), port.key.c_str(), Shape::from_static(a).to_string().c_str(),
                             Shape::from_static(b).to_string().c_str());
        seg->set_token_axis(o, axis);
      }
  store_.clear();
  return ok_status();
}

// Runs every stage (attention replaced by a per-token stand-in: the queries) over three
// tokens together and over each alone: the logits must agree, or some op outside the
// recognised cores mixes tokens along the sequence axis, which a flat batch of tokens from
// many sequences cannot run.
Status DecoderModel::check_token_independence() {
  const int64_t tokens = 3, vocab = config_.vocab;
  const int64_t q_row = config_.heads * config_.head_dim, kv_row = config_.kv_heads * config_.head_dim;
  auto run = [&](const std::vector<int64_t>& ids, const std::vector<int64_t>& pos,
                 std::vector<float>& logits) -> Status {
    const int64_t t = static_cast<int64_t>(ids.size());
    std::vector<float> q(t * q_row), k(t * kv_row), v(t * kv_row);
    KILN_RETURN_IF_ERROR(begin(t, ids.data(), pos.data()));
    for (int64_t l = 0; l < config_.layers; ++l) {
      KILN_RETURN_IF_ERROR(attention_inputs(l, q.data(), k.data(), v.data()));
      KILN_RETURN_IF_ERROR(attention_output(l, q.data()));
    }
    std::vector<int64_t> rows(t);
    for (int64_t i = 0; i < t; ++i) rows[i] = i;
    KILN_RETURN_IF_ERROR(keep_rows(rows));
    logits.resize(t * vocab);
    return head(t, logits.data());
  };
  const std::vector<int64_t> ids = {1 % vocab, 7 % vocab, 3 % vocab}, pos = {0, 1, 2};
  std::vector<float> together, alone;
  KILN_RETURN_IF_ERROR(run(ids, pos, together), "while checking that %s's stages are position-wise",
                       config_.name.c_str());
  for (int64_t i = 0; i < tokens; ++i) {
    KILN_RETURN_IF_ERROR(run({ids[i]}, {pos[i]}, alone));
    for (int64_t x = 0; x < vocab; ++x) {
      const float a = together[i * vocab + x], b = alone[x];
      if (std::abs(a - b) > 1e-4f * std::max(1.0f, std::abs(b)))
        return unsupported("%s: outside the recognised attention cores, the graph mixes tokens along the sequence "
                           "axis (token %lld's logit %lld is %g run with 3 tokens, %g alone): it cannot run over a "
                           "flat batch of tokens from many sequences", config_.name.c_str(), (long long)i,
                           (long long)x, a, b);
    }
  }
  return ok_status();
}

}  // namespace kiln::llm
