// `kiln llm-generate`: text in, text out, through the LLM engine (src/llm) and a SentencePiece
// tokenizer: the prompt is encoded (with the model's beginning-of-sequence id in front when
// the tokenizer has one), generated greedily or by sampling, and the new text printed as the
// tokens come. --prompt-ids / --print-ids work without a tokenizer (token ids in and out).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/status.h"
#include "llm/engine.h"
#include "llm/tokenizer.h"
#include "tools/api_session.h"
#include "tools/cli_options.h"
#include "tools/subcommand.h"

namespace kiln::tools {
namespace {

struct LlmGenerateArgs {
  std::string model, prompt, prompt_ids, tokenizer;
  int64_t max_tokens = 64;
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool no_bos = false, print_ids = false;
  int threads = 0;
  CLI::Option* threads_opt = nullptr;
};

Expected<std::vector<int64_t>> parse_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::string item;
  std::stringstream in(text);
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      return invalid_argument("--prompt-ids: '%s' is not a token id", item.c_str());
    }
    ids.push_back(v);
  }
  if (ids.empty()) return invalid_argument("--prompt-ids is empty");
  return ids;
}

// Prints what `tokens` decode to beyond the `printed` bytes already out. SentencePiece
// decodes a piece differently at the start of a text (no leading space), so the whole
// generated text is decoded each time and only its new end is printed.
Status print_new_text(const llm::Tokenizer& tok, const std::vector<int64_t>& tokens,
                      size_t* printed) {
  KILN_ASSIGN_OR_RETURN(std::string text, tok.decode(tokens));
  if (text.size() > *printed) {
    std::fwrite(text.data() + *printed, 1, text.size() - *printed, stdout);
    std::fflush(stdout);
    *printed = text.size();
  }
  return ok_status();
}

int run_llm_generate(const LlmGenerateArgs& a) {
  const std::string cmd = "llm-generate";
  if (a.prompt.empty() == a.prompt_ids.empty()) {
    return usage_error(cmd, "give the prompt as --prompt TEXT (with a tokenizer) or --prompt-ids IDS");
  }
  if (a.max_tokens < 1) return usage_error(cmd, "--max-tokens must be at least 1");
  std::string error;
  const int threads = checked_threads(cmd, a.threads_opt, a.threads, 1, &error);
  if (!error.empty()) return usage_error(cmd, error);
  if (threads > 0) cap_threads(threads);

  // The tokenizer: --tokenizer, else the model directory's tokenizer.model when there is one.
  std::string tok_path = a.tokenizer;
  if (tok_path.empty() && std::filesystem::is_regular_file(a.model + "/tokenizer.model")) {
    tok_path = a.model + "/tokenizer.model";
  }
  std::unique_ptr<llm::Tokenizer> tok;
  if (!tok_path.empty()) {
    auto t = llm::Tokenizer::load(tok_path);
    if (!t.ok()) return report_error(cmd, t.status().to_string());
    tok = std::move(t).value();
  } else if (!a.prompt.empty()) {
    return usage_error(cmd, "--prompt needs a tokenizer: --tokenizer FILE, or tokenizer.model in the "
                            "model directory (or give --prompt-ids)");
  }

  llm::Request r;
  if (!a.prompt.empty()) {
    auto ids = tok->encode(a.prompt);
    if (!ids.ok()) return report_error(cmd, ids.status().to_string());
    if (!a.no_bos && tok->bos_id() >= 0) r.prompt.push_back(tok->bos_id());
    r.prompt.insert(r.prompt.end(), ids->begin(), ids->end());
  } else {
    auto ids = parse_ids(a.prompt_ids);
    if (!ids.ok()) return usage_error(cmd, ids.status().message());
    r.prompt = std::move(ids).value();
  }
  r.max_new_tokens = a.max_tokens;
  r.sampling.temperature = a.temperature;
  r.sampling.top_k = a.top_k;
  r.sampling.top_p = a.top_p;
  r.sampling.seed = a.seed;
  if (tok && tok->eos_id() >= 0) r.stop_tokens.push_back(tok->eos_id());

  auto model = llm::DecoderModel::load(a.model);
  if (!model.ok()) return report_error(cmd, model.status().to_string());
  if (tok && tok->vocab_size() > (*model)->config().vocab) {
    return report_error(cmd, str_format("the tokenizer's vocabulary (%lld) is larger than the model's (%lld): "
                                        "not this model's tokenizer",
                                        (long long)tok->vocab_size(), (long long)(*model)->config().vocab));
  }
  llm::EngineOptions o;
  o.max_batch = 1;
  auto engine = llm::Engine::create(std::move(model).value(), o);
  if (!engine.ok()) return report_error(cmd, engine.status().to_string());
  auto id = (*engine)->add_request(r);
  if (!id.ok()) return report_error(cmd, id.status().to_string());

  std::vector<int64_t> generated;
  size_t printed = 0;
  Status print_status = ok_status();
  (*engine)->on_token = [&](int64_t, int64_t token) {
    if (token == (tok ? tok->eos_id() : -2)) return;
    generated.push_back(token);
    if (a.print_ids || !tok) {
      std::printf("%s%lld", generated.size() > 1 ? "," : "", static_cast<long long>(token));
      std::fflush(stdout);
    } else if (print_status.ok()) {
      print_status = print_new_text(*tok, generated, &printed);
    }
  };
  if (Status st = (*engine)->run_to_completion(); !st.ok()) return report_error(cmd, st.to_string());
  std::printf("\n");
  if (!print_status.ok()) return report_error(cmd, print_status.to_string());
  return 0;
}

std::function<int()> setup(CLI::App& app) {
  auto args = std::make_shared<LlmGenerateArgs>();
  app.add_option("model", args->model, "Decoder directory (bench/llm/export_decoder.py's config.json and segments)")
      ->required();
  app.add_option("--prompt", args->prompt, "Prompt text (needs a tokenizer)");
  app.add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids, instead of --prompt");
  app.add_option("--tokenizer", args->tokenizer,
                 "SentencePiece model file (default: tokenizer.model in the model directory, if there)");
  app.add_option("--max-tokens", args->max_tokens, "Most tokens to generate (default 64); the end-of-sequence "
                                                   "token stops earlier");
  app.add_option("--temperature", args->temperature, "Sampling temperature (default 0: greedy)");
  app.add_option("--top-k", args->top_k, "Sample from the k most likely tokens (default 0: all)");
  app.add_option("--top-p", args->top_p, "Sample from the smallest set of tokens reaching this probability (default 1)");
  app.add_option("--seed", args->seed, "Sampling seed (default 0)");
  app.add_flag("--no-bos", args->no_bos, "Do not put the tokenizer's beginning-of-sequence id before the prompt");
  app.add_flag("--print-ids", args->print_ids, "Print the generated token ids instead of text");
  args->threads_opt = app.add_option("--threads", args->threads, "Threads (default: the cores)");
  return [args] { return run_llm_generate(*args); };
}

KILN_REGISTER_SUBCOMMAND("llm-generate", "Generate text with a decoder model and a SentencePiece tokenizer", setup);

}  // namespace
}  // namespace kiln::tools
