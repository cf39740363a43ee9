// include/kiln/llm.h through libkiln.so, as a C user meets it (this binary links the shared
// library and includes nothing of src/): tokens streamed by the callback and by polling equal
// PyTorch's own greedy decode of the exported tiny decoders (bench/llm/export_decoder.py,
// tests/llm/make_test_data.py) token for token, with every step's logits within 1e-4 of
// PyTorch's relative to the row's largest magnitude; so under KV memory pressure (preemption)
// and with stop tokens. Cancelling mid-stream (from the callback, by its return value, and
// between steps) stops exactly those requests, the others still equal PyTorch. Bad input is an
// error code with a message, for that request or call alone, never a crash.
#include "kiln/llm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

// The CTest fixture's folder, or the one KILN_LLM_TEST_DATA names (as llm_test_data.h).
std::string data_dir() {
  const char* other = std::getenv("KILN_LLM_TEST_DATA");
  return other != nullptr && *other != '\0' ? other : KILN_LLM_TEST_DATA_DIR;
}

// PyTorch's greedy decode of the test prompts: tokens and the logits of every step.
struct Reference {
  std::vector<std::vector<int64_t>> prompts, tokens;
  std::vector<float> logits;  // [prompts, steps, vocab]
  int64_t steps = 0, vocab = 0;
  const float* row(size_t prompt, int64_t step) const { return logits.data() + (prompt * steps + step) * vocab; }
};

