// The decode engine end to end on tiny GPT-2-style and Llama-style decoders: greedy tokens
// equal PyTorch's own greedy decode (bench/llm/export_decoder.py, the torch module with its
// contiguous KV cache) token for token, and every step's logits are within 1e-4 of the
// reference relative to the row's largest magnitude, whether requests run one at a time,
// batched continuously (joining and leaving at different steps), or preempted by
// recomputation under KV memory pressure, or sharing a long system prompt's KV blocks. Bad
// requests are errors for themselves alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "llm/engine.h"
#include "llm_test_data.h"

namespace kiln::llm {
namespace {

struct Reference {
  std::vector<std::vector<int64_t>> prompts, tokens;
  Tensor logits;  // [prompts, steps, vocab]
  int64_t steps = 0;
};

// "gpt2-tiny" (the exporter's split) or "gpt2-tiny/decoder.onnx" (the same weights as one
// past-KV graph, its attention recognised): the reference is the directory's.
std::string model_dir(const std::string& model) {
  const std::string file = "/decoder.onnx";
  const bool is_file = model.size() > file.size() && model.compare(model.size() - file.size(), file.size(), file) == 0;
  return is_file ? model.substr(0, model.size() - file.size()) : model;
}

Reference load_reference(const std::string& param, const std::string& name = "reference") {
  Reference r;
  const std::string model = model_dir(param);
  std::ifstream in(test::data_dir() + "/" + model + "/" + name + ".json");
  nlohmann::json j = nlohmann::json::parse(in);
  r.steps = j["steps"].get<int64_t>();
  for (const auto& s : j["sequences"]) {
    r.prompts.push_back(s["prompt"].get<std::vector<int64_t>>());
    r.tokens.push_back(s["tokens"].get<std::vector<int64_t>>());
  }
  r.logits = test::npy(model + "/" + name + "_logits.npy");
  return r;
}

std::unique_ptr<Engine> make_engine(const std::string& model, EngineOptions options) {
  auto decoder = DecoderModel::load(test::data_dir() + "/" + model);
  EXPECT_TRUE(decoder.ok()) << decoder.status().to_string();
  if (!decoder.ok()) return nullptr;
  options.record_logits = true;
  auto engine = Engine::create(std::move(*decoder), options);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Runs the first `count` reference prompts (request i generating max_new(i) tokens) and
// checks tokens and logits against PyTorch: max |kiln - torch| <= tolerance * max |torch| per
// step.
void expect_matches_pytorch(Engine& engine, const Reference& ref, size_t count,
                            const std::function<int64_t(size_t)>& max_new, double tolerance = 1e-4) {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < count; ++i) {
    auto id = engine.add_request({ref.prompts[i], max_new(i), {}, {}});
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    ids.push_back(*id);
  }
  Status st = engine.run_to_completion();
  ASSERT_TRUE(st.ok()) << st.to_string();
  const int64_t vocab = ref.logits.dims()[2];
  for (size_t i = 0; i < ids.size(); ++i) {
    const RequestState& r = engine.request(ids[i]);
    ASSERT_EQ(r.phase, RequestState::Phase::kFinished);
    const std::vector<int64_t> want(ref.tokens[i].begin(), ref.tokens[i].begin() + max_new(i));
    EXPECT_EQ(r.tokens, want) << "request " << i;
    ASSERT_EQ(static_cast<int64_t>(r.logits.size()), max_new(i));
    for (int64_t s = 0; s < max_new(i); ++s) {
      const float* expect = ref.logits.data<float>() + (i * ref.steps + s) * vocab;
      double scale = 0, worst = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        scale = std::max(scale, std::abs(static_cast<double>(expect[v])));
        worst = std::max(worst, std::abs(static_cast<double>(r.logits[s][v]) - expect[v]));
      }
      ASSERT_LE(worst, tolerance * scale) << "request " << i << " step " << s;
    }
  }
}

class EngineVsPyTorch : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
    ref_ = load_reference(GetParam());
    ASSERT_GE(ref_.prompts.size(), 20u);
  }
  Reference ref_;
};

TEST_P(EngineVsPyTorch, GreedyOneRequestAtATime) {
  EngineOptions options;
  options.max_batch = 1;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  // The first 8 prompts: one at a time is the slow path, and the simplest.
  expect_matches_pytorch(*engine, ref_, 8, [&](size_t) { return ref_.steps; });
}

