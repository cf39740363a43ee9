// Recognising attention-with-past and building a plain decoder's stages (decoder_graph_split.h).
#include "llm/decoder_graph_split.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>

#include "compiler/compiler.h"
#include "compiler/pass_manager.h"
#include "compiler/passes/passes.h"

namespace kiln::llm {

using ir::Graph;
using ir::Node;
using ir::Value;

Expected<std::unique_ptr<rt::GraphExecutor>> prepare_graph(const std::shared_ptr<ir::Graph>& graph,
                                                           const std::string& label) {
  compiler::PassContext ctx;
  KILN_RETURN_IF_ERROR(compiler::run_passes(*graph, ctx), "while compiling %s", label.c_str());
  KILN_RETURN_IF_ERROR(ir::verify(*graph), "while compiling %s", label.c_str());
  KILN_ASSIGN_OR_RETURN(compiler::PrepackSummary packed, compiler::prepack_weights(*graph, true),
                        "while compiling %s", label.c_str());
  (void)packed;
  return rt::GraphExecutor::create(graph);
}

namespace {

// Stages of values outside the cores: kFree (constants, ids, positions and what is computed
// from them alone: recomputed where needed), 0..layers, or kInside (depends on the past K/V
// or attention_mask: attention's own).
constexpr int kFree = -1;
constexpr int kInside = 1 << 20;

// What the matcher found for one layer.
struct Core {
  int64_t layer = 0;
  const Value* q = nullptr;      // [B, H, T, D] before any scale
  const Value* k_new = nullptr;  // [B, Hkv, T, D]
  const Value* v_new = nullptr;
  const Value* out = nullptr;    // A = softmax(q K^T * scale + mask) V, [B, H, T, D]
  const Node* softmax = nullptr;
  double scale = 1;
  std::set<const Node*> nodes;            // A's ancestors down to q, k_new, v_new
  std::vector<const Value*> graph_inputs;  // graph inputs the core reads (values or shapes)
};

std::optional<double> scalar_constant(const Value* v) {
  if (!v || !v->has_initializer()) return std::nullopt;
  const Tensor& t = *v->initializer();
  if (t.num_elements() != 1) return std::nullopt;
  if (t.dtype() == DataType::kFloat32) return static_cast<double>(*t.data<float>());
  if (t.dtype() == DataType::kFloat64) return *t.data<double>();
  return std::nullopt;
}

bool is_repeat(const std::string& op) {
  return op == "Unsqueeze" || op == "Expand" || op == "Reshape" || op == "Tile";
}

// Copies `nodes` of `src` into `dst` in src's order, by value name: inputs dst already has
// (its graph inputs, earlier copies) are used as they are, initializers are shared (not
// copied), and the outputs' types are left to the compiler's inference.
void copy_nodes(const Graph& src, const std::set<const Node*>& nodes, Graph& dst) {
  for (const auto& n : src.nodes()) {
    if (!nodes.count(n.get())) continue;
    std::vector<Value*> ins, outs;
    for (const Value* in : n->inputs()) {
      Value* mine = in ? dst.find_value(in->name()) : nullptr;
      if (in && !mine) {
        mine = dst.get_or_add_value(in->name());
        if (in->has_initializer()) {
          mine->share_initializer(*in);
          mine->type() = in->type();
        }
      }
      ins.push_back(mine);
    }
    for (const Value* out : n->outputs()) outs.push_back(dst.get_or_add_value(out->name()));
    dst.add_node(n->name(), n->op_type(), n->domain(), n->opset(), ins, outs)->attrs() = n->attrs();
  }
}

class Recogniser {
 public:
  Recogniser(Graph& g, std::string file) : g_(g), file_(std::move(file)) {
    for (const auto& n : g_.nodes())
      for (const Value* in : n->inputs())
        if (in) users_[in].push_back(n.get());
    for (const Value* in : g_.inputs()) graph_inputs_.insert(in);
  }

  Expected<RecognisedDecoder> run();

