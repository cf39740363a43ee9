// Kiln's side of bench/llm/llm_bench.py: N sequences of a fixed prompt length decoded
// greedily for a fixed number of new tokens, either
//   --mode engine: on the LLM engine (src/llm: paged KV cache, one batched step for all N), or
//   --mode plain:  the past-key-values decoder.onnx run through Kiln's graph executor as any
//                  ONNX model, batch N, the K/V of every step fed back as the next step's
//                  past (contiguous, concatenated inside the graph): no paged cache.
// Each mode first runs the same workload once untimed (kernels prepared), then timed.
// Prints one JSON line: {"mode", "concurrency", "tokens", "seconds", "decode_tokens_per_s", "first"
// (the first sequence's greedy tokens, which the two modes must agree on), ...}.
//   --mode latency: Kiln's side of bench/llm/ort_decode_compare.py, a long-lived process: the
//                  engine (batch 1) is made once, then each stdin line "decode K ID,ID,..."
//                  runs that prompt greedily for K + 2 tokens and answers one JSON line with the
//                  time of each of its last K steps, pure decode steps at contexts P+2..P+K+1
//                  (the first step is the prefill and the first decode): {"prefill_ms",
//                  "step_ms": [...], "tokens": [...]}. "quit" ends it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/compiler.h"
#include "core/parallel.h"
#include "llm/engine.h"
#include "runtime/graph_executor.h"

namespace kiln::llm {
namespace {

struct Args {
  std::string model, mode = "engine";
  int64_t concurrency = 1, prompt = 32, new_tokens = 32;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string json_list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::vector<std::vector<int64_t>> prompts(const Args& a, int64_t vocab) {
  std::mt19937_64 rng(5);
  std::vector<std::vector<int64_t>> p(a.concurrency, std::vector<int64_t>(a.prompt));
  for (auto& v : p)
    for (auto& t : v) t = static_cast<int64_t>(rng() % vocab);
  return p;
}

int run_engine(const Args& a) {
  auto model = DecoderModel::load(a.model);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  const int64_t vocab = (*model)->config().vocab;
  EngineOptions o;
  o.max_batch = a.concurrency;
  auto engine = Engine::create(std::move(*model), o);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().to_string().c_str()), 1;
  Engine& e = **engine;
  double seconds = 0, decode_ms = 0, prefill_ms = 0;
  int64_t decode_tokens = 0;
  std::vector<int64_t> first;  // the first sequence's tokens, to check against --mode plain
  for (int round = 0; round < 2; ++round) {
    const EngineStats before = e.stats();
    int64_t first_id = -1;
    for (const auto& p : prompts(a, vocab)) {
      auto id = e.add_request({p, a.new_tokens, {}, {}});
      if (!id.ok()) return 1;
      if (first_id < 0) first_id = *id;
    }
    const double t0 = now_s();
    Status st = e.run_to_completion();
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
    seconds = now_s() - t0;
    const EngineStats after = e.stats();
    decode_ms = after.decode_ms - before.decode_ms;
    prefill_ms = after.prefill_ms - before.prefill_ms;
    decode_tokens = after.decode_tokens - before.decode_tokens;
    first = e.request(first_id).tokens;
  }
  std::printf("{\"mode\": \"engine\", \"concurrency\": %lld, \"tokens\": %lld, \"seconds\": %.6f, "
              "\"prefill_ms\": %.3f, \"decode_tokens\": %lld, \"decode_tokens_per_s\": %.2f, \"first\": %s}\n",
              (long long)a.concurrency, (long long)(a.concurrency * a.new_tokens), seconds, prefill_ms,
              (long long)decode_tokens, decode_tokens / (decode_ms / 1000.0), json_list(first).c_str());
  return 0;
}

int run_plain(const Args& a) {
  auto compiled = compiler::compile_onnx_file(a.model + "/decoder.onnx", {});
  if (!compiled.ok()) return std::fprintf(stderr, "%s\n", compiled.status().to_string().c_str()), 1;
  auto exec = rt::GraphExecutor::create(compiled->graph);
  if (!exec.ok()) return std::fprintf(stderr, "%s\n", exec.status().to_string().c_str()), 1;
  auto config = DecoderModel::load(a.model);  // for the sizes only
  if (!config.ok()) return 1;
  const DecoderConfig c = (*config)->config();
  const int64_t n = a.concurrency;
  const auto ps = prompts(a, c.vocab);
  double seconds = 0, decode_s = 0;
  std::vector<int64_t> first;
  for (int round = 0; round < 2; ++round) {
    first.clear();
    std::vector<Tensor> past(2 * c.layers);
    for (auto& t : past) t = *Tensor::allocate(DataType::kFloat32, {n, c.kv_heads, 0, c.head_dim});
    int64_t done = 0;
    std::vector<int64_t> next(n);
    const double t0 = now_s();
    double t_decode = 0;
    for (int64_t step = 0; step < a.new_tokens; ++step) {
      const int64_t t = step == 0 ? a.prompt : 1;
      Tensor ids = *Tensor::allocate(DataType::kInt64, {n, t});
      Tensor pos = *Tensor::allocate(DataType::kInt64, {n, t});
      Tensor mask = *Tensor::allocate(DataType::kInt64, {n, done + t});
      for (int64_t b = 0; b < n; ++b) {
        for (int64_t i = 0; i < t; ++i) {
          ids.data<int64_t>()[b * t + i] = step == 0 ? ps[b][i] : next[b];
          pos.data<int64_t>()[b * t + i] = done + i;
        }
        for (int64_t i = 0; i < done + t; ++i) mask.data<int64_t>()[b * (done + t) + i] = 1;
      }
      std::vector<rt::NamedValue> inputs = {{"input_ids", ids}, {"attention_mask", mask}, {"position_ids", pos}};
      for (int64_t l = 0; l < c.layers; ++l) {
        inputs.push_back({"past_key_values." + std::to_string(l) + ".key", past[2 * l]});
        inputs.push_back({"past_key_values." + std::to_string(l) + ".value", past[2 * l + 1]});
      }
      std::vector<RuntimeValue> outputs;
      Status st = (*exec)->run(inputs, &outputs);
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
      const Tensor& logits = outputs[0].tensor();
      for (int64_t b = 0; b < n; ++b) {
        const float* row = logits.data<float>() + ((b + 1) * t - 1) * c.vocab;
        next[b] = std::max_element(row, row + c.vocab) - row;
      }
      first.push_back(next[0]);
      for (size_t i = 0; i < past.size(); ++i) past[i] = outputs[i + 1].tensor();
      done += t;
      if (step == 0) t_decode = now_s();
    }
    seconds = now_s() - t0;
    decode_s = now_s() - t_decode;
  }
  const int64_t decode_tokens = n * (a.new_tokens - 1);
  std::printf("{\"mode\": \"plain\", \"concurrency\": %lld, \"tokens\": %lld, \"seconds\": %.6f, "
              "\"decode_tokens\": %lld, \"decode_tokens_per_s\": %.2f, \"first\": %s}\n",
              (long long)n, (long long)(n * a.new_tokens), seconds, (long long)decode_tokens, decode_tokens / decode_s,
              json_list(first).c_str());
  return 0;
}

// "1,2,3" -> ids; empty on anything else.
std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t used = 0;
    const size_t comma = std::min(text.find(',', pos), text.size());
    try {
      ids.push_back(std::stoll(text.substr(pos, comma - pos), &used));
    } catch (const std::exception&) {
      return {};
    }
    if (used != comma - pos) return {};
    pos = comma + 1;
  }
  return ids;
}