// A float32 .npy file of C order (what make_test_data.py writes), read here so that the test
// needs nothing of Kiln's own; its dims.
std::vector<float> read_npy_f32(const std::string& path, std::vector<int64_t>* dims) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  in.read(magic, 8);
  EXPECT_TRUE(in && std::memcmp(magic, "\x93NUMPY", 6) == 0) << path;
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint16_t n = 0;
    in.read(reinterpret_cast<char*>(&n), 2);
    header_len = n;
  } else {
    in.read(reinterpret_cast<char*>(&header_len), 4);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  EXPECT_NE(header.find("'<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  const size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  std::string shape = header.substr(open + 1, close - open - 1);
  int64_t count = 1;
  for (size_t pos = 0; pos < shape.size();) {
    const size_t comma = std::min(shape.find(',', pos), shape.size());
    const std::string item = shape.substr(pos, comma - pos);
    if (item.find_first_not_of(' ') != std::string::npos) {
      dims->push_back(std::stoll(item));
      count *= dims->back();
    }
    pos = comma + 1;
  }
  std::vector<float> data(count);
  in.read(reinterpret_cast<char*>(data.data()), count * sizeof(float));
  EXPECT_TRUE(in) << path << ": short file";
  return data;
}

Reference load_reference(const std::string& model, const std::string& name = "reference") {
  Reference r;
  std::ifstream in(data_dir() + "/" + model + "/" + name + ".json");
  EXPECT_TRUE(in) << data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  if (!in) return r;
  nlohmann::json j = nlohmann::json::parse(in);
  r.steps = j["steps"].get<int64_t>();
  for (const auto& s : j["sequences"]) {
    r.prompts.push_back(s["prompt"].get<std::vector<int64_t>>());
    r.tokens.push_back(s["tokens"].get<std::vector<int64_t>>());
  }
  std::vector<int64_t> dims;
  r.logits = read_npy_f32(data_dir() + "/" + model + "/" + name + "_logits.npy", &dims);
  EXPECT_EQ(dims.size(), 3u);
  if (dims.size() == 3) r.vocab = dims[2];
  return r;
}

// kilnInit once per test process (ctest runs each test in its own), kilnFinalize at the end.
class Runtime : public ::testing::Environment {
 public:
  void SetUp() override { ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << kilnGetRecentErrMsg(); }
  void TearDown() override { EXPECT_EQ(kilnFinalize(), KILN_SUCCESS) << kilnGetRecentErrMsg(); }
};
[[maybe_unused]] const auto* const g_runtime = ::testing::AddGlobalTestEnvironment(new Runtime);

kilnllmEngineOptions options(int64_t max_batch) {
  kilnllmEngineOptions o;
  EXPECT_EQ(kilnllmEngineOptionsInit(&o), KILN_SUCCESS);
  o.maxBatch = max_batch;
  o.recordLogits = 1;
  return o;
}

kilnllmEngine* make_engine(const std::string& model, const kilnllmEngineOptions& o) {
  kilnllmEngine* engine = nullptr;
  EXPECT_EQ(kilnllmCreateEngine((data_dir() + "/" + model).c_str(), &o, &engine), KILN_SUCCESS)
      << kilnGetRecentErrMsg();
  return engine;
}

int64_t add(kilnllmEngine* engine, const std::vector<int64_t>& prompt, int64_t max_new,
            const std::vector<int64_t>& stops = {}) {
  kilnllmRequestParams p;
  EXPECT_EQ(kilnllmRequestParamsInit(&p), KILN_SUCCESS);
  p.maxNewTokens = max_new;
  p.stopTokens = stops.empty() ? nullptr : stops.data();
  p.numStopTokens = stops.size();
  int64_t id = -1;
  EXPECT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &p, &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  return id;
}

std::vector<int64_t> tokens_of(const kilnllmEngine* engine, int64_t id) {
  size_t n = 0;
  EXPECT_EQ(kilnllmGetRequestTokens(engine, id, nullptr, 0, &n), KILN_SUCCESS) << kilnGetRecentErrMsg();
  std::vector<int64_t> tokens(n);
  EXPECT_EQ(kilnllmGetRequestTokens(engine, id, tokens.data(), tokens.size(), &n), KILN_SUCCESS);
  return tokens;
}

kilnllmRequestStatus status_of(const kilnllmEngine* engine, int64_t id) {
  kilnllmRequestStatus s = KILN_LLM_REQUEST_WAITING;
  EXPECT_EQ(kilnllmGetRequestStatus(engine, id, &s, nullptr), KILN_SUCCESS) << kilnGetRecentErrMsg();
  return s;
}

kilnllmStats stats_of(const kilnllmEngine* engine) {
  kilnllmStats s;
  s.size = sizeof(s);
  EXPECT_EQ(kilnllmGetStats(engine, &s), KILN_SUCCESS) << kilnGetRecentErrMsg();
  return s;
}

std::vector<int64_t> first(const std::vector<int64_t>& v, size_t n) { return {v.begin(), v.begin() + n}; }

// Every step's logits through kilnllmGetRequestLogits within 1e-4 of PyTorch's, relative to
// the row's largest magnitude.
void expect_logits_match(const kilnllmEngine* engine, int64_t id, const Reference& ref, size_t prompt, size_t steps) {
  std::vector<float> row(ref.vocab);
  for (size_t s = 0; s < steps; ++s) {
    ASSERT_EQ(kilnllmGetRequestLogits(engine, id, s, row.data(), row.size()), KILN_SUCCESS) << kilnGetRecentErrMsg();
    const float* expect = ref.row(prompt, static_cast<int64_t>(s));
    double scale = 0, worst = 0;
    for (int64_t v = 0; v < ref.vocab; ++v) {
      scale = std::max(scale, std::abs(static_cast<double>(expect[v])));
      worst = std::max(worst, std::abs(static_cast<double>(row[v]) - expect[v]));
    }
    ASSERT_LE(worst, 1e-4 * scale) << "prompt " << prompt << " step " << s;
  }
}

// What the callback saw, per request.
struct Stream {
  std::map<int64_t, std::vector<int64_t>> tokens;
  std::map<int64_t, int> last_flags;  // isLast == 1 seen, per request
  bool flag_before_end = false;       // isLast on a token that was not the last
};

int32_t collect(int64_t id, int64_t token, int32_t is_last, void* user) {
  auto* s = static_cast<Stream*>(user);
  if (s->last_flags[id] > 0) s->flag_before_end = true;  // a token after the "last" one
  s->tokens[id].push_back(token);
  s->last_flags[id] += is_last;
  return 0;
}

// Adds every reference prompt to `engine` (its whole budget of steps), runs it to the end and
// checks the tokens the callback streamed and every step's logits against the reference.
void expect_streams_match(kilnllmEngine* engine, const Reference& ref) {
  Stream stream;
  ASSERT_EQ(kilnllmSetTokenCallback(engine, collect, &stream), KILN_SUCCESS);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < ref.prompts.size(); ++i) ids.push_back(add(engine, ref.prompts[i], ref.steps));
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(stream.tokens[ids[i]], ref.tokens[i]) << "request " << i;
    expect_logits_match(engine, ids[i], ref, i, ref.steps);
  }
  ASSERT_EQ(kilnllmSetTokenCallback(engine, nullptr, nullptr), KILN_SUCCESS);
}

class LlmCApi : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::is_directory(data_dir())) << data_dir() << ": no test data";
    ref_ = load_reference(GetParam());
    ASSERT_GE(ref_.prompts.size(), 20u);
  }
  void TearDown() override {
    if (engine_) EXPECT_EQ(kilnllmDestroyEngine(engine_), KILN_SUCCESS) << kilnGetRecentErrMsg();
  }
  Reference ref_;
  kilnllmEngine* engine_ = nullptr;
};