 private:
  template <typename... Args>
  Status refuse(int64_t layer, const char* fmt, Args... args) const {
    return unsupported("%s: layer %lld: %s (not recognised as attention with past; Kiln refuses rather than run it "
                       "differently)",
                       file_.c_str(), (long long)layer, str_format(fmt, args...).c_str());
  }
  // Users of v other than Shape (which read only its shape).
  std::vector<const Node*> data_users(const Value* v) const {
    std::vector<const Node*> out;
    auto it = users_.find(v);
    if (it != users_.end())
      for (const Node* n : it->second)
        if (n->op_type() != "Shape") out.push_back(n);
    return out;
  }
  // The constant factor a Mul/Div node applies to `data` (one of its inputs), if it is one.
  std::optional<double> scale_of(const Node* n, const Value* data) const {
    if (n->op_type() == "Mul") {
      if (n->input(0) == data) return scalar_constant(n->input(1));
      if (n->input(1) == data) return scalar_constant(n->input(0));
    }
    if (n->op_type() == "Div" && n->input(0) == data)
      if (auto c = scalar_constant(n->input(1)); c && *c != 0) return 1.0 / *c;
    return std::nullopt;
  }
  Expected<const Node*> past_concat(int64_t layer, const Value* past);
  Expected<Core> match(int64_t layer, const Value* past_k, const Value* past_v);
  Status collect_core(Core& core, const Value* past_k, const Value* past_v);
  Status probe_core(const Core& core, int64_t past, int64_t tokens);
  Status assign_stages();
  Expected<SegmentGraph> build_stage(int s);
  // The axis named after input_ids' sequence dim, or -1 where inference lost the name (the
  // model finds it on a probe: DecoderModel::find_token_axes).
  int token_axis(const Value* v) const;
  ir::TensorType batch_one(ir::TensorType t) const {
    for (Dim& d : t.shape.dims())
      if (!d.symbol.empty() && d.symbol == batch_sym_) d = Dim(1);
    return t;
  }

