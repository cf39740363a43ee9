// `kiln llm-bench MODEL_DIR`: the LLM engine (src/llm) on a seeded mixed-length workload, against
// issue 29's fixed-maximum-length static baseline, in one invocation with the configurations
// alternated so their ratios are measured side by side on the same (possibly busy) machine:
//
//   fixed           every request alone (no batching across sessions), its prefill padded to
//                   2048 rows, its KV one contiguous region of 2048 token slots (one block of
//                   2048 tokens per session), its attention over all 2048 slots at every step
//                   (the padded ones at weight 0), as one static graph of length 2048 runs it;
//   fixed-buckets   the same with the prefill and the attention padded to the bucket of the
//                   context, 128/512/1024/2048 (a static graph per bucket): the buckets alone;
//   paged-nobuckets paged KV (blocks of --block-size), continuous batching of up to --batch
//                   sessions, prefill padded to 2048;
//   paged           paged KV, continuous batching, prefill buckets (the engine's default);
//   paged-chunked   with --step-tokens N: paged, continuous batching, and chunked prefill under
//                   a budget of N rows per step beside the decode rows (vLLM's scheduling);
//   paged-bf16kv    with --kv-dtype both: paged with its KV pool in bf16 (twice the blocks in
//                   --kv-memory), beside the fp32 ones.
//
// Every configuration runs the same requests greedily on a fresh engine (so no configuration
// reuses another's cached prefixes) and those of one KV element type must produce the same
// tokens (bf16 K/V may turn a near tie: paged-bf16kv's agreement with paged is counted instead). Requests arrive all at
// once, or with --arrival-rate as a seeded Poisson process (each joins the engine between steps
// once its time has come). Printed per configuration: tokens/s (generated tokens / wall time),
// the sessions that fit in --kv-memory at their final lengths, fragmentation averaged over
// decode steps, and the latencies a user sees: time to first token (from the request's arrival)
// and time per output token after the first, p50 and p99 over the requests of every run.
// The fixed modes attend over their padded lengths (llm::EngineOptions::attention_buckets) with
// the paged modes' kernel, so the two differ in what they compute, not in how well.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "llm/engine.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

constexpr int64_t kFixedLength = 2048;  // the baseline's padded length (the largest bucket)

struct LlmBenchArgs {
  std::string model, mode = "both";
  int64_t requests = 16, prompt_min = 16, prompt_max = 1500, output_min = 16, output_max = 256;
  int64_t kv_memory_mib = 256, batch = 16, block_size = 16, repeat = 1;
  int64_t step_tokens = 0;  // paged-chunked's budget of rows per step; 0: no such configuration
  std::string kv_dtype = "fp32";  // fp32, bf16 (every configuration) or both (adds paged-bf16kv)
  uint64_t seed = 1;
  double arrival_rate = 0;  // requests per second; 0: all arrive at the start
  int threads = 0;
  const CLI::Option* threads_opt = nullptr;
  bool json = false;
};

struct Workload {
  std::vector<llm::Request> requests;
  std::vector<double> arrival_s;  // per request, from the start of a run, ascending
  int64_t prompt_tokens = 0, output_tokens = 0, capped = 0;
};

// Prompt and output lengths uniform in the given ranges, token ids uniform in the vocabulary,
// all from `seed`. A prompt whose context would exceed the model's is shortened to fit
// (counted in `capped`): the 1500-token prompts do not fit a 1024-token model.
Workload make_workload(const LlmBenchArgs& a, const llm::DecoderConfig& c) {
  std::mt19937_64 rng(a.seed);
  auto uniform = [&rng](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % (hi - lo + 1)); };
  Workload w;
  for (int64_t i = 0; i < a.requests; ++i) {
    const int64_t out = std::min(uniform(a.output_min, a.output_max), c.context);
    int64_t prompt = uniform(a.prompt_min, a.prompt_max);
    if (prompt + out - 1 > c.context) {
      prompt = std::max<int64_t>(1, c.context - out + 1);
      ++w.capped;
    }
    llm::Request r;
    r.prompt.resize(prompt);
    for (int64_t& t : r.prompt) t = static_cast<int64_t>(rng() % c.vocab);
    r.max_new_tokens = out;
    w.prompt_tokens += prompt;
    w.output_tokens += out;
    w.requests.push_back(std::move(r));
  }
  // Poisson arrivals: exponential gaps at the rate, from a stream of their own so that the
  // lengths and ids of a seed stay the same with or without a rate.
  std::mt19937_64 arrivals(a.seed ^ 0x9e3779b97f4a7c15ull);
  double t = 0;
  for (int64_t i = 0; i < a.requests; ++i) {
    if (a.arrival_rate > 0) t += std::exponential_distribution<double>(a.arrival_rate)(arrivals);
    w.arrival_s.push_back(t);
  }
  return w;
}