// kiln llm-bench's fixed-length baselines (EngineOptions::attention_buckets): one sequence at a
// time in one 512-token block, prefill and attention padded to the bucket of the context (64 or
// 512: both taken, as prompt + tokens pass 64), the padded keys and rows computed at weight 0:
// still PyTorch's tokens and logits.
TEST_P(EngineVsPyTorch, StaticShapeEmulationStaysExact) {
  EngineOptions options;
  options.max_batch = 1;
  options.block_size = 512;
  options.kv_blocks = 2;
  options.prefill_buckets = {64, 512};
  options.attention_buckets = {64, 512};
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref_, 4, [&](size_t) { return ref_.steps; });
}

TEST_P(EngineVsPyTorch, GreedyBatchedContinuously) {
  EngineOptions options;
  options.max_batch = 16;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  // 16 at a time, budgets differ: sequences leave at different steps and the waiting ones
  // join mid-run.
  int64_t most_running = 0;
  engine->on_token = [&](int64_t, int64_t) { most_running = std::max(most_running, engine->stats().running); };
  expect_matches_pytorch(*engine, ref_, ref_.prompts.size(),
                         [&](size_t i) { return ref_.steps - static_cast<int64_t>(5 * (i % 4)); });
  EXPECT_EQ(most_running, 16);
  EngineStats s = engine->stats();
  EXPECT_EQ(s.kv.blocks_used, 0);  // every block back on the free list
  EXPECT_EQ(s.finished, static_cast<int64_t>(ref_.prompts.size()));
  EXPECT_GT(s.decode_padded_tokens, s.decode_tokens);  // batches of 15, 5, ... padded to 16, 8
}

TEST_P(EngineVsPyTorch, GreedyUnderMemoryPressurePreemptsAndStaysExact) {
  EngineOptions options;
  options.max_batch = 8;
  options.block_size = 8;
  // 128 token slots for 8 sequences of up to ~90 tokens (48 steps; more at a larger scale, as
  // exactness_full_scale.sh runs it, still far fewer than the 8 sequences need together).
  options.kv_blocks = 16 * ((ref_.steps + 47) / 48);
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref_, ref_.prompts.size(), [&](size_t) { return ref_.steps; });
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_EQ(engine->stats().kv.blocks_used, 0);
}

TEST_P(EngineVsPyTorch, SharedSystemPromptIsStoredOnceAndStaysExact) {
  // 16 prompts: the same 200-token system prompt, then each its own test prompt.
  const Reference shared = load_reference(GetParam(), "reference_shared");
  ASSERT_EQ(shared.prompts.size(), 16u);
  const int64_t bs = 16, prefix_blocks = 200 / bs;  // 12 whole blocks of the system prompt
  EngineOptions options;
  options.max_batch = 16;
  options.block_size = bs;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  // The pool right after all 16 are prefilled (the 16th first token; nothing decoded yet).
  int64_t first_tokens = 0;
  EngineStats at_start;
  engine->on_token = [&](int64_t, int64_t) {
    if (++first_tokens == 16) at_start = engine->stats();
  };
  expect_matches_pytorch(*engine, shared, 16, [&](size_t) { return shared.steps; });
  int64_t unshared_blocks = 0, prompt_tokens = 0;
  for (const auto& p : shared.prompts) {
    unshared_blocks += (static_cast<int64_t>(p.size()) + bs - 1) / bs;
    prompt_tokens += static_cast<int64_t>(p.size());
  }
  EXPECT_EQ(at_start.running, 16);
  EXPECT_EQ(at_start.kv.blocks_shared, prefix_blocks);
  // The prefix once, plus each request's own blocks.
  EXPECT_EQ(at_start.kv.blocks_used, unshared_blocks - 15 * prefix_blocks);
  EXPECT_EQ(at_start.prefix_hit_tokens, 15 * prefix_blocks * bs);
  EXPECT_EQ(at_start.prefill_tokens, prompt_tokens - 15 * prefix_blocks * bs);  // the prefix computed once
  // Finished, the blocks stay cached (free, not used), and a new request with the same system
  // prompt maps them again and is still exact.
  EngineStats done = engine->stats();
  EXPECT_EQ(done.kv.blocks_used, 0);
  EXPECT_GE(done.kv.blocks_cached, prefix_blocks);
  expect_matches_pytorch(*engine, shared, 1, [&](size_t) { return shared.steps; });
  EXPECT_GE(engine->stats().prefix_hit_tokens - done.prefix_hit_tokens, prefix_blocks * bs);
}