  Graph& g_;
  std::string file_;
  std::unordered_map<const Value*, std::vector<const Node*>> users_;
  std::set<const Value*> graph_inputs_;
  std::vector<Core> cores_;
  std::unordered_map<const Value*, int> stage_;
  std::unordered_map<const Value*, int64_t> attn_layer_;  // A_N -> N
  std::map<int, std::vector<const Value*>> carried_;      // stage -> values later stages read
  std::string batch_sym_, seq_sym_;
  int64_t heads_ = 0, kv_heads_ = 0, head_dim_ = 0, layers_ = 0;
};

Expected<const Node*> Recogniser::past_concat(int64_t layer, const Value* past) {
  for (const Node* n : data_users(past)) {
    if (n->op_type() != "Concat") continue;
    int64_t axis = n->attr_int("axis", 0);
    if (axis < 0) axis += 4;
    if (n->num_inputs() != 2 || n->input(0) != past || axis != 2)
      return refuse(layer, "Concat %s of %s is not Concat(past, new, axis=2) (inputs %d, axis %lld)",
                    n->label().c_str(), past->name().c_str(), n->num_inputs(), (long long)n->attr_int("axis", 0));
    return n;
  }
  return refuse(layer, "no Concat reads %s (the past is not concatenated with the new keys/values)",
                past->name().c_str());
}

Expected<Core> Recogniser::match(int64_t layer, const Value* past_k, const Value* past_v) {
  Core core;
  core.layer = layer;
  KILN_ASSIGN_OR_RETURN(const Node* concat_k, past_concat(layer, past_k));
  KILN_ASSIGN_OR_RETURN(const Node* concat_v, past_concat(layer, past_v));
  core.k_new = concat_k->input(1);
  core.v_new = concat_v->input(1);
  // 1. Keys: present.N.key -> repeat of KV heads / constant scales / one transpose of the last
  //    two axes -> the score MatMul's second input.
  const Value* cur = concat_k->output(0);
  int transposes = 0;
  const Node* scores = nullptr;
  while (!scores) {
    const auto users = data_users(cur);
    if (users.size() != 1)
      return refuse(layer, "%s feeds %zu nodes (besides Shape); expected one chain to the score MatMul",
                    cur->name().c_str(), users.size());
    const Node* n = users[0];
    const std::string& op = n->op_type();
    if (op == "MatMul") {
      if (n->input(1) != cur) return refuse(layer, "the keys reach %s as its first input (expected q @ K^T)", n->label().c_str());
      scores = n;
    } else if (is_repeat(op) && n->input(0) == cur) {
      cur = n->output(0);
    } else if (op == "Transpose" && n->attr_ints("perm") == std::vector<int64_t>{0, 1, 3, 2}) {
      ++transposes;
      cur = n->output(0);
    } else if (auto s = scale_of(n, cur)) {
      core.scale *= *s;
      cur = n->output(0);
    } else {
      return refuse(layer, "node %s on the key path is not a repeat of the KV heads, a transpose of the last two "
                    "axes, a constant scale or the score MatMul", n->label().c_str());
    }
  }
  if (transposes != 1)
    return refuse(layer, "the keys are transposed %d times on the way to %s (expected once: q @ K^T)", transposes,
                  scores->label().c_str());
  // 2. Queries: the score MatMul's first input, constant scales peeled off.
  core.q = scores->input(0);
  while (const Node* p = core.q->producer()) {
    const Value* data = p->op_type() == "Mul" && scalar_constant(p->input(0)) ? p->input(1) : p->input(0);
    auto s = scale_of(p, data);
    if (!s) break;
    core.scale *= *s;
    core.q = data;
  }
  // 3. Scores -> constant scales, mask Add / Where -> Softmax over the last axis.
  cur = scores->output(0);
  while (!core.softmax) {
    const auto users = data_users(cur);
    if (users.size() != 1)
      return refuse(layer, "the scores %s feed %zu nodes; expected one chain to the Softmax", cur->name().c_str(),
                    users.size());
    const Node* n = users[0];
    const std::string& op = n->op_type();
    if (op == "Softmax") {
      int64_t axis = n->attr_int("axis", n->opset() >= 13 ? -1 : 1);
      if (axis < 0) axis += 4;
      if (axis != 3)
        return refuse(layer, "Softmax %s normalises over axis %lld of the scores [B, H, T, past+T], not the keys' "
                      "axis 3", n->label().c_str(), (long long)axis);
      core.softmax = n;
    } else if (auto s = scale_of(n, cur)) {
      core.scale *= *s;
    } else if (op == "Add" || (op == "Where" && (n->input(1) == cur || n->input(2) == cur))) {
      // The mask: what it is made of is checked by collect_core and the probe.
    } else {
      return refuse(layer, "node %s between the score MatMul and the Softmax is not a constant scale, a mask Add or "
                    "a Where", n->label().c_str());
    }
    cur = n->output(0);
  }
  // 4. Probabilities @ the repeated values.
  const auto users = data_users(cur);
  if (users.size() != 1 || users[0]->op_type() != "MatMul" || users[0]->input(0) != cur)
    return refuse(layer, "the output of Softmax %s is not the first input of one MatMul with the values",
                  core.softmax->label().c_str());
  const Node* pv = users[0];
  const Value* vside = pv->input(1);
  while (vside != concat_v->output(0)) {
    const Node* p = vside->producer();
    if (!p || !is_repeat(p->op_type()))
      return refuse(layer, "the values reach %s through %s, not a repeat of %s", pv->label().c_str(),
                    p ? p->label().c_str() : vside->name().c_str(), concat_v->output(0)->name().c_str());
    vside = p->input(0);
  }
  core.out = pv->output(0);
  KILN_RETURN_IF_ERROR(collect_core(core, past_k, past_v));
  return core;
}

Status Recogniser::collect_core(Core& core, const Value* past_k, const Value* past_v) {
  // A's ancestors down to q, k_new, v_new. A graph input read for its values must be this
  // layer's past or the mask's sources; anything may be read for its shape.
  std::map<const Node*, bool> seen;  // node -> reached through values (not only through Shape)
  std::vector<std::pair<const Value*, bool>> stack{{core.out, true}};
  std::set<const Value*> inputs;
  while (!stack.empty()) {
    const auto [v, by_value] = stack.back();
    stack.pop_back();
    if (v == core.q || v == core.k_new || v == core.v_new) continue;
    if (graph_inputs_.count(v)) {
      inputs.insert(v);
      const std::string& name = v->name();
      if (by_value && v != past_k && v != past_v && name != "attention_mask" && name != "position_ids")
        return refuse(core.layer, "the attention core reads the values of input %s (the mask may depend only on "
                      "attention_mask, position_ids and shapes)", name.c_str());
      continue;
    }
    const Node* n = v->producer();
    if (!n) continue;  // an initializer
    auto it = seen.find(n);
    if (it != seen.end() && (it->second || !by_value)) continue;
    seen[n] = by_value || (it != seen.end() && it->second);
    core.nodes.insert(n);
    for (const Value* in : n->inputs())
      if (in) stack.push_back({in, by_value && n->op_type() != "Shape"});
  }
  core.graph_inputs.assign(inputs.begin(), inputs.end());
  return ok_status();
}

// Runs the core alone on random q, k, v and past against causal attention computed here.
Status Recogniser::probe_core(const Core& core, int64_t past, int64_t tokens) {
  auto g = std::make_shared<Graph>(str_format("layer %lld attention probe", (long long)core.layer));
  g->opset_imports() = g_.opset_imports();
  const int64_t h = heads_, kvh = kv_heads_, d = head_dim_, total = past + tokens;
  std::vector<std::pair<const Value*, std::vector<int64_t>>> feeds = {
      {core.q, {1, h, tokens, d}}, {core.k_new, {1, kvh, tokens, d}}, {core.v_new, {1, kvh, tokens, d}}};
  for (const Value* in : core.graph_inputs) {
    const std::string& name = in->name();
    if (name.rfind("past_key_values.", 0) == 0)
      feeds.push_back({in, {1, kvh, past, d}});
    else if (name == "attention_mask")
      feeds.push_back({in, {1, total}});
    else if (name == "input_ids" || name == "position_ids")
      feeds.push_back({in, {1, tokens}});
    else
      return refuse(core.layer, "the attention core reads the shape of input %s", name.c_str());
  }
  for (const auto& [v, dims] : feeds) {
    Value* in = g->get_or_add_value(v->name());
    in->type().dtype = v->dtype() == DataType::kUndefined ? DataType::kFloat32 : v->dtype();
    in->type().shape = Shape::from_static(dims);
    g->inputs().push_back(in);
  }
  copy_nodes(g_, core.nodes, *g);
  g->outputs().push_back(g->find_value(core.out->name()));
  KILN_ASSIGN_OR_RETURN(auto exec, prepare_graph(g, g->name()), "%s: layer %lld", file_.c_str(), (long long)core.layer);
  // Data: random q/k/v/past, an all-ones mask, positions past.., ids 0.
  std::mt19937 rng(static_cast<uint32_t>(29 + core.layer));
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> floats(feeds.size());
  std::vector<std::vector<int64_t>> ints(feeds.size());
  rt::ExecutionState state;
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Value* in = g->inputs()[i];
    const int64_t n = kiln::num_elements(feeds[i].second);
    if (in->dtype() == DataType::kFloat32) {
      floats[i].resize(n);
      for (float& x : floats[i]) x = normal(rng);
      KILN_RETURN_IF_ERROR(exec->bind_input(state, i, in->dtype(), feeds[i].second, floats[i].data()));
    } else if (in->dtype() == DataType::kInt64) {
      ints[i].assign(n, in->name() == "attention_mask" ? 1 : 0);
      if (in->name() == "position_ids")
        for (int64_t t = 0; t < n; ++t) ints[i][t] = past + t;
      KILN_RETURN_IF_ERROR(exec->bind_input(state, i, in->dtype(), feeds[i].second, ints[i].data()));
    } else {
      return refuse(core.layer, "input %s of the attention core is %s (expected float32 or int64)", in->name().c_str(),
                    dtype_name(in->dtype()));
    }
  }
  auto past_of = [&](const char* kind) -> const float* {
    for (size_t i = 0; i < feeds.size(); ++i)
      if (feeds[i].first->name() == str_format("past_key_values.%lld.%s", (long long)core.layer, kind))
        return floats[i].data();
    return nullptr;
  };
  const float *q = floats[0].data(), *kn = floats[1].data(), *vn = floats[2].data();
  const float *pk = past_of("key"), *pv = past_of("value");
  if (past > 0 && (!pk || !pv)) return internal_error("layer %lld: the probe has no past", (long long)core.layer);
  Status st = exec->run_bound(state);
  std::vector<float> got;
  if (st.ok()) {
    const RuntimeValue& out = exec->output(state, 0);
    if (!out.is_tensor() || out.tensor().num_elements() != h * tokens * d)
      st = refuse(core.layer, "the attention output %s is %s, expected [1, %lld, %lld, %lld]", core.out->name().c_str(),
                  out.description().c_str(), (long long)h, (long long)tokens, (long long)d);
    else
      got.assign(out.tensor().data<float>(), out.tensor().data<float>() + h * tokens * d);
  }
  exec->end_run(state);
  KILN_RETURN_IF_ERROR(st, "while probing the attention of layer %lld", (long long)core.layer);
  // Causal attention, query head hh reading KV head hh / (h / kvh), scale 1/sqrt(d).
  auto key = [&](const float* p, const float* n, int64_t g2, int64_t j) {
    return j < past ? p + (g2 * past + j) * d : n + (g2 * tokens + (j - past)) * d;
  };
  double worst = 0, largest = 0;
  for (int64_t hh = 0; hh < h; ++hh)
    for (int64_t i = 0; i < tokens; ++i) {
      const int64_t g2 = hh / (h / kvh), visible = past + i + 1;
      std::vector<double> s(visible);
      double m = -1e300, sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        const float* kj = key(pk, kn, g2, j);
        double dot = 0;
        for (int64_t x = 0; x < d; ++x) dot += double(q[(hh * tokens + i) * d + x]) * kj[x];
        s[j] = dot / std::sqrt(double(d));
        m = std::max(m, s[j]);
      }
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int64_t x = 0; x < d; ++x) {
        double acc = 0;
        for (int64_t j = 0; j < visible; ++j) acc += s[j] / sum * key(pv, vn, g2, j)[x];
        worst = std::max(worst, std::abs(acc - got[(hh * tokens + i) * d + x]));
        largest = std::max(largest, std::abs(acc));
      }
    }
  if (worst > 1e-4 * std::max(largest, 1e-3))
    return refuse(core.layer, "on a probe of %lld past and %lld new tokens, the core ending in %s differs from causal "
                  "attention with scale 1/sqrt(%lld) and query head h reading KV head h / %lld by %.3g (largest "
                  "output %.3g): a mask that is not causal, or another head mapping, which the paged attention "
                  "kernel does not compute", (long long)past, (long long)tokens, core.softmax->label().c_str(),
                  (long long)d, (long long)(h / kvh), worst, largest);
  return ok_status();
}