int run_latency(const Args& a) {
  auto model = DecoderModel::load(a.model);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  EngineOptions o;
  o.max_batch = 1;
  auto engine = Engine::create(std::move(*model), o);
  if (!engine.ok()) return std::fprintf(stderr, "%s\n", engine.status().to_string().c_str()), 1;
  Engine& e = **engine;
  std::printf("{\"ready\": true, \"model\": \"%s\"}\n", e.config().name.c_str());
  std::fflush(stdout);
  char line[1 << 16];
  while (std::fgets(line, sizeof(line), stdin)) {
    char command[16] = {0}, ids_text[sizeof(line)] = {0};
    long long k = 0;
    if (std::sscanf(line, "%15s", command) == 1 && std::string(command) == "quit") break;
    if (std::sscanf(line, "%15s %lld %65535s", command, &k, ids_text) != 3 || std::string(command) != "decode" ||
        k < 1) {
      std::printf("{\"error\": \"bad command (decode K ID,ID,... | quit)\"}\n");
      return 1;
    }
    const std::vector<int64_t> prompt = parse_ids(ids_text);
    auto id = e.add_request({prompt, k + 2, {}, {}});
    if (!id.ok()) {
      std::printf("{\"error\": \"%s\"}\n", id.status().message().c_str());
      return 1;
    }
    std::vector<double> step_ms;
    double prefill_ms = 0;
    while (!e.idle()) {
      const double t0 = now_s();
      Status st = e.step();
      const double ms = (now_s() - t0) * 1e3;
      if (!st.ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
      if (prefill_ms == 0) prefill_ms = ms;
      else step_ms.push_back(ms);
    }
    std::string times = "[";
    for (size_t i = 0; i < step_ms.size(); ++i) times += (i ? ", " : "") + std::to_string(step_ms[i]);
    std::printf("{\"context\": %zu, \"prefill_ms\": %.3f, \"step_ms\": %s], \"tokens\": %s}\n", prompt.size(),
                prefill_ms, times.c_str(), json_list(e.request(*id).tokens).c_str());
    std::fflush(stdout);
    if (Status st = e.forget(*id); !st.ok()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace kiln::llm

int main(int argc, char** argv) {
  kiln::llm::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) std::exit(2);
      return argv[++i];
    };
    if (arg == "--mode") a.mode = value();
    else if (arg == "--concurrency") a.concurrency = std::stoll(value());
    else if (arg == "--prompt") a.prompt = std::stoll(value());
    else if (arg == "--new-tokens") a.new_tokens = std::stoll(value());
    else if (a.model.empty()) a.model = arg;
    else return std::fprintf(stderr, "unknown argument %s\n", arg.c_str()), 2;
  }
  if (a.model.empty() || a.concurrency < 1 || a.prompt < 1 || a.new_tokens < 2) {
    std::fprintf(stderr, "usage: llm_bench MODEL_DIR [--mode engine|plain|latency] [--concurrency N] [--prompt P] [--new-tokens M>=2]\n");
    return 2;
  }
  if (a.mode == "latency") return kiln::llm::run_latency(a);
  return a.mode == "plain" ? kiln::llm::run_plain(a) : kiln::llm::run_engine(a);
}