TEST_P(EngineVsPyTorch, SharedSystemPromptUnderMemoryPressureStaysExact) {
  const Reference shared = load_reference(GetParam(), "reference_shared");
  EngineOptions options;
  options.max_batch = 16;
  options.block_size = 16;
  options.kv_blocks = 40;  // the prefix (12) and room for a few sequences' own blocks
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, shared, 16, [&](size_t) { return shared.steps; });
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_GT(engine->stats().prefix_hit_tokens, 0);
  EXPECT_EQ(engine->stats().kv.blocks_used, 0);
}

// Chunked prefill under a per-step token budget: 8 sequences decode while the prompts of the
// waiting ones (up to 40 tokens) are prefilled 12 rows a step at most beside them, over
// several steps; tokens and logits still equal PyTorch's.
TEST_P(EngineVsPyTorch, ChunkedPrefillUnderATokenBudgetStaysExact) {
  EngineOptions options;
  options.max_batch = 8;
  options.max_step_tokens = 12;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref_, ref_.prompts.size(),
                         [&](size_t i) { return ref_.steps - static_cast<int64_t>(5 * (i % 4)); });
  const EngineStats s = engine->stats();
  EXPECT_LE(s.peak_step_tokens, 12);
  EXPECT_GT(s.mixed_steps, 0);  // prefill chunks ran beside decode rows
  EXPECT_EQ(s.kv.blocks_used, 0);
  int64_t prompt_tokens = 0;
  for (const auto& p : ref_.prompts) prompt_tokens += static_cast<int64_t>(p.size());
  EXPECT_EQ(s.prefill_tokens + s.prefix_hit_tokens, prompt_tokens);  // no preemption here
}

// The same under memory pressure (preemption of sequences mid-prefill and mid-decode, the
// recomputation chunked too) and with a shared 200-token system prompt: the later requests map
// the blocks the first one's chunks wrote, and still equal PyTorch.
TEST_P(EngineVsPyTorch, ChunkedPrefillPreemptedOrSharingAPrefixStaysExact) {
  EngineOptions options;
  options.max_batch = 8;
  options.block_size = 8;
  options.kv_blocks = 16 * ((ref_.steps + 47) / 48);  // as above
  options.max_step_tokens = 8;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref_, ref_.prompts.size(), [&](size_t) { return ref_.steps; });
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_LE(engine->stats().peak_step_tokens, 8);

  const Reference shared = load_reference(GetParam(), "reference_shared");
  EngineOptions sharing;
  sharing.max_batch = 16;
  sharing.max_step_tokens = 64;
  auto engine2 = make_engine(GetParam(), sharing);
  ASSERT_TRUE(engine2);
  expect_matches_pytorch(*engine2, shared, 16, [&](size_t) { return shared.steps; });
  EXPECT_GE(engine2->stats().prefix_hit_tokens, 15 * 192);  // the 12 whole blocks, mapped by 15
  EXPECT_LE(engine2->stats().peak_step_tokens, 64);
}

// A bf16 KV pool against PyTorch with its cache's K/V rounded to bf16 the same way
// (reference_bf16kv, export_decoder.py --bf16-kv-reference): the same greedy tokens and logits
// within fp32's 1e-4, 16 batched; and twice the blocks of an fp32 pool in the same memory.

TEST_P(EngineVsPyTorch, Bf16KvMatchesPyTorchWithABf16Cache) {
  const Reference ref = load_reference(GetParam(), "reference_bf16kv");
  ASSERT_EQ(ref.prompts, ref_.prompts);
  EngineOptions options;
  options.max_batch = 16;
  options.kv_cache_mib = 4;
  options.kv_dtype = DataType::kBFloat16;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref, ref.prompts.size(),
                         [&](size_t i) { return ref.steps - static_cast<int64_t>(5 * (i % 4)); });
  EngineOptions fp32 = options;
  fp32.kv_dtype = DataType::kFloat32;
  auto fp32_engine = make_engine(GetParam(), fp32);
  ASSERT_TRUE(fp32_engine);
  EXPECT_EQ(engine->stats().kv.blocks_total, 2 * fp32_engine->stats().kv.blocks_total);
  EXPECT_EQ(engine->stats().kv.blocks_used, 0);
}