int Recogniser::token_axis(const Value* v) const {
  int axis = -1, found = 0;
  const Shape& s = v->shape();
  for (int i = 0; s.has_rank() && i < s.rank(); ++i)
    if (s[i].symbol == seq_sym_) {
      axis = i;
      ++found;
    }
  return found == 1 ? axis : -1;
}

Status Recogniser::assign_stages() {
  std::set<const Node*> core_nodes;
  for (const Core& c : cores_) {
    core_nodes.insert(c.nodes.begin(), c.nodes.end());
    attn_layer_[c.out] = c.layer;
  }
  for (const Value* in : g_.inputs())
    stage_[in] = (in->name() == "input_ids" || in->name() == "position_ids") ? kFree : kInside;
  for (const auto& n : g_.nodes()) {
    int s = kFree;
    for (const Value* in : n->inputs()) {
      if (!in) continue;
      auto it = stage_.find(in);
      const int si = it == stage_.end() ? kFree : it->second;  // initializers are free
      if (si == kInside && !core_nodes.count(n.get()) && n->op_type() != "Shape")
        return unsupported("%s: node %s outside the attention cores reads %s, which depends on the past keys/values "
                           "or attention_mask: it cannot run over a flat batch of tokens",
                           file_.c_str(), n->label().c_str(), in->name().c_str());
      // A Shape of an inside value is a shape: only cores use those (checked when a stage reads one).
      s = std::max(s, n->op_type() == "Shape" && si == kInside ? kInside : si);
    }
    for (const Value* out : n->outputs()) {
      auto a = attn_layer_.find(out);
      stage_[out] = a != attn_layer_.end() ? static_cast<int>(a->second) + 1 : s;
    }
  }
  return ok_status();
}

