// `kiln generate MODEL_DIR --prompt TEXT | --prompt-ids 1,2,3 ...`: text generation with the
// LLM engine (src/llm): every prompt is a request, batched continuously over the paged KV
// cache; prints each request's text (through a SentencePiece tokenizer) or tokens, and the
// throughput (docs/llm.md).
#include <chrono>
#include <unordered_map>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "llm/engine.h"
#include "llm/text_stream.h"
#include "llm/tokenizer.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct GenerateArgs {
  std::string model;
  std::vector<std::string> prompts;  // text, through the tokenizer
  std::vector<std::string> prompt_ids;
  std::string tokenizer;
  bool no_bos = false, print_ids = false;
  std::string stop_ids;
  std::vector<std::string> stop_texts;  // text stop sequences, through the tokenizer
  int64_t max_new_tokens = 32;
  int64_t batch = 16;
  int64_t requests = 0;
  int64_t block_size = 16;
  int64_t kv_cache_mib = 256;
  int64_t step_tokens = 0;  // rows per step with chunked prefill; 0: whole prefills
  std::string kv_dtype = "fp32";
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int threads = 0;
  const CLI::Option* threads_opt = nullptr;
  bool quiet = false;
};

// "1,2,3" -> ids; a usage error message for anything but comma-separated integers.
Expected<std::vector<int64_t>> parse_ids(const std::string& text, const char* option) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      return invalid_argument("%s '%s': expected comma-separated token ids, e.g. 1,2,3", option, text.c_str());
    ids.push_back(value);
    pos = comma + 1;
  }
  return ids;
}

// The tokenizer: --tokenizer, else MODEL_DIR/tokenizer.model when there is one; null when
// neither (ids in and out).
Expected<std::unique_ptr<llm::Tokenizer>> load_tokenizer(const GenerateArgs& args) {
  std::string path = args.tokenizer;
  // MODEL is a directory, or a decoder.onnx file in one.
  const std::filesystem::path dir = std::filesystem::is_regular_file(args.model)
                                        ? std::filesystem::path(args.model).parent_path()
                                        : std::filesystem::path(args.model);
  if (path.empty() && std::filesystem::is_regular_file(dir / "tokenizer.model")) path = (dir / "tokenizer.model").string();
  if (path.empty()) return std::unique_ptr<llm::Tokenizer>();
  return llm::Tokenizer::load(path);
}

// Prints a piece of streamed text (llm::StreamingDecoder: whole characters only).
Status print_piece(const Expected<std::string>& piece) {
  if (!piece.ok()) return piece.status();
  std::fwrite(piece->data(), 1, piece->size(), stdout);
  std::fflush(stdout);
  return ok_status();
}