// What bf16 K/V cost against the fp32 model: PyTorch's plain fp32 greedy decode. The tokens of
// these 20 prompts stay the same, and the logits within 2e-3 of the row's largest magnitude
// (PyTorch itself moves them by up to 1.3e-3 when its cache is rounded to bf16; docs/llm.md).
TEST_P(EngineVsPyTorch, Bf16KvStaysNearFp32PyTorch) {
  EngineOptions options;
  options.max_batch = 16;
  options.kv_dtype = DataType::kBFloat16;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref_, ref_.prompts.size(), [&](size_t) { return ref_.steps; }, 2e-3);
}

// Recomputation after preemption and chunked prefill write the bf16 pool too: still PyTorch's.
TEST_P(EngineVsPyTorch, Bf16KvPreemptedAndChunkedStaysExact) {
  const Reference ref = load_reference(GetParam(), "reference_bf16kv");
  EngineOptions options;
  options.max_batch = 8;
  options.block_size = 8;
  options.kv_blocks = 16 * ((ref.steps + 47) / 48);  // as in the fp32 memory-pressure tests
  options.max_step_tokens = 8;
  options.kv_dtype = DataType::kBFloat16;
  auto engine = make_engine(GetParam(), options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref, ref.prompts.size(), [&](size_t) { return ref.steps; });
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_GT(engine->stats().mixed_steps, 0);
}

INSTANTIATE_TEST_SUITE_P(Styles, EngineVsPyTorch,
                         ::testing::Values("gpt2-tiny", "llama-tiny", "gpt2-tiny/decoder.onnx",
                                           "llama-tiny/decoder.onnx"),
                         [](const auto& info) {
                           const std::string style = info.param.rfind("gpt2", 0) == 0 ? "Gpt2" : "Llama";
                           return info.param.find('/') == std::string::npos ? style : style + "RecognisedDecoderOnnx";
                         });