Expected<SegmentGraph> Recogniser::build_stage(int s) {
  SegmentGraph seg;
  seg.label = str_format("%s stage %d", file_.c_str(), s);
  // Outputs: the next core's q/k/v (transposed token-major) or the logits, and carried values.
  struct Out {
    const Value* v;
    std::string key;
    bool transpose;
  };
  std::vector<Out> outs;
  if (s < layers_) {
    const Core& c = cores_[s];
    outs = {{c.q, str_format("q.%d", s), true}, {c.k_new, str_format("k.%d", s), true},
            {c.v_new, str_format("v.%d", s), true}};
  } else {
    const Value* logits = g_.find_value("logits");
    if (!logits || std::find(g_.outputs().begin(), g_.outputs().end(), logits) == g_.outputs().end())
      return unsupported("%s: no graph output 'logits'", file_.c_str());
    outs = {{logits, "logits", false}};
  }
  for (const Value* v : carried_[s])  // several later stages may read the same value
    if (std::none_of(outs.begin(), outs.end(), [&](const auto& o) { return o.v == v; }))
      outs.push_back({v, v->name(), false});
  // 1. The nodes: backward from the outputs, to values of earlier stages (inputs).
  std::set<const Node*> nodes;
  std::vector<const Value*> inputs;  // in discovery order
  std::set<const Value*> seen;
  std::vector<const Value*> stack;
  for (const Out& o : outs) stack.push_back(o.v);
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (!seen.insert(v).second) continue;
    auto a = attn_layer_.find(v);
    const int st = stage_.count(v) ? stage_.at(v) : kFree;
    if (a != attn_layer_.end() || graph_inputs_.count(v)) {
      if (graph_inputs_.count(v) && st != kFree)
        return unsupported("%s: stage %d (outside attention) reads input %s", file_.c_str(), s, v->name().c_str());
      if (a != attn_layer_.end() && a->second != s - 1) {
        carried_[a->second + 1].push_back(v);
        inputs.push_back(v);
      } else {
        inputs.push_back(v);
      }
      continue;
    }
    const Node* n = v->producer();
    if (!n) continue;  // an initializer
    if (st == kInside)
      return unsupported("%s: stage %d needs %s, which the attention cores compute (node %s)", file_.c_str(), s,
                         v->name().c_str(), n->label().c_str());
    if (st != kFree && st < s) {
      carried_[st].push_back(v);
      inputs.push_back(v);
      continue;
    }
    nodes.insert(n);
    for (const Value* in : n->inputs())
      if (in) stack.push_back(in);
  }
  // 2. The graph: inputs, the nodes in the source's order, the outputs.
  auto g = std::make_shared<Graph>(seg.label);
  g->opset_imports() = g_.opset_imports();
  auto add_transpose = [&](Value* from, Value* to) {
    g->add_node(to->name() + "/token_major", "Transpose", "", g_.opset_imports().count("") ? g_.opset_imports().at("") : 14,
                {from}, {to})
        ->attrs()["perm"] = ir::Attribute::from_ints({0, 2, 1, 3});
  };
  for (const Value* v : inputs) {
    auto a = attn_layer_.find(v);
    if (a != attn_layer_.end() && a->second == s - 1) {
      const std::string key = str_format("attn.%lld", (long long)a->second);
      Value* in = g->get_or_add_value(key);
      in->type().dtype = DataType::kFloat32;
      in->type().shape = Shape({Dim(1), Dim::symbolic(seq_sym_), Dim(heads_), Dim(head_dim_)});
      g->inputs().push_back(in);
      add_transpose(in, g->get_or_add_value(v->name()));
      seg.inputs.push_back({key, key, {1, -1, heads_, head_dim_}, 1});
      continue;
    }
    Value* in = g->get_or_add_value(v->name());
    in->type() = batch_one(v->type());
    g->inputs().push_back(in);
    if (graph_inputs_.count(v))
      seg.inputs.push_back({v->name(), v->name(), {1, -1}, 1});
    else
      seg.inputs.push_back({v->name(), v->name(), {}, 0});
  }
  copy_nodes(g_, nodes, *g);
  for (const Out& o : outs) {
    Value* v = g->find_value(o.v->name());
    if (!v) return internal_error("%s: output %s was not built", seg.label.c_str(), o.v->name().c_str());
    // Where the model itself made q/k/v head-major from token-major ([B, T, H, D] ->
    // Transpose(0, 2, 1, 3)), the stage outputs what that transpose reads: no transpose there
    // and back.
    const Node* made = o.transpose ? o.v->producer() : nullptr;
    Value* token_major = made && made->op_type() == "Transpose" &&
                                 made->attr_ints("perm") == std::vector<int64_t>{0, 2, 1, 3}
                             ? g->find_value(made->input(0)->name())
                             : nullptr;
    if (token_major) {
      g->outputs().push_back(token_major);
      seg.outputs.push_back({token_major->name(), o.key, {}, 1});
    } else if (o.transpose) {
      Value* t = g->get_or_add_value(o.key);
      add_transpose(v, t);
      g->outputs().push_back(t);
      seg.outputs.push_back({o.key, o.key, {}, 1});
    } else {
      g->outputs().push_back(v);
      seg.outputs.push_back({o.key, o.key, {}, token_axis(o.v)});
    }
  }
  seg.graph = std::move(g);
  return seg;
}