// Nearest-rank percentile (p in (0, 100]) of `v`; 0 for none.
double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

struct Config {
  const char* name;
  bool paged, buckets, chunked;
  bool bf16kv = false;  // only with --kv-dtype both: the bf16 twin of paged
};
constexpr Config kConfigs[] = {{"fixed", false, false, false},
                               {"fixed-buckets", false, true, false},
                               {"paged-nobuckets", true, false, false},
                               {"paged", true, true, false},
                               {"paged-bf16kv", true, true, false, true},
                               {"paged-chunked", true, true, true}};

DataType kv_dtype_for(const Config& cfg, const LlmBenchArgs& a) {
  return cfg.bf16kv || llm::kv_dtype_from_name(a.kv_dtype) == DataType::kBFloat16 ? DataType::kBFloat16
                                                                                 : DataType::kFloat32;
}

struct Result {
  double tokens_per_s = 0;  // best over the repeats
  double fragmentation = 0;
  int64_t sessions_fit = 0, preemptions = 0, peak_sessions = 0, prefill_rows = 0, prefill_padded = 0, generated = 0;
  std::vector<std::vector<int64_t>> tokens;
  // Per request of every run: time to first token (from its arrival) and time per output
  // token after the first ((last - first) / (tokens - 1), requests of more than one token).
  std::vector<double> ttft_ms, tpot_ms;
  // Every gap between two consecutive tokens of a request (inter-token latency): what a step
  // that runs a whole prefill stalls, where TPOT averages the stall over the request's tokens.
  std::vector<double> itl_ms;
};

llm::EngineOptions options_for(const Config& cfg, const LlmBenchArgs& a) {
  llm::EngineOptions o;
  o.kv_cache_mib = a.kv_memory_mib;
  o.block_size = cfg.paged ? a.block_size : kFixedLength;
  o.max_batch = cfg.paged ? a.batch : 1;
  if (!cfg.buckets) o.prefill_buckets = {kFixedLength};
  if (!cfg.paged) o.attention_buckets = cfg.buckets ? o.prefill_buckets : std::vector<int64_t>{kFixedLength};
  if (cfg.chunked) o.max_step_tokens = a.step_tokens;
  o.kv_dtype = kv_dtype_for(cfg, a);
  return o;
}

// Sessions of the workload (cycled, in order) that fit in the pool at once at their final
// lengths (prompt + output - 1 tokens), counted by the engine's own block manager.
int64_t sessions_that_fit(const Workload& w, int64_t blocks, int64_t block_size) {
  llm::BlockManager bm(blocks, block_size);
  int64_t n = 0;
  for (;; ++n) {
    const llm::Request& r = w.requests[n % w.requests.size()];
    const int64_t tokens = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens - 1;
    if (!bm.add_sequence(n).ok() || !bm.reserve(n, tokens).ok()) return n;
  }
}