TEST_P(LlmCApi, CallbackStreamsPyTorchsGreedyTokensAndLogits) {
  engine_ = make_engine(GetParam(), options(16));
  ASSERT_TRUE(engine_);
  kilnllmModelInfo info;
  info.size = sizeof(info);
  ASSERT_EQ(kilnllmGetModelInfo(engine_, &info), KILN_SUCCESS);
  EXPECT_EQ(info.vocab, ref_.vocab);
  EXPECT_EQ(std::string(info.style), GetParam().substr(0, GetParam().find('-')));
  Stream stream;
  ASSERT_EQ(kilnllmSetTokenCallback(engine_, collect, &stream), KILN_SUCCESS);
  // 20 requests, 16 at a time, budgets of 33..48 tokens: they leave at different steps and
  // the waiting ones join.
  std::vector<int64_t> ids, budgets;
  for (size_t i = 0; i < ref_.prompts.size(); ++i) {
    budgets.push_back(ref_.steps - static_cast<int64_t>(5 * (i % 4)));
    ids.push_back(add(engine_, ref_.prompts[i], budgets.back()));
  }
  ASSERT_EQ(kilnllmRunToCompletion(engine_), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_FALSE(stream.flag_before_end);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::vector<int64_t> want = first(ref_.tokens[i], budgets[i]);
    EXPECT_EQ(stream.tokens[ids[i]], want) << "request " << i << " (callback)";
    EXPECT_EQ(tokens_of(engine_, ids[i]), want) << "request " << i;
    EXPECT_EQ(stream.last_flags[ids[i]], 1) << "request " << i;
    EXPECT_EQ(status_of(engine_, ids[i]), KILN_LLM_REQUEST_FINISHED);
    expect_logits_match(engine_, ids[i], ref_, i, budgets[i]);
  }
  const kilnllmStats s = stats_of(engine_);
  EXPECT_EQ(s.blocksUsed, 0);  // every block back
  EXPECT_EQ(s.blocksUsed + s.blocksFree, s.blocksTotal);
  EXPECT_EQ(s.finished, 20);
  EXPECT_EQ(s.waiting + s.running, 0);
  EXPECT_GT(s.peakBlocksUsed, 0);
  EXPECT_EQ(s.blockSize, 16);
  int64_t decoded = 0;
  for (int64_t b : budgets) decoded += b - 1;  // the first token of each comes from its prefill
  EXPECT_EQ(s.decodeTokens, decoded);
  EXPECT_GT(s.meanFragmentation, 0.0);
  EXPECT_LT(s.meanFragmentation, 1.0);
}

TEST_P(LlmCApi, PollingStreamsPyTorchsGreedyTokensStepByStep) {
  engine_ = make_engine(GetParam(), options(8));
  ASSERT_TRUE(engine_);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < 12; ++i) ids.push_back(add(engine_, ref_.prompts[i], ref_.steps));
  std::map<int64_t, std::vector<int64_t>> got;
  std::map<int64_t, kilnllmRequestStatus> last_status;
  int32_t idle = 0;
  int steps = 0;
  int64_t buffer[3];  // smaller than a step's output of some polls: partial reads continue
  while (!idle) {
    ASSERT_EQ(kilnllmStep(engine_, &idle), KILN_SUCCESS) << kilnGetRecentErrMsg();
    ++steps;
    const kilnllmStats s = stats_of(engine_);
    EXPECT_LE(s.running, 8);
    EXPECT_EQ(s.blocksUsed + s.blocksFree, s.blocksTotal);
    for (int64_t id : ids) {
      size_t n = 0;
      do {
        kilnllmRequestStatus status;
        ASSERT_EQ(kilnllmPollTokens(engine_, id, buffer, 3, &n, &status), KILN_SUCCESS) << kilnGetRecentErrMsg();
        got[id].insert(got[id].end(), buffer, buffer + n);
        last_status[id] = status;
      } while (n > 0);
      // One step adds at most two tokens (prefill's first and a decode) to a request.
      EXPECT_LE(got[id].size(), static_cast<size_t>(2 * steps));
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(got[ids[i]], ref_.tokens[i]) << "request " << i;
    EXPECT_EQ(last_status[ids[i]], KILN_LLM_REQUEST_FINISHED);
    size_t n = 99;
    ASSERT_EQ(kilnllmPollTokens(engine_, ids[i], nullptr, 0, &n, nullptr), KILN_SUCCESS);
    EXPECT_EQ(n, 0u);  // all read
  }
  // 12 requests, 8 at a time, 48 tokens each: more steps than one request needs.
  EXPECT_GT(steps, ref_.steps);
}

