// Greedy and top-k / top-p / temperature sampling (sampler.h).
#include "llm/sampler.h"

#include <algorithm>
#include <cmath>

namespace kiln::llm {

Status validate_sampling(const SamplingOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature))
    return invalid_argument("temperature %g: must be a finite value >= 0 (0 is greedy)", o.temperature);
  if (o.top_k < 0) return invalid_argument("top-k %lld: must be >= 0 (0 keeps every token)", (long long)o.top_k);
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) return invalid_argument("top-p %g: must be in (0, 1]", o.top_p);
  return ok_status();
}

int64_t Sampler::sample(const float* logits, int64_t vocab) {
  if (options_.temperature == 0.0f) return std::max_element(logits, logits + vocab) - logits;
  candidates_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  // Highest logit first; ties by lower id, so the order never depends on the sort.
  auto higher = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  int64_t keep = options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), higher);
  // Softmax at the temperature over the kept tokens, then the nucleus.
  const float max_logit = candidates_[0].first;
  double total = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    candidates_[i].first = std::exp((candidates_[i].first - max_logit) / options_.temperature);
    total += candidates_[i].first;
  }
  double cumulative = 0.0;
  int64_t nucleus = keep;
  for (int64_t i = 0; i < keep; ++i) {
    cumulative += candidates_[i].first / total;
    if (cumulative >= options_.top_p) {
      nucleus = i + 1;
      break;
    }
  }
  double mass = 0.0;
  for (int64_t i = 0; i < nucleus; ++i) mass += candidates_[i].first;
  const double r = std::uniform_real_distribution<double>(0.0, mass)(rng_);
  double acc = 0.0;
  for (int64_t i = 0; i < nucleus; ++i) {
    acc += candidates_[i].first;
    if (r < acc) return candidates_[i].second;
  }
  return candidates_[nucleus - 1].second;
}

}  // namespace kiln::llm
