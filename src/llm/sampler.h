// Next-token choice from a row of logits: greedy (temperature 0), or sampling at a
// temperature from the top-k tokens and the top-p nucleus, with a per-request seeded RNG so
// that a run repeats exactly.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kiln::llm {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, first index on ties, as torch.argmax)
  int64_t top_k = 0;         // 0: every token
  float top_p = 1.0f;        // (0, 1]: smallest set of top tokens whose probability reaches it
  uint64_t seed = 0;
};

// Invalid argument naming the field out of range.
Status validate_sampling(const SamplingOptions& options);

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options), rng_(options.seed) {}
  int64_t sample(const float* logits, int64_t vocab);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace kiln::llm