Expected<RecognisedDecoder> Recogniser::run() {
  const Value* ids = g_.find_value("input_ids");
  if (!ids || !graph_inputs_.count(ids) || ids->shape().rank() != 2 || ids->shape()[0].symbol.empty() ||
      ids->shape()[1].symbol.empty())
    return unsupported("%s: no input input_ids [batch, sequence] with symbolic dims: not a past-KV decoder",
                       file_.c_str());
  batch_sym_ = ids->shape()[0].symbol;
  seq_sym_ = ids->shape()[1].symbol;
  for (int64_t layer = 0;; ++layer) {
    const Value* pk = g_.find_value(str_format("past_key_values.%lld.key", (long long)layer));
    const Value* pv = g_.find_value(str_format("past_key_values.%lld.value", (long long)layer));
    if (!pk || !pv) break;
    const Shape& ps = pk->shape();
    if (ps.rank() != 4 || !ps[1].is_static() || !ps[3].is_static())
      return refuse(layer, "%s is %s, expected [batch, kv_heads, past, head_dim] with kv_heads and head_dim fixed",
                    pk->name().c_str(), pk->type().to_string().c_str());
    KILN_ASSIGN_OR_RETURN(Core core, match(layer, pk, pv));
    const Shape& qs = core.q->shape();
    if (qs.rank() != 4 || !qs[1].is_static() || qs[3].value != ps[3].value)
      return refuse(layer, "the queries %s are %s, expected [batch, heads, T, %lld]", core.q->name().c_str(),
                    core.q->type().to_string().c_str(), (long long)ps[3].value);
    if (layer == 0) {
      kv_heads_ = ps[1].value;
      head_dim_ = ps[3].value;
      heads_ = qs[1].value;
      if (heads_ % kv_heads_)
        return refuse(layer, "%lld query heads are not a multiple of %lld KV heads", (long long)heads_,
                      (long long)kv_heads_);
    } else if (ps[1].value != kv_heads_ || ps[3].value != head_dim_ || qs[1].value != heads_) {
      return refuse(layer, "heads, KV heads or head_dim differ from layer 0's");
    }
    const double expected = 1.0 / std::sqrt(static_cast<double>(head_dim_));
    if (std::abs(core.scale - expected) > 1e-6 * expected)
      return refuse(layer, "the attention scale is %.9g, not 1/sqrt(head_dim) = %.9g (what the paged attention "
                    "kernel computes)", core.scale, expected);
    cores_.push_back(std::move(core));
  }
  layers_ = static_cast<int64_t>(cores_.size());
  if (layers_ == 0) return unsupported("%s: no input past_key_values.0.key/value: not a past-KV decoder", file_.c_str());
  for (const Core& c : cores_) {
    KILN_RETURN_IF_ERROR(probe_core(c, 4, 3));
    KILN_RETURN_IF_ERROR(probe_core(c, 0, 3));
  }
  KILN_RETURN_IF_ERROR(assign_stages());
  RecognisedDecoder out;
  out.layers = layers_;
  out.heads = heads_;
  out.kv_heads = kv_heads_;
  out.head_dim = head_dim_;
  out.scale = cores_[0].scale;
  const Value* logits = g_.find_value("logits");
  if (!logits || logits->shape().rank() < 1 || !logits->shape()[logits->shape().rank() - 1].is_static())
    return unsupported("%s: no output logits [.., vocab] with a fixed vocabulary", file_.c_str());
  out.vocab = logits->shape()[logits->shape().rank() - 1].value;
  // Last stage first: later stages tell earlier ones which values to carry.
  out.stages.resize(layers_ + 1);
  for (int s = static_cast<int>(layers_); s >= 0; --s) {
    KILN_ASSIGN_OR_RETURN(out.stages[s], build_stage(s));
  }
  return out;
}

}  // namespace

Expected<RecognisedDecoder> recognise_decoder(ir::Graph& graph, const std::string& file) {
  // Constants as initializers (the scales are read from them) and the exporters' run-time
  // shape computations followed by name (symbolic_shape_folding.cc), so that q's shape reads
  // [batch, heads, seq, head_dim] and the carried values' sequence axis is known; the dead
  // shape computations go.
  compiler::PassRegistry prepare, infer;
  for (compiler::PassInfo p : {compiler::constant_node_folding_pass(), compiler::shape_inference_pass(),
                               compiler::constant_folding_pass(), compiler::symbolic_shape_folding_pass()})
    KILN_RETURN_IF_ERROR(prepare.add(std::move(p)));
  for (compiler::PassInfo p : {compiler::shape_inference_pass(), compiler::dead_node_removal_pass()})
    KILN_RETURN_IF_ERROR(infer.add(std::move(p)));
  compiler::PassContext ctx;
  KILN_RETURN_IF_ERROR(compiler::run_passes(graph, ctx, prepare), "while preparing %s", file.c_str());
  KILN_RETURN_IF_ERROR(compiler::run_passes(graph, ctx, infer), "while preparing %s", file.c_str());
  return Recogniser(graph, file).run();
}

}  // namespace kiln::llm