// One timed run of `cfg` on a fresh engine; an error is the engine's (the workload is valid).
Status run_once(const std::string& model_dir, const Config& cfg, const LlmBenchArgs& a, const Workload& w, Result& r) {
  KILN_ASSIGN_OR_RETURN(auto model, llm::DecoderModel::load(model_dir));
  const llm::EngineOptions o = options_for(cfg, a);
  KILN_ASSIGN_OR_RETURN(auto engine, llm::Engine::create(std::move(model), o));
  const size_t n = w.requests.size();
  std::vector<int64_t> ids;
  std::unordered_map<int64_t, size_t> index;  // engine id -> request
  std::vector<double> first_s(n, -1), last_s(n, -1);
  int64_t peak = 0;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  engine->on_token = [&](int64_t id, int64_t) {
    peak = std::max(peak, engine->stats().running);
    const size_t i = index.at(id);
    const double now = elapsed_s();
    if (last_s[i] >= 0) r.itl_ms.push_back(1e3 * (now - last_s[i]));
    last_s[i] = now;
    if (first_s[i] < 0) first_s[i] = last_s[i];
  };
  // Requests join between steps once their arrival time has passed; an idle engine waits for
  // the next arrival.
  while (ids.size() < n || !engine->idle()) {
    const double now = elapsed_s();
    while (ids.size() < n && w.arrival_s[ids.size()] <= now) {
      KILN_ASSIGN_OR_RETURN(int64_t id, engine->add_request(w.requests[ids.size()]), "in configuration %s", cfg.name);
      index[id] = ids.size();
      ids.push_back(id);
    }
    if (engine->idle()) {
      if (ids.size() < n) std::this_thread::sleep_for(std::chrono::duration<double>(w.arrival_s[ids.size()] - now));
      continue;
    }
    KILN_RETURN_IF_ERROR(engine->step(), "in configuration %s", cfg.name);
  }
  const double seconds = elapsed_s();
  const llm::EngineStats st = engine->stats();
  r.tokens.clear();
  r.generated = 0;
  for (size_t i = 0; i < n; ++i) {
    r.tokens.push_back(engine->request(ids[i]).tokens);
    const int64_t count = static_cast<int64_t>(r.tokens.back().size());
    r.generated += count;
    r.ttft_ms.push_back(1e3 * (first_s[i] - w.arrival_s[i]));
    if (count > 1) r.tpot_ms.push_back(1e3 * (last_s[i] - first_s[i]) / static_cast<double>(count - 1));
  }
  r.tokens_per_s = std::max(r.tokens_per_s, r.generated / seconds);
  r.fragmentation = st.mean_fragmentation;
  r.preemptions = st.preemptions;
  r.peak_sessions = peak;
  r.prefill_rows = st.prefill_tokens;
  r.prefill_padded = st.prefill_padded_tokens;
  r.sessions_fit = sessions_that_fit(w, st.kv.blocks_total, o.block_size);
  return ok_status();
}