int run_generate(const GenerateArgs& args) {
  const char* cmd = "generate";
  if (args.prompts.empty() && args.prompt_ids.empty())
    return usage_error(cmd, "no prompt: give --prompt TEXT or --prompt-ids IDS (once per request)");
  if (args.max_new_tokens < 1) return usage_error(cmd, "--max-new-tokens must be at least 1");
  if (args.batch < 1) return usage_error(cmd, "--batch must be at least 1");
  if (args.requests < 0) return usage_error(cmd, "--requests must not be negative");
  if (args.block_size < 1 || args.block_size > 4096) return usage_error(cmd, "--block-size must be in 1..4096");
  if (args.kv_cache_mib < 1) return usage_error(cmd, "--kv-cache-mib must be at least 1");
  if (args.step_tokens != 0 && args.step_tokens < args.batch)
    return usage_error(cmd, "--step-tokens must be 0 (whole prefills) or at least --batch");
  const std::optional<DataType> kv_dtype = llm::kv_dtype_from_name(args.kv_dtype);
  if (!kv_dtype) return usage_error(cmd, "--kv-dtype '" + args.kv_dtype + "': expected fp32 or bf16");
  llm::SamplingOptions sampling{args.temperature, args.top_k, args.top_p, args.seed};
  if (Status st = llm::validate_sampling(sampling); !st.ok()) return usage_error(cmd, st.message());
  auto tokenizer = load_tokenizer(args);
  if (!tokenizer.ok()) return report_error(cmd, tokenizer.status().to_string());
  const llm::Tokenizer* tok = tokenizer->get();
  if ((!args.prompts.empty() || !args.stop_texts.empty()) && tok == nullptr)
    return usage_error(cmd, std::string(args.prompts.empty() ? "--stop" : "--prompt") +
                                " needs a tokenizer: --tokenizer FILE, or tokenizer.model in the model directory (or "
                                "give --prompt-ids, --stop-ids)");
  for (const std::string& s : args.stop_texts)
    if (s.empty()) return usage_error(cmd, "--stop '': a stop sequence must not be empty");
  std::vector<std::vector<int64_t>> prompts;
  for (const std::string& text : args.prompts) {
    auto ids = tok->encode(text);
    if (!ids.ok()) return report_error(cmd, ids.status().to_string());
    std::vector<int64_t> p;
    if (!args.no_bos && tok->bos_id() >= 0) p.push_back(tok->bos_id());
    p.insert(p.end(), ids->begin(), ids->end());
    prompts.push_back(std::move(p));
  }
  for (const std::string& p : args.prompt_ids) {
    auto ids = parse_ids(p, "--prompt-ids");
    if (!ids.ok()) return usage_error(cmd, ids.status().message());
    prompts.push_back(*ids);
  }
  std::vector<int64_t> stops;
  if (!args.stop_ids.empty()) {
    auto ids = parse_ids(args.stop_ids, "--stop-ids");
    if (!ids.ok()) return usage_error(cmd, ids.status().message());
    stops = *ids;
  }
  if (tok != nullptr && tok->eos_id() >= 0) stops.push_back(tok->eos_id());
  const bool text_out = tok != nullptr && !args.print_ids;
  std::string error;
  const int threads = checked_threads(cmd, args.threads_opt, args.threads, 1, &error);
  if (!error.empty()) return usage_error(cmd, error);
  if (threads > 0) cap_threads(threads);

  auto model = llm::DecoderModel::load(args.model);
  if (!model.ok()) return report_error(cmd, model.status().to_string());
  // What the attention matcher recognised in a plain decoder.onnx, on stderr (stdout is the text).
  if (!(*model)->recognition_note().empty()) std::fprintf(stderr, "%s\n", (*model)->recognition_note().c_str());
  if (tok != nullptr) {
    if (Status fits = llm::check_tokenizer_fits(*tok, (*model)->config().vocab); !fits.ok())
      return report_error(cmd, fits.to_string());
  }
  const double compile_ms = (*model)->compile_ms();
  llm::EngineOptions options;
  options.block_size = args.block_size;
  options.kv_cache_mib = args.kv_cache_mib;
  options.max_batch = args.batch;
  options.max_step_tokens = args.step_tokens;
  options.kv_dtype = *kv_dtype;
  auto engine = llm::Engine::create(std::move(*model), options);
  if (!engine.ok()) return report_error(cmd, engine.status().to_string());
  llm::Engine& e = **engine;

  // Each prompt is a request; --requests N cycles through them (a batched workload). Each
  // request samples with its own seed (seed + index) so that copies of one prompt differ.
  const int64_t count = args.requests > 0 ? args.requests : static_cast<int64_t>(prompts.size());
  std::vector<int64_t> ids;
  int failed = 0;
  for (int64_t i = 0; i < count; ++i) {
    llm::SamplingOptions s = sampling;
    s.seed = sampling.seed + static_cast<uint64_t>(i);
    auto id = e.add_request({prompts[i % prompts.size()], args.max_new_tokens, s, stops});
    if (!id.ok()) {
      report_error(cmd, str_format("request %lld: %s", (long long)i, id.status().to_string().c_str()));
      ++failed;
      ids.push_back(-1);
      continue;
    }
    ids.push_back(*id);
  }
  const auto start = std::chrono::steady_clock::now();
  double first_token_ms = -1;
  // Text out or --stop: each request's text is made as its tokens come (llm::TextStream), so
  // that a --stop sequence ends the request at the token that completes it. One request with
  // text out streams its text as it comes. (Ids out without --stop decode nothing: an id past
  // a smaller tokenizer's vocabulary is then no error.)
  std::vector<std::optional<llm::TextStream>> texts(count);
  std::unordered_map<int64_t, size_t> index_of;
  for (int64_t i = 0; i < count && (text_out || !args.stop_texts.empty()); ++i) {
    if (ids[i] < 0) continue;
    auto text = llm::TextStream::create(*tok, args.stop_texts);
    if (!text.ok()) return usage_error(cmd, text.status().message());
    texts[i].emplace(std::move(*text));
    index_of[ids[i]] = static_cast<size_t>(i);
  }
  const bool stream = text_out && !args.quiet && count == 1 && ids[0] >= 0;
  Status text_status = ok_status();
  std::vector<int64_t> stopped;  // requests whose text reached a --stop sequence in this step
  if (stream) std::printf("request 0: ");
  e.on_token = [&](int64_t request, int64_t token) {
    if (first_token_ms < 0)
      first_token_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    auto it = index_of.find(request);
    if (it == index_of.end() || !text_status.ok() || token == tok->eos_id()) return;
    llm::TextStream& text = *texts[it->second];
    if (text.stopped()) return;  // a token of the step that completed the stop sequence
    auto step = text.push(token);
    if (!step.ok()) {
      text_status = step.status();
      return;
    }
    if (stream) text_status = print_piece(step->text);
    if (step->stopped) stopped.push_back(request);
  };
  while (!e.idle()) {
    if (Status st = e.step(); !st.ok()) return report_error(cmd, st.to_string());
    for (int64_t request : stopped) (void)e.cancel(request);  // ended by its text: no more tokens
    stopped.clear();
    if (!text_status.ok()) return report_error(cmd, text_status.to_string());
  }
  for (auto& text : texts) {
    if (!text) continue;
    auto rest = text->finish();
    if (!rest.ok()) return report_error(cmd, rest.status().to_string());
    if (stream) text_status = print_piece(*rest);
  }
  if (stream) std::printf("\n");
  if (!text_status.ok()) return report_error(cmd, text_status.to_string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t generated = 0;
  for (int64_t i = 0; i < count; ++i) {
    if (ids[i] < 0) continue;
    auto tokens = e.request(ids[i]).tokens;
    // Ended by a --stop sequence: the tokens up to the one that completed it.
    if (texts[i] && texts[i]->stopped()) tokens.resize(texts[i]->tokens());
    generated += static_cast<int64_t>(tokens.size());
    if (args.quiet || stream) continue;
    if (text_out) {
      std::printf("request %lld: %s\n", (long long)i, texts[i]->text().c_str());
      continue;
    }
    std::printf("request %lld:", (long long)i);
    for (int64_t t : tokens) std::printf(" %lld", (long long)t);
    std::printf("\n");
  }
  const llm::EngineStats st = e.stats();
  std::printf("%lld tokens from %lld requests in %.3f s: %.1f tokens/s (first token %.1f ms; prefill %lld tokens "
              "padded to %lld, %.1f ms; decode %lld tokens in %lld batched steps, %.1f ms; %lld preemptions; compile %.0f ms)\n",
              (long long)generated, (long long)(count - failed), seconds, generated / seconds, first_token_ms,
              (long long)st.prefill_tokens, (long long)st.prefill_padded_tokens, st.prefill_ms,
              (long long)st.decode_tokens, (long long)st.decode_steps, st.decode_ms, (long long)st.preemptions, compile_ms);
  std::printf("KV cache (%s): %lld blocks of %lld tokens, peak %lld used; mean fragmentation over decode steps %.2f%%; "
              "shared prefixes: %lld prompt tokens mapped from cached blocks, %lld blocks cached at the end\n",
              llm::kv_dtype_name(*kv_dtype), (long long)st.kv.blocks_total, (long long)args.block_size,
              (long long)st.peak_blocks_used,
              100.0 * st.mean_fragmentation, (long long)st.prefix_hit_tokens, (long long)st.kv.blocks_cached);
  return failed ? kExitError : 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  app.add_option("model", args->model,
                 "Decoder directory (bench/llm/export_decoder.py's config.json and segments), or a past-KV "
                 "decoder.onnx (or a directory holding one) whose attention Kiln recognises")
      ->required();
  app.add_option("--prompt", args->prompts,
                 "A prompt as text, encoded by the tokenizer with its <s> in front; repeat for more requests");
  app.add_option("--prompt-ids", args->prompt_ids, "A prompt as comma-separated token ids; repeat for more requests");
  app.add_option("--tokenizer", args->tokenizer,
                 "SentencePiece model (default: tokenizer.model in the model directory, if there): --prompt text "
                 "in, text out, </s> ends a request");
  app.add_flag("--no-bos", args->no_bos, "Do not put the tokenizer's <s> before a --prompt");
  app.add_flag("--print-ids", args->print_ids, "With a tokenizer, print the generated ids rather than the text");
  app.add_option("--max-new-tokens", args->max_new_tokens, "Tokens to generate per request (default 32)");
  app.add_option("--batch", args->batch, "Most sequences decoding together (default 16)");
  app.add_option("--requests", args->requests, "Requests to run, cycling through the prompts (default: one per prompt)");
  app.add_option("--stop-ids", args->stop_ids, "Comma-separated token ids that end a request");
  app.add_option("--stop", args->stop_texts,
                 "Text that ends a request once its generated text holds it (left out of the text; needs the "
                 "tokenizer); repeat for several");
  app.add_option("--temperature", args->temperature, "Sampling temperature; 0 (default) is greedy");
  app.add_option("--top-k", args->top_k, "Sample among the k likeliest tokens (0, default: all)");
  app.add_option("--top-p", args->top_p, "Sample in the nucleus of this probability, (0, 1] (default 1)");
  app.add_option("--seed", args->seed, "Sampling seed (request i uses seed + i; default 0)");
  app.add_option("--block-size", args->block_size, "KV cache block, in tokens (default 16)");
  app.add_option("--kv-cache-mib", args->kv_cache_mib, "KV cache pool size in MiB (default 256)");
  app.add_option("--step-tokens", args->step_tokens,
                 "Rows per step: prefill in chunks beside the decode rows, at least --batch (default 0: whole "
                 "prefills before each decode step)");
  app.add_option("--kv-dtype", args->kv_dtype,
                 "KV cache element type: fp32 (default) or bf16 (half the bytes per block: twice the blocks in "
                 "--kv-cache-mib; K/V rounded to nearest even, attention in fp32)");
  args->threads_opt = app.add_option("--threads", args->threads, "Threads (default: the cores)");
  app.add_flag("--quiet", args->quiet, "Print only the summary, not the tokens");
  return [args] { return run_generate(*args); };
}

KILN_REGISTER_SUBCOMMAND("generate", "Generate text or tokens with a decoder-only LLM: paged KV cache, continuous batching",
                         setup);

}  // namespace
}  // namespace kiln::tools