class EngineRequests : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
    engine_ = make_engine("llama-tiny", EngineOptions{});
    ASSERT_TRUE(engine_);
  }
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineRequests, BadRequestsFailAloneAndOthersFinish) {
  auto good = engine_->add_request({{1, 2, 3}, 4, {}, {}});
  ASSERT_TRUE(good.ok());
  auto empty = engine_->add_request({{}, 4, {}, {}});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  auto vocab = engine_->add_request({{1, 512, 3}, 4, {}, {}});
  EXPECT_EQ(vocab.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(vocab.status().message().find("outside the vocabulary"), std::string::npos) << vocab.status().message();
  auto negative = engine_->add_request({{-1}, 4, {}, {}});
  EXPECT_EQ(negative.status().code(), StatusCode::kOutOfRange);
  auto too_long = engine_->add_request({std::vector<int64_t>(500, 7), 20, {}, {}});
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(too_long.status().message().find("context"), std::string::npos) << too_long.status().message();
  SamplingOptions bad_p;
  bad_p.temperature = 1.0f;
  bad_p.top_p = 0.0f;
  EXPECT_EQ(engine_->add_request({{1}, 4, bad_p, {}}).status().code(), StatusCode::kInvalidArgument);
  auto cancelled = engine_->add_request({{4, 5}, 8, {}, {}});
  ASSERT_TRUE(cancelled.ok());
  ASSERT_TRUE(engine_->step().ok());
  ASSERT_TRUE(engine_->cancel(*cancelled).ok());
  EXPECT_EQ(engine_->cancel(999).code(), StatusCode::kNotFound);
  ASSERT_TRUE(engine_->run_to_completion().ok());
  EXPECT_EQ(engine_->request(*good).phase, RequestState::Phase::kFinished);
  EXPECT_EQ(engine_->request(*good).tokens.size(), 4u);
  EXPECT_EQ(engine_->request(*cancelled).phase, RequestState::Phase::kCancelled);
  EXPECT_EQ(engine_->stats().kv.blocks_used, 0);
}

TEST_F(EngineRequests, ForgetDropsOnlyFinishedOrCancelledRequests) {
  auto running = engine_->add_request({{1, 2, 3}, 4, {}, {}});
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(engine_->forget(*running).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(engine_->run_to_completion().ok());
  const std::vector<int64_t> tokens = engine_->request(*running).tokens;
  ASSERT_TRUE(engine_->forget(*running).ok());
  EXPECT_EQ(engine_->forget(*running).code(), StatusCode::kNotFound);
  // The engine runs on after a forget: the same prompt gives the same greedy tokens.
  auto again = engine_->add_request({{1, 2, 3}, 4, {}, {}});
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(engine_->cancel(*again).ok());
  ASSERT_TRUE(engine_->forget(*again).ok());
  auto third = engine_->add_request({{1, 2, 3}, 4, {}, {}});
  ASSERT_TRUE(third.ok());
  ASSERT_TRUE(engine_->run_to_completion().ok());
  EXPECT_EQ(engine_->request(*third).tokens, tokens);
  EXPECT_EQ(engine_->stats().kv.blocks_used, 0);
}

TEST_F(EngineRequests, StopTokenEndsARequest) {
  auto first = engine_->add_request({{9, 8, 7}, 6, {}, {}});
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(engine_->run_to_completion().ok());
  const int64_t stop = engine_->request(*first).tokens[1];
  auto second = engine_->add_request({{9, 8, 7}, 6, {}, {stop}});
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE(engine_->run_to_completion().ok());
  const auto& tokens = engine_->request(*second).tokens;
  ASSERT_FALSE(tokens.empty());
  EXPECT_EQ(tokens.back(), stop);
  EXPECT_LE(tokens.size(), 2u);
}

TEST_F(EngineRequests, SeededSamplingRepeatsAndTopKOneIsGreedy) {
  SamplingOptions sampled;
  sampled.temperature = 1.5f;
  sampled.top_k = 50;
  sampled.top_p = 0.9f;
  sampled.seed = 11;
  SamplingOptions top1 = sampled;
  top1.top_k = 1;
  const std::vector<int64_t> prompt = {3, 1, 4, 1, 5};
  auto a = engine_->add_request({prompt, 12, sampled, {}});
  auto b = engine_->add_request({prompt, 12, sampled, {}});
  auto greedy = engine_->add_request({prompt, 12, {}, {}});
  auto k1 = engine_->add_request({prompt, 12, top1, {}});
  ASSERT_TRUE(a.ok() && b.ok() && greedy.ok() && k1.ok());
  ASSERT_TRUE(engine_->run_to_completion().ok());
  EXPECT_EQ(engine_->request(*a).tokens, engine_->request(*b).tokens);
  EXPECT_EQ(engine_->request(*k1).tokens, engine_->request(*greedy).tokens);
  EXPECT_NE(engine_->request(*a).tokens, engine_->request(*greedy).tokens);
}

TEST(EngineOptions, StepTokenBudgetBelowTheBatchIsAClearError) {
  auto decoder = DecoderModel::load(test::data_dir() + "/gpt2-tiny");
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  EngineOptions options;
  options.max_batch = 16;
  options.max_step_tokens = 15;
  auto engine = Engine::create(std::move(*decoder), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("max step tokens 15"), std::string::npos) << engine.status().message();
}

TEST(EngineOptions, AttentionBucketsBeyondTheBlockAreAClearError) {
  auto decoder = DecoderModel::load(test::data_dir() + "/gpt2-tiny");
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  EngineOptions options;
  options.block_size = 256;
  options.attention_buckets = {128, 512};
  auto engine = Engine::create(std::move(*decoder), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("at most the KV block size 256"), std::string::npos)
      << engine.status().message();
}

TEST(EngineOptions, UnsupportedKvElementTypeIsAClearError) {
  auto decoder = DecoderModel::load(test::data_dir() + "/gpt2-tiny");
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  EngineOptions options;
  options.kv_dtype = DataType::kInt8;
  auto engine = Engine::create(std::move(*decoder), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("must be fp32 or bf16"), std::string::npos) << engine.status().message();
}

// A GPT-2 written as Hugging Face writes it (tests/llm/make_decoder_variants.py: fused QKV as
// Conv1D, the scale on q, causality by Where from a sliced constant buffer, the padding mask
// added), not by our exporter: recognised from its directory and exact to PyTorch, 16 requests
// batched, and under preemption.
TEST(RecognisedDecoder, HfGpt2WrittenDifferentlyMatchesPyTorchBatched) {
  const Reference ref = load_reference("variants/hf-gpt2");
  ASSERT_EQ(ref.prompts.size(), 20u);
  auto decoder = DecoderModel::load(test::data_dir() + "/variants/hf-gpt2");
  ASSERT_TRUE(decoder.ok()) << decoder.status().to_string();
  EXPECT_NE((*decoder)->recognition_note().find("recognised 2 layers of attention with past (heads 4, kv_heads 4, "
                                                "head_dim 16, scale 0.25 = 1/sqrt(16))"),
            std::string::npos)
      << (*decoder)->recognition_note();
  EngineOptions options;
  options.max_batch = 16;
  auto engine = make_engine("variants/hf-gpt2", options);
  ASSERT_TRUE(engine);
  int64_t most_running = 0;
  engine->on_token = [&](int64_t, int64_t) { most_running = std::max(most_running, engine->stats().running); };
  expect_matches_pytorch(*engine, ref, ref.prompts.size(), [&](size_t i) { return ref.steps - static_cast<int64_t>(3 * (i % 4)); });
  EXPECT_EQ(most_running, 16);
}

TEST(RecognisedDecoder, HfGpt2WrittenDifferentlyStaysExactWhenPreempted) {
  const Reference ref = load_reference("variants/hf-gpt2");
  EngineOptions options;
  options.max_batch = 8;
  options.block_size = 8;
  options.kv_blocks = 12;  // 96 token slots for 8 sequences of up to ~64 tokens
  auto engine = make_engine("variants/hf-gpt2/decoder.onnx", options);
  ASSERT_TRUE(engine);
  expect_matches_pytorch(*engine, ref, ref.prompts.size(), [&](size_t) { return ref.steps; });
  EXPECT_GT(engine->stats().preemptions, 0);
  EXPECT_EQ(engine->stats().kv.blocks_used, 0);
}

// Attention the paged kernel does not compute is refused at load, naming the layer and node.
TEST(RecognisedDecoder, SoftmaxOverTheWrongAxisIsRefused) {
  auto decoder = DecoderModel::load(test::data_dir() + "/variants/refuse-softmax-axis/decoder.onnx");
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.status().code(), StatusCode::kUnsupported);
  const std::string message = decoder.status().to_string();
  EXPECT_NE(message.find("layer 0: Softmax '"), std::string::npos) << message;
  EXPECT_NE(message.find("normalises over axis 2 of the scores [B, H, T, past+T], not the keys' axis 3"),
            std::string::npos) << message;
}

TEST(RecognisedDecoder, NonCausalMaskIsRefused) {
  auto decoder = DecoderModel::load(test::data_dir() + "/variants/refuse-noncausal/decoder.onnx");
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.status().code(), StatusCode::kUnsupported);
  const std::string message = decoder.status().to_string();
  EXPECT_NE(message.find("layer 0: on a probe of 4 past and 3 new tokens, the core ending in '"), std::string::npos)
      << message;
  EXPECT_NE(message.find("differs from causal attention with scale 1/sqrt(16)"), std::string::npos) << message;
}

TEST(RecognisedDecoder, TokenMixingOutsideAttentionIsRefused) {
  auto decoder = DecoderModel::load(test::data_dir() + "/variants/refuse-token-mixing/decoder.onnx");
  ASSERT_FALSE(decoder.ok());
  EXPECT_EQ(decoder.status().code(), StatusCode::kUnsupported);
  const std::string message = decoder.status().to_string();
  EXPECT_NE(message.find("outside the recognised attention cores, the graph mixes tokens along the sequence axis"),
            std::string::npos) << message;
}

TEST(DecoderModel, NotADecoderDirectoryIsAClearError) {
  auto missing = DecoderModel::load("no/such/dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("not a Kiln decoder directory"), std::string::npos)
      << missing.status().to_string();
}

}  // namespace
}  // namespace kiln::llm