int run_llm_bench(const LlmBenchArgs& a) {
  const char* cmd = "llm-bench";
  if (a.mode != "paged" && a.mode != "fixed" && a.mode != "both")
    return usage_error(cmd, "--mode '" + a.mode + "': expected paged, fixed or both");
  if (a.requests < 1) return usage_error(cmd, "--requests must be at least 1");
  if (a.prompt_min < 1 || a.prompt_max < a.prompt_min)
    return usage_error(cmd, "--prompt-min must be at least 1 and --prompt-max at least --prompt-min");
  if (a.output_min < 1 || a.output_max < a.output_min)
    return usage_error(cmd, "--output-min must be at least 1 and --output-max at least --output-min");
  if (a.kv_memory_mib < 1) return usage_error(cmd, "--kv-memory must be at least 1 (MiB)");
  if (a.batch < 1) return usage_error(cmd, "--batch must be at least 1");
  if (a.block_size < 1 || a.block_size > 4096) return usage_error(cmd, "--block-size must be in 1..4096");
  if (a.repeat < 1) return usage_error(cmd, "--repeat must be at least 1");
  if (a.step_tokens != 0 && a.step_tokens < a.batch)
    return usage_error(cmd, "--step-tokens must be 0 (no paged-chunked configuration) or at least --batch");
  if (a.kv_dtype != "both" && !llm::kv_dtype_from_name(a.kv_dtype))
    return usage_error(cmd, "--kv-dtype '" + a.kv_dtype + "': expected fp32, bf16 or both");
  if (!(a.arrival_rate >= 0) || !std::isfinite(a.arrival_rate))
    return usage_error(cmd, "--arrival-rate must be a number of requests per second, at least 0");
  std::string error;
  const int threads = checked_threads(cmd, a.threads_opt, a.threads, 1, &error);
  if (!error.empty()) return usage_error(cmd, error);
  if (threads > 0) cap_threads(threads);

  auto probe = llm::DecoderModel::load(a.model);
  if (!probe.ok()) return report_error(cmd, probe.status().to_string());
  const llm::DecoderConfig c = (*probe)->config();
  // What the attention matcher recognised in a plain decoder.onnx: the report's first line (on
  // stderr with --json, whose stdout is one JSON object).
  if (!(*probe)->recognition_note().empty())
    std::fprintf(a.json ? stderr : stdout, "%s\n", (*probe)->recognition_note().c_str());
  probe->reset();
  const int64_t fixed_bytes = llm::KvCache::block_bytes(c.layers, c.kv_heads, c.head_dim, kFixedLength,
                                                        kv_dtype_for(kConfigs[0], a));
  if (a.mode != "paged" && (a.kv_memory_mib << 20) < fixed_bytes)
    return report_error(cmd, str_format("--kv-memory %lld MiB holds no fixed-mode session of %lld tokens (%lld MiB)",
                                        (long long)a.kv_memory_mib, (long long)kFixedLength,
                                        (long long)((fixed_bytes + (1 << 20) - 1) >> 20)));
  const Workload w = make_workload(a, c);

  std::vector<const Config*> configs;
  for (const Config& cfg : kConfigs)
    if ((a.mode == "both" || (a.mode == "paged") == cfg.paged) && (!cfg.chunked || a.step_tokens > 0) &&
        (!cfg.bf16kv || a.kv_dtype == "both"))
      configs.push_back(&cfg);
  std::vector<Result> results(configs.size());
  // Alternated: repeat r runs every configuration once, so a load change hits them alike.
  for (int64_t rep = 0; rep < a.repeat; ++rep)
    for (size_t i = 0; i < configs.size(); ++i)
      if (Status st = run_once(a.model, *configs[i], a, w, results[i]); !st.ok()) return report_error(cmd, st.to_string());
  // Configurations of one KV element type must agree token for token.
  bool same = true;
  for (size_t i = 0; i < configs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (configs[j]->bf16kv == configs[i]->bf16kv) same = same && results[i].tokens == results[j].tokens;

  auto find = [&](const char* name) -> const Result* {
    for (size_t i = 0; i < configs.size(); ++i)
      if (std::string(configs[i]->name) == name) return &results[i];
    return nullptr;
  };
  const Result *fixed = find("fixed"), *fixed_b = find("fixed-buckets"), *paged_nb = find("paged-nobuckets"),
               *paged = find("paged"), *bf16kv = find("paged-bf16kv");
  // Requests whose greedy tokens paged-bf16kv and paged agree on.
  int64_t bf16_agree = 0;
  if (bf16kv && paged)
    for (size_t i = 0; i < w.requests.size(); ++i) bf16_agree += bf16kv->tokens[i] == paged->tokens[i];
  if (a.json) {
    std::string s = str_format(
        "{\"model\": \"%s\", \"requests\": %lld, \"seed\": %llu, \"prompt_tokens\": %lld, \"output_tokens\": %lld, "
        "\"capped_prompts\": %lld, \"kv_memory_mib\": %lld, \"repeat\": %lld, \"arrival_rate\": %g, "
        "\"step_tokens\": %lld, \"kv_dtype\": \"%s\", \"same_tokens\": %s, \"bf16kv_same_requests\": %lld, "
        "\"lengths\": [",
        c.name.c_str(), (long long)a.requests, (unsigned long long)a.seed, (long long)w.prompt_tokens,
        (long long)w.output_tokens, (long long)w.capped, (long long)a.kv_memory_mib, (long long)a.repeat,
        a.arrival_rate, (long long)a.step_tokens, a.kv_dtype.c_str(), same ? "true" : "false",
        (long long)(bf16kv ? bf16_agree : -1));
    for (size_t i = 0; i < w.requests.size(); ++i)
      s += str_format("%s[%lld, %lld]", i ? ", " : "", (long long)w.requests[i].prompt.size(),
                      (long long)w.requests[i].max_new_tokens);
    s += "], \"configs\": [";
    for (size_t i = 0; i < configs.size(); ++i) {
      const Result& r = results[i];
      s += str_format(
          "%s{\"name\": \"%s\", \"tokens_per_s\": %.2f, \"generated\": %lld, \"sessions_fit\": %lld, "
          "\"peak_sessions\": %lld, \"fragmentation\": %.6f, \"preemptions\": %lld, \"prefill_rows\": %lld, "
          "\"prefill_padded_rows\": %lld, \"ttft_p50_ms\": %.3f, \"ttft_p99_ms\": %.3f, \"tpot_p50_ms\": %.3f, "
          "\"tpot_p99_ms\": %.3f, \"itl_p50_ms\": %.3f, \"itl_p99_ms\": %.3f}",
          i ? ", " : "", configs[i]->name, r.tokens_per_s, (long long)r.generated, (long long)r.sessions_fit,
          (long long)r.peak_sessions, r.fragmentation, (long long)r.preemptions, (long long)r.prefill_rows,
          (long long)r.prefill_padded, percentile(r.ttft_ms, 50), percentile(r.ttft_ms, 99),
          percentile(r.tpot_ms, 50), percentile(r.tpot_ms, 99), percentile(r.itl_ms, 50), percentile(r.itl_ms, 99));
    }
    std::printf("%s]}\n", s.c_str());
    return same ? 0 : kExitError;
  }
  std::printf("%s: %lld requests (seed %llu), %lld prompt tokens (%lld..%lld each, %lld shortened to the %lld-token "
              "context), %lld output tokens (%lld..%lld); KV memory %lld MiB (%s); best of %lld, alternated; %s\n",
              c.name.c_str(), (long long)a.requests, (unsigned long long)a.seed, (long long)w.prompt_tokens,
              (long long)a.prompt_min, (long long)a.prompt_max, (long long)w.capped, (long long)c.context,
              (long long)w.output_tokens, (long long)a.output_min, (long long)a.output_max, (long long)a.kv_memory_mib,
              a.kv_dtype == "both" ? "fp32, and bf16 for paged-bf16kv" : a.kv_dtype.c_str(), (long long)a.repeat,
              a.arrival_rate > 0 ? str_format("Poisson arrivals at %g requests/s over %.1f s", a.arrival_rate,
                                              w.arrival_s.back()).c_str()
                                 : "all requests arrive at the start");
  std::printf("%-16s %10s %13s %13s %14s %11s %22s\n", "config", "tokens/s", "sessions-fit", "peak-running",
              "fragmentation", "preemptions", "prefill rows (padded)");
  for (size_t i = 0; i < configs.size(); ++i) {
    const Result& r = results[i];
    std::printf("%-16s %10.1f %13lld %13lld %13.2f%% %11lld %10lld (%lld)\n", configs[i]->name, r.tokens_per_s,
                (long long)r.sessions_fit, (long long)r.peak_sessions, 100.0 * r.fragmentation,
                (long long)r.preemptions, (long long)r.prefill_rows, (long long)r.prefill_padded);
  }
  std::printf("%-16s %13s %13s %13s %13s %13s %13s   (TTFT from arrival; TPOT after the first token, per request; "
              "ITL between tokens; all runs)\n",
              "latency ms", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99");
  for (size_t i = 0; i < configs.size(); ++i) {
    const Result& r = results[i];
    std::printf("%-16s %13.1f %13.1f %13.2f %13.2f %13.2f %13.2f\n", configs[i]->name, percentile(r.ttft_ms, 50),
                percentile(r.ttft_ms, 99), percentile(r.tpot_ms, 50), percentile(r.tpot_ms, 99),
                percentile(r.itl_ms, 50), percentile(r.itl_ms, 99));
  }
  if (fixed && fixed_b)
    std::printf("buckets alone (fixed-buckets / fixed) tokens/s: %.2fx (acceptance >= 1.35x)\n",
                fixed_b->tokens_per_s / fixed->tokens_per_s);
  if (paged && paged_nb)
    std::printf("paged with buckets / without tokens/s: %.2fx\n", paged->tokens_per_s / paged_nb->tokens_per_s);
  if (fixed && paged)
    std::printf("paged / fixed: tokens/s %.2fx, sessions in %lld MiB %.2fx (acceptance >= 2x), fragmentation %.2f%% "
                "vs %.2f%% (acceptance <= 1%%)\n",
                paged->tokens_per_s / fixed->tokens_per_s, (long long)a.kv_memory_mib,
                static_cast<double>(paged->sessions_fit) / std::max<int64_t>(1, fixed->sessions_fit),
                100.0 * paged->fragmentation, 100.0 * fixed->fragmentation);
  if (const Result* chunked = find("paged-chunked"); chunked && paged)
    std::printf("paged-chunked (%lld rows per step) / paged: ITL p50 %.2fx, p99 %.2fx; TPOT p50 %.2fx, p99 %.2fx; "
                "TTFT p50 %.2fx, p99 %.2fx; tokens/s %.2fx\n",
                (long long)a.step_tokens, percentile(chunked->itl_ms, 50) / percentile(paged->itl_ms, 50),
                percentile(chunked->itl_ms, 99) / percentile(paged->itl_ms, 99),
                percentile(chunked->tpot_ms, 50) / percentile(paged->tpot_ms, 50),
                percentile(chunked->tpot_ms, 99) / percentile(paged->tpot_ms, 99),
                percentile(chunked->ttft_ms, 50) / percentile(paged->ttft_ms, 50),
                percentile(chunked->ttft_ms, 99) / percentile(paged->ttft_ms, 99),
                chunked->tokens_per_s / paged->tokens_per_s);
  if (bf16kv && paged)
    std::printf("paged-bf16kv / paged: tokens/s %.2fx, sessions in %lld MiB %.2fx (%lld vs %lld); greedy tokens "
                "identical in %lld of %zu requests\n",
                bf16kv->tokens_per_s / paged->tokens_per_s, (long long)a.kv_memory_mib,
                static_cast<double>(bf16kv->sessions_fit) / std::max<int64_t>(1, paged->sessions_fit),
                (long long)bf16kv->sessions_fit, (long long)paged->sessions_fit, (long long)bf16_agree,
                w.requests.size());
  std::printf("greedy tokens: %s\n", same ? (bf16kv ? "identical in every configuration of one KV element type"
                                                    : "identical in every configuration")
                                          : "DIFFER between configurations");
  return same ? 0 : kExitError;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<LlmBenchArgs>();
  app.add_option("model", args->model,
                 "Decoder directory (bench/llm/export_decoder.py's config.json and segments), or a past-KV "
                 "decoder.onnx (or a directory holding one) whose attention Kiln recognises")
      ->required();
  app.add_option("--mode", args->mode, "paged, fixed (the padded-to-2048 baseline) or both (default), alternated");
  app.add_option("--requests", args->requests, "Requests in the workload (default 16)");
  app.add_option("--seed", args->seed, "Workload seed: lengths and token ids (default 1)");
  app.add_option("--prompt-min", args->prompt_min, "Shortest prompt in tokens (default 16)");
  app.add_option("--prompt-max", args->prompt_max, "Longest prompt in tokens (default 1500)");
  app.add_option("--output-min", args->output_min, "Fewest tokens generated per request (default 16)");
  app.add_option("--output-max", args->output_max, "Most tokens generated per request (default 256)");
  app.add_option("--kv-memory", args->kv_memory_mib, "KV cache memory in MiB, the same for every mode (default 256)");
  app.add_option("--batch", args->batch, "Most sessions decoding together in paged mode (default 16)");
  app.add_option("--block-size", args->block_size, "Paged mode's KV block in tokens (default 16)");
  app.add_option("--step-tokens", args->step_tokens,
                 "Add the paged-chunked configuration: chunked prefill under this many rows per step, at least "
                 "--batch (default 0: not run)");
  app.add_option("--kv-dtype", args->kv_dtype,
                 "KV pool element type: fp32 (default), bf16 (every configuration), or both (adds paged-bf16kv, "
                 "paged with a bf16 pool, beside the fp32 configurations)");
  app.add_option("--repeat", args->repeat, "Rounds of every configuration, alternated; best tokens/s (default 1)");
  app.add_option("--arrival-rate", args->arrival_rate,
                 "Requests per second, Poisson arrivals from the seed (default 0: all at the start)");
  args->threads_opt = app.add_option("--threads", args->threads, "Threads (default: the cores)");
  app.add_flag("--json", args->json, "Print one JSON object instead of the table");
  return [args] { return run_llm_bench(*args); };
}

KILN_REGISTER_SUBCOMMAND("llm-bench", "Benchmark the LLM engine against a padded-to-2048 static baseline", setup);

}  // namespace
}  // namespace kiln::tools