TEST_P(LlmCApi, KvMemoryPressurePreemptsAndStaysExact) {
  kilnllmEngineOptions o = options(8);
  o.blockSize = 8;
  // 128 token slots for 8 sequences of up to ~90 tokens (48 steps; more at a larger scale, as
  // exactness_full_scale.sh runs it, still far fewer than the 8 sequences need together).
  o.kvBlocks = 16 * ((ref_.steps + 47) / 48);
  engine_ = make_engine(GetParam(), o);
  ASSERT_TRUE(engine_);
  expect_streams_match(engine_, ref_);  // nothing delivered twice
  const kilnllmStats s = stats_of(engine_);
  EXPECT_GT(s.preemptions, 0);
  EXPECT_EQ(s.blocksTotal, o.kvBlocks);
  EXPECT_EQ(s.blocksUsed, 0);
  EXPECT_LE(s.peakBlocksUsed, o.kvBlocks);
}

// Chunked prefill (maxStepTokens): 8 decoding, at most 12 rows a step; still PyTorch's tokens.
TEST_P(LlmCApi, ChunkedPrefillUnderAStepBudgetStaysExact) {
  kilnllmEngineOptions o = options(8);
  o.maxStepTokens = 12;
  engine_ = make_engine(GetParam(), o);
  ASSERT_TRUE(engine_);
  expect_streams_match(engine_, ref_);
  // Every prompt row ran in a pass of at most 12 rows beside the decode rows: more passes than
  // the decode steps alone would need; the chunked-prefill counters say so.
  const kilnllmStats s = stats_of(engine_);
  EXPECT_GT(s.steps, ref_.steps);
  EXPECT_LE(s.peakStepTokens, 12);
  EXPECT_GE(s.peakStepTokens, 8);  // 8 decoding rows at least, once the batch was full
  EXPECT_GT(s.mixedSteps, 0);      // prefill chunks beside decode rows
  EXPECT_LT(s.mixedSteps, s.steps);
  // A caller of the first release (its kilnllmStats ends before peakStepTokens) gets the fields
  // it knows, and nothing is written past its struct.
  kilnllmStats old;
  std::memset(&old, 0xAB, sizeof(old));
  old.size = offsetof(kilnllmStats, peakStepTokens);
  ASSERT_EQ(kilnllmGetStats(engine_, &old), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(old.steps, s.steps);
  EXPECT_EQ(old.prefillTokens, s.prefillTokens);
  EXPECT_EQ(old.size, offsetof(kilnllmStats, peakStepTokens));
  const auto* tail = reinterpret_cast<const unsigned char*>(&old) + offsetof(kilnllmStats, peakStepTokens);
  for (size_t i = 0; i < sizeof(old) - offsetof(kilnllmStats, peakStepTokens); ++i)
    ASSERT_EQ(tail[i], 0xAB) << "byte " << i << " past the caller's struct was written";
}

// Without a budget a whole prompt is one pass: the peak is the largest prompt (one request at
// a time), and no pass mixes prefill and decode rows.
TEST_P(LlmCApi, WholePrefillStatsHaveNoMixedSteps) {
  engine_ = make_engine(GetParam(), options(1));
  ASSERT_TRUE(engine_);
  size_t longest = 0;
  for (size_t i = 0; i < 4; ++i) {
    add(engine_, ref_.prompts[i], 2);
    longest = std::max(longest, ref_.prompts[i].size());
  }
  ASSERT_EQ(kilnllmRunToCompletion(engine_), KILN_SUCCESS) << kilnGetRecentErrMsg();
  const kilnllmStats s = stats_of(engine_);
  EXPECT_EQ(s.peakStepTokens, static_cast<int64_t>(longest));
  EXPECT_EQ(s.mixedSteps, 0);
}

// kvDataType KILN_BF16: half the bytes per block (twice the blocks in kvCacheMiB), and the
// tokens and logits of PyTorch with its cache's K/V rounded to bf16 (export_decoder.py
// --bf16-kv-reference), within fp32's 1e-4 (docs/llm.md: measured 2.5e-5 at most).
TEST_P(LlmCApi, Bf16KvCacheMatchesPyTorchWithABf16Cache) {
  const Reference ref = load_reference(GetParam(), "reference_bf16kv");
  ASSERT_EQ(ref.prompts, ref_.prompts);
  kilnllmEngineOptions o = options(16);
  o.kvCacheMiB = 4;
  o.kvDataType = KILN_BF16;
  engine_ = make_engine(GetParam(), o);
  ASSERT_TRUE(engine_);
  expect_streams_match(engine_, ref);
  kilnllmEngineOptions f = o;
  f.kvDataType = KILN_FLOAT;
  kilnllmEngine* fp32 = make_engine(GetParam(), f);
  ASSERT_TRUE(fp32);
  EXPECT_EQ(stats_of(engine_).blocksTotal, 2 * stats_of(fp32).blocksTotal);
  EXPECT_EQ(kilnllmDestroyEngine(fp32), KILN_SUCCESS);
}

TEST_P(LlmCApi, StopTokenEndsTheRequestAfterDeliveringIt) {
  engine_ = make_engine(GetParam(), options(16));
  ASSERT_TRUE(engine_);
  // PyTorch's token at step 10 of prompt 0 stops it at its first occurrence.
  const std::vector<int64_t>& want_all = ref_.tokens[0];
  const int64_t stop = want_all[10];
  const size_t end = std::find(want_all.begin(), want_all.end(), stop) - want_all.begin() + 1;
  Stream stream;
  ASSERT_EQ(kilnllmSetTokenCallback(engine_, collect, &stream), KILN_SUCCESS);
  const int64_t id = add(engine_, ref_.prompts[0], ref_.steps, {stop});
  const int64_t other = add(engine_, ref_.prompts[1], ref_.steps);
  ASSERT_EQ(kilnllmRunToCompletion(engine_), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(tokens_of(engine_, id), first(want_all, end));
  EXPECT_EQ(stream.last_flags[id], 1);
  EXPECT_EQ(stream.tokens[id].back(), stop);
  EXPECT_EQ(tokens_of(engine_, other), ref_.tokens[1]);
}

// Cancels mid-stream three ways: request 2 by the callback's return value at its 5th token,
// request 5 by kilnllmCancelRequest from inside the callback when request 0 delivers its 10th,
// request 7 between steps after the 6th step. The rest equal PyTorch.
struct CancelPlan {
  kilnllmEngine* engine = nullptr;
  std::vector<int64_t> ids;
  std::map<int64_t, std::vector<int64_t>> delivered;
  kilnError inner_cancel = -1, inner_add = -1, inner_step = -1, inner_destroy = -1;
};

int32_t cancel_some(int64_t id, int64_t token, int32_t, void* user) {
  auto* plan = static_cast<CancelPlan*>(user);
  auto& mine = plan->delivered[id];
  mine.push_back(token);
  if (id == plan->ids[0] && mine.size() == 10) {
    plan->inner_cancel = kilnllmCancelRequest(plan->engine, plan->ids[5]);
    // What may not be called from here is refused, not run.
    const int64_t prompt[] = {1, 2, 3};
    int64_t new_id = 0;
    plan->inner_add = kilnllmAddRequest(plan->engine, prompt, 3, nullptr, &new_id);
    plan->inner_step = kilnllmStep(plan->engine, nullptr);
    plan->inner_destroy = kilnllmDestroyEngine(plan->engine);
  }
  return id == plan->ids[2] && mine.size() == 5 ? 1 : 0;
}

TEST_P(LlmCApi, CancelMidStreamStopsOnlyThoseRequests) {
  engine_ = make_engine(GetParam(), options(16));
  ASSERT_TRUE(engine_);
  CancelPlan plan;
  plan.engine = engine_;
  for (size_t i = 0; i < 10; ++i) plan.ids.push_back(add(engine_, ref_.prompts[i], ref_.steps));
  ASSERT_EQ(kilnllmSetTokenCallback(engine_, cancel_some, &plan), KILN_SUCCESS);
  int32_t idle = 0;
  for (int step = 1; !idle; ++step) {
    ASSERT_EQ(kilnllmStep(engine_, &idle), KILN_SUCCESS) << kilnGetRecentErrMsg();
    if (step == 6) ASSERT_EQ(kilnllmCancelRequest(engine_, plan.ids[7]), KILN_SUCCESS) << kilnGetRecentErrMsg();
  }
  EXPECT_EQ(plan.inner_cancel, KILN_SUCCESS);
  EXPECT_EQ(plan.inner_add, KILN_ERROR_FAILURE);
  EXPECT_EQ(plan.inner_step, KILN_ERROR_FAILURE);
  EXPECT_EQ(plan.inner_destroy, KILN_ERROR_FAILURE);
  for (size_t i = 0; i < plan.ids.size(); ++i) {
    const int64_t id = plan.ids[i];
    const std::vector<int64_t> got = tokens_of(engine_, id);
    EXPECT_EQ(plan.delivered[id], got) << "request " << i << ": what the callback saw is what the request has";
    if (i == 2 || i == 5 || i == 7) {
      EXPECT_EQ(status_of(engine_, id), KILN_LLM_REQUEST_CANCELLED) << "request " << i;
      EXPECT_EQ(got, first(ref_.tokens[i], got.size())) << "request " << i;  // a prefix of PyTorch's
      EXPECT_LT(got.size(), static_cast<size_t>(ref_.steps));
    } else {
      EXPECT_EQ(status_of(engine_, id), KILN_LLM_REQUEST_FINISHED) << "request " << i;
      EXPECT_EQ(got, ref_.tokens[i]) << "request " << i;
    }
  }
  EXPECT_EQ(tokens_of(engine_, plan.ids[2]).size(), 5u);  // nothing after the one that said stop
  // Request 0's 10th token came in step 9 (prefill gives 2 in the first step): request 5 had 10
  // or 9 tokens then, depending on whether it was sampled before request 0 in that step.
  EXPECT_GE(tokens_of(engine_, plan.ids[5]).size(), 9u);
  EXPECT_LE(tokens_of(engine_, plan.ids[5]).size(), 10u);
  EXPECT_EQ(tokens_of(engine_, plan.ids[7]).size(), 7u);  // two in step 1, one in each of steps 2-6
  const kilnllmStats s = stats_of(engine_);
  EXPECT_EQ(s.blocksUsed, 0);
  EXPECT_EQ(s.waiting + s.running, 0);
  // Finished and cancelled requests can be released; then they are unknown.
  for (int64_t id : plan.ids) EXPECT_EQ(kilnllmReleaseRequest(engine_, id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmReleaseRequest(engine_, plan.ids[0]), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmGetRequestStatus(engine_, plan.ids[0], nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
}

INSTANTIATE_TEST_SUITE_P(Styles, LlmCApi, ::testing::Values("gpt2-tiny", "llama-tiny"),
                         [](const auto& info) { return info.param == "gpt2-tiny" ? std::string("Gpt2") : std::string("Llama"); });

bool message_has(const char* text) { return std::string(kilnGetRecentErrMsg()).find(text) != std::string::npos; }

TEST(LlmCApiErrors, BadRequestsFailAloneAndTheOthersFinish) {
  const Reference ref = load_reference("gpt2-tiny");
  ASSERT_FALSE(ref.prompts.empty());
  kilnllmEngine* engine = make_engine("gpt2-tiny", options(16));
  ASSERT_TRUE(engine);
  const int64_t good = add(engine, ref.prompts[0], ref.steps);
  const int64_t kThree[] = {1, 2, 3};
  kilnllmRequestParams p;
  ASSERT_EQ(kilnllmRequestParamsInit(&p), KILN_SUCCESS);
  int64_t id = -1;
  // A token id outside the vocabulary (gpt2-tiny has 512), negative, an empty prompt.
  const int64_t out_of_vocab[] = {1, 512, 3};
  EXPECT_EQ(kilnllmAddRequest(engine, out_of_vocab, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("512") && message_has("outside the vocabulary")) << kilnGetRecentErrMsg();
  const int64_t negative[] = {-1};
  EXPECT_EQ(kilnllmAddRequest(engine, negative, 1, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmAddRequest(engine, out_of_vocab, 0, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("empty prompt")) << kilnGetRecentErrMsg();
  // Longer than the model's context of 512, and within it but not with the new tokens.
  std::vector<int64_t> long_prompt(600, 7);
  EXPECT_EQ(kilnllmAddRequest(engine, long_prompt.data(), long_prompt.size(), &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("context")) << kilnGetRecentErrMsg();
  p.maxNewTokens = 20;
  EXPECT_EQ(kilnllmAddRequest(engine, long_prompt.data(), 500, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("context")) << kilnGetRecentErrMsg();
  // Sampling out of range; a budget of nothing; NULLs; an unknown struct size.
  kilnllmRequestParamsInit(&p);
  p.temperature = 1.0f;
  p.topP = 0.0f;
  EXPECT_EQ(kilnllmAddRequest(engine, kThree, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  kilnllmRequestParamsInit(&p);
  p.maxNewTokens = 0;
  EXPECT_EQ(kilnllmAddRequest(engine, kThree, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  kilnllmRequestParamsInit(&p);
  EXPECT_EQ(kilnllmAddRequest(engine, nullptr, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmAddRequest(engine, kThree, 3, &p, nullptr), KILN_ERROR_INVALID_PARAM);
  p.numStopTokens = 2;  // with stopTokens NULL
  EXPECT_EQ(kilnllmAddRequest(engine, kThree, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  kilnllmRequestParamsInit(&p);
  p.size = 8;
  EXPECT_EQ(kilnllmAddRequest(engine, kThree, 3, &p, &id), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("sizeof(kilnllmRequestParams)")) << kilnGetRecentErrMsg();
  // Unknown ids; releasing one still waiting; reading logits of a token not made yet.
  EXPECT_EQ(kilnllmCancelRequest(engine, 999), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmReleaseRequest(engine, good), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("waiting")) << kilnGetRecentErrMsg();
  float logit;
  EXPECT_EQ(kilnllmGetRequestLogits(engine, good, 0, &logit, 1), KILN_ERROR_INVALID_PARAM);
  size_t n = 0;
  EXPECT_EQ(kilnllmPollTokens(engine, good, nullptr, 4, &n, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmGetRequestTokens(engine, 999, nullptr, 0, &n), KILN_ERROR_INVALID_PARAM);
  kilnllmStats s;
  s.size = 3;
  EXPECT_EQ(kilnllmGetStats(engine, &s), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmGetStats(engine, nullptr), KILN_ERROR_INVALID_PARAM);
  // The good request never noticed.
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(tokens_of(engine, good), ref.tokens[0]);
  std::vector<float> short_row(ref.vocab - 1);
  EXPECT_EQ(kilnllmGetRequestLogits(engine, good, 0, short_row.data(), short_row.size()), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmGetRequestLogits(engine, good, ref.steps, short_row.data(), ref.vocab), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
}

TEST(LlmCApiErrors, ContextBeyondTheWholeKvPoolIsBadAlloc) {
  kilnllmEngineOptions o = options(4);
  o.blockSize = 8;
  o.kvBlocks = 4;  // 32 token slots
  kilnllmEngine* engine = make_engine("llama-tiny", o);
  ASSERT_TRUE(engine);
  std::vector<int64_t> prompt(30, 5);
  kilnllmRequestParams p;
  kilnllmRequestParamsInit(&p);
  p.maxNewTokens = 8;
  int64_t id = -1;
  EXPECT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &p, &id), KILN_ERROR_BAD_ALLOC);
  EXPECT_TRUE(message_has("KV blocks")) << kilnGetRecentErrMsg();
  p.maxNewTokens = 3;  // 32 tokens: fits exactly
  EXPECT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &p, &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(tokens_of(engine, id).size(), 3u);
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
}

TEST(LlmCApiErrors, SeededSamplingRepeatsAndTopKOneIsGreedy) {
  const Reference ref = load_reference("llama-tiny");
  ASSERT_FALSE(ref.prompts.empty());
  kilnllmEngine* engine = make_engine("llama-tiny", options(16));
  ASSERT_TRUE(engine);
  kilnllmRequestParams sampled;
  kilnllmRequestParamsInit(&sampled);
  sampled.maxNewTokens = 20;
  sampled.temperature = 1.5f;
  sampled.topK = 50;
  sampled.topP = 0.9f;
  sampled.seed = 11;
  kilnllmRequestParams top1 = sampled;
  top1.topK = 1;
  const std::vector<int64_t>& prompt = ref.prompts[3];
  int64_t a, b, k1;
  ASSERT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &sampled, &a), KILN_SUCCESS);
  ASSERT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &sampled, &b), KILN_SUCCESS);
  ASSERT_EQ(kilnllmAddRequest(engine, prompt.data(), prompt.size(), &top1, &k1), KILN_SUCCESS);
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(tokens_of(engine, a), tokens_of(engine, b));
  EXPECT_EQ(tokens_of(engine, k1), first(ref.tokens[3], 20));  // top-1 sampling is PyTorch's greedy
  EXPECT_NE(tokens_of(engine, a), tokens_of(engine, k1));
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
}

TEST(LlmCApiErrors, BadEnginesAndHandlesAreErrorCodes) {
  kilnllmEngine* engine = nullptr;
  // Not a decoder directory, missing, NULL.
  EXPECT_EQ(kilnllmCreateEngine("no/such/dir", nullptr, &engine), KILN_ERROR_INVALID_FILE);
  EXPECT_TRUE(message_has("not a Kiln decoder directory")) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmCreateEngine(data_dir().c_str(), nullptr, &engine), KILN_ERROR_INVALID_FILE);
  EXPECT_TRUE(message_has("config.json")) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmCreateEngine(nullptr, nullptr, &engine), KILN_ERROR_INVALID_PARAM);
  const std::string model = data_dir() + "/gpt2-tiny";
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), nullptr, nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(engine, nullptr);
  // Options out of range.
  kilnllmEngineOptions o;
  kilnllmEngineOptionsInit(&o);
  o.blockSize = 0;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("blockSize")) << kilnGetRecentErrMsg();
  kilnllmEngineOptionsInit(&o);
  o.maxBatch = 0;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  kilnllmEngineOptionsInit(&o);
  const int64_t descending[] = {512, 128};
  o.prefillBuckets = descending;
  o.numPrefillBuckets = 2;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("ascending")) << kilnGetRecentErrMsg();
  kilnllmEngineOptionsInit(&o);
  o.kvBlocks = 0;
  o.kvCacheMiB = 0;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  kilnllmEngineOptionsInit(&o);
  o.size = 1;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(engine, nullptr);
  kilnllmEngineOptionsInit(&o);
  o.maxStepTokens = 15;  // below maxBatch 16
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("max step tokens 15")) << kilnGetRecentErrMsg();
  // A caller built against the first release's struct (ending before maxStepTokens) is served,
  // with no budget, whatever lies past its struct.
  kilnllmEngineOptionsInit(&o);
  o.size = offsetof(kilnllmEngineOptions, maxStepTokens);
  o.maxStepTokens = 3;
  ASSERT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
  engine = nullptr;
  // A KV element type the cache does not hold.
  kilnllmEngineOptionsInit(&o);
  o.kvDataType = KILN_INT8;
  EXPECT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_ERROR_INVALID_PARAM);
  EXPECT_TRUE(message_has("kvDataType")) << kilnGetRecentErrMsg();
  EXPECT_EQ(engine, nullptr);
  // The second release's struct (ending before kvDataType) gets fp32 KV whatever lies past it.
  kilnllmEngineOptionsInit(&o);
  o.size = offsetof(kilnllmEngineOptions, kvDataType);
  o.kvDataType = KILN_INT8;
  ASSERT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
  engine = nullptr;
  // Handles: NULL, foreign, destroyed.
  int foreign = 0;
  auto* fake = reinterpret_cast<kilnllmEngine*>(&foreign);
  int32_t idle;
  EXPECT_EQ(kilnllmStep(nullptr, &idle), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmStep(fake, &idle), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmDestroyEngine(fake), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  kilnllmStats s;
  s.size = sizeof(s);
  EXPECT_EQ(kilnllmGetStats(fake, &s), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  // Custom buckets and a thread count are taken.
  kilnllmEngineOptionsInit(&o);
  const int64_t buckets[] = {64, 256};
  o.prefillBuckets = buckets;
  o.numPrefillBuckets = 2;
  o.numThreads = 1;
  ASSERT_EQ(kilnllmCreateEngine(model.c_str(), &o, &engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  const int64_t prompt[] = {1, 2, 3};
  int64_t id;
  ASSERT_EQ(kilnllmAddRequest(engine, prompt, 3, nullptr, &id), KILN_SUCCESS) << kilnGetRecentErrMsg();
  ASSERT_EQ(kilnllmRunToCompletion(engine), KILN_SUCCESS) << kilnGetRecentErrMsg();
  EXPECT_EQ(tokens_of(engine, id).size(), 16u);  // the default budget
  EXPECT_EQ(stats_of(engine).prefillPaddedTokens, 64);  // the smallest bucket
  ASSERT_EQ(kilnllmDestroyEngine(engine), KILN_SUCCESS);
  EXPECT_EQ(kilnllmStep(engine, &idle), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  EXPECT_EQ(kilnllmDestroyEngine(engine), KILN_ERROR_INVALID_RESOURCE_HANDLE);
  // Init functions reject NULL.
  EXPECT_EQ(kilnllmEngineOptionsInit(nullptr), KILN_ERROR_INVALID_PARAM);
  EXPECT_EQ(kilnllmRequestParamsInit(nullptr), KILN_ERROR_INVALID_PARAM);
}

TEST(LlmCApiErrors, CreatingNeedsTheRuntime) {
  ASSERT_EQ(kilnFinalize(), KILN_SUCCESS);
  kilnllmEngine* engine = nullptr;
  EXPECT_EQ(kilnllmCreateEngine((data_dir() + "/gpt2-tiny").c_str(), nullptr, &engine), KILN_ERROR_UNINITIALIZE);
  EXPECT_EQ(engine, nullptr);
  ASSERT_EQ(kilnInit(nullptr), KILN_SUCCESS) << kilnGetRecentErrMsg();  // for the environment's teardown
}

}  // namespace
