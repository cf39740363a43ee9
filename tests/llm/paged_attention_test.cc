// Paged attention against NumPy (tests/llm/make_test_data.py): sequences whose blocks lie in
// shuffled order in the pool, GQA (4 query heads on 2 KV heads), a decode token, a whole
// prompt, a chunk after a cached prefix and a one-token sequence, in one call; and the same
// with a bf16 pool filled through KvCache::write, against NumPy's own bfloat16 rounding. Two
// cases: attention/ (head_dim 40, 4-token blocks: the kernel's plain loops) and attention_wide/
// (head_dim 64, 32-token blocks, 8 query heads on 2 KV heads: its vector loops, whole and
// partial chunks of keys), the latter also one sequence per call on 8 threads, where a decode
// token's KV heads are split between work items.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/parallel.h"
#include "llm/kv_cache.h"
#include "llm/paged_attention.h"
#include "llm_test_data.h"

namespace kiln::llm {
namespace {

// Runs paged attention over the case's sequences (block tables, (start, count, row) rows) and
// returns the largest absolute difference from `expected`; `one_per_call`: a call per sequence.
double attend_and_compare(const AttentionShape& shape, const Tensor& q, const KvPools& pools, const Tensor& tables,
                          const Tensor& seqs, const Tensor& expected, bool one_per_call = false) {
  std::vector<AttentionSequence> list;
  const int64_t width = tables.dims()[1];
  for (int64_t s = 0; s < seqs.dims()[0]; ++s) {
    const int64_t* row = seqs.data<int64_t>() + s * 3;
    list.push_back({tables.data<int32_t>() + s * width, row[0], row[1], row[2]});
  }
  std::vector<float> out(q.num_elements(), 0.0f);
  if (one_per_call)
    for (const AttentionSequence& seq : list) paged_attention(shape, q.data<float>(), pools, {seq}, out.data());
  else
    paged_attention(shape, q.data<float>(), pools, list, out.data());
  double worst = 0;
  for (int64_t i = 0; i < q.num_elements(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - expected.data<float>()[i]));
  return worst;
}

// The case in data directory `dir` with an fp32 pool; `one_per_call`: each sequence in a call
// of its own.
void check_fp32(const std::string& dir, const AttentionShape& shape, bool one_per_call = false) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  Tensor k = test::npy(dir + "/k_pool.npy"), v = test::npy(dir + "/v_pool.npy");
  Tensor tables = test::npy(dir + "/tables.npy"), seqs = test::npy(dir + "/sequences.npy");
  Tensor q = test::npy(dir + "/q.npy"), expected = test::npy(dir + "/expected.npy");
  ASSERT_EQ(q.dims().size(), 3u);
  ASSERT_EQ(q.dims()[1], shape.heads);
  ASSERT_EQ(q.dims()[2], shape.head_dim);
  ASSERT_EQ(k.dims()[1], shape.block_size);
  const double worst = attend_and_compare(shape, q, {k.data<float>(), v.data<float>(), DataType::kFloat32}, tables,
                                          seqs, expected, one_per_call);
  EXPECT_LT(worst, 1e-5) << "max abs difference from NumPy";
}

// The fp32 pool above stored into a bf16 KvCache slot by slot: the stored bits equal NumPy's
// round to nearest even (ties included: the case holds exact ties), and attention over them
// equals NumPy's attention over the rounded K/V as tightly as in fp32 (the math is fp32 in
// both; only the stored K/V are rounded).
void check_bf16(const std::string& dir, const AttentionShape& shape) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  Tensor k = test::npy(dir + "/k_pool.npy"), v = test::npy(dir + "/v_pool.npy");
  Tensor k_bits = test::npy(dir + "/k_bf16.npy"), v_bits = test::npy(dir + "/v_bf16.npy");
  Tensor tables = test::npy(dir + "/tables.npy"), seqs = test::npy(dir + "/sequences.npy");
  Tensor q = test::npy(dir + "/q.npy"), expected = test::npy(dir + "/expected_bf16.npy");
  ASSERT_EQ(k.dims().size(), 4u);
  ASSERT_EQ(q.dims()[2], shape.head_dim);
  const int64_t blocks = k.dims()[0], row = shape.kv_heads * shape.head_dim;
  ASSERT_EQ(k.dims()[1], shape.block_size);
  ASSERT_EQ(k_bits.num_elements(), k.num_elements());
  auto cache = KvCache::create(1, shape.kv_heads, shape.head_dim, blocks, shape.block_size, DataType::kBFloat16);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  for (int32_t b = 0; b < blocks; ++b)
    for (int64_t slot = 0; slot < shape.block_size; ++slot) {
      const int64_t at = (b * shape.block_size + slot) * row;
      (*cache)->write(0, &b, slot, k.data<float>() + at, v.data<float>() + at);
    }
  const KvPools pools = (*cache)->pools(0);
  ASSERT_EQ(pools.dtype, DataType::kBFloat16);
  int64_t k_wrong = 0, v_wrong = 0;
  for (int64_t i = 0; i < k.num_elements(); ++i) {
    k_wrong += static_cast<const uint16_t*>(pools.k)[i] != k_bits.data<uint16_t>()[i];
    v_wrong += static_cast<const uint16_t*>(pools.v)[i] != v_bits.data<uint16_t>()[i];
  }
  EXPECT_EQ(k_wrong, 0) << "K elements rounded unlike NumPy";
  EXPECT_EQ(v_wrong, 0) << "V elements rounded unlike NumPy";
  EXPECT_EQ(static_cast<const uint16_t*>(pools.k)[0], 0x3F80);  // tie, even: kept
  EXPECT_EQ(static_cast<const uint16_t*>(pools.k)[1], 0x3F82);  // tie, odd: rounded up

  const double worst = attend_and_compare(shape, q, pools, tables, seqs, expected);
  EXPECT_LT(worst, 1e-5) << "max abs difference from NumPy over the bf16-rounded K/V";
}

// padded_keys (the fixed-length baselines of kiln llm-bench): every token also scores keys past
// its causal ones, up to a padded length that is neither a multiple of the block nor of the
// vector, read from other sequences' blocks (finite, nonzero, unrelated values): weight 0, so
// the result is NumPy's causal attention as before. A masking slip would mix those values in.
void check_padded(const std::string& dir, const AttentionShape& shape) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data";
  Tensor k = test::npy(dir + "/k_pool.npy"), v = test::npy(dir + "/v_pool.npy");
  Tensor tables = test::npy(dir + "/tables.npy"), seqs = test::npy(dir + "/sequences.npy");
  Tensor q = test::npy(dir + "/q.npy"), expected = test::npy(dir + "/expected.npy");
  const int64_t blocks = k.dims()[0], bs = shape.block_size, width = tables.dims()[1];
  int64_t longest = 0;
  for (int64_t s = 0; s < seqs.dims()[0]; ++s)
    longest = std::max(longest, seqs.data<int64_t>()[s * 3] + seqs.data<int64_t>()[s * 3 + 1]);
  const int64_t padded = longest + 2 * bs + 3;
  const int64_t padded_width = (padded + bs - 1) / bs;
  std::vector<int32_t> wide(seqs.dims()[0] * padded_width);
  std::vector<AttentionSequence> list;
  for (int64_t s = 0; s < seqs.dims()[0]; ++s) {
    for (int64_t b = 0; b < padded_width; ++b) {
      const int32_t own = b < width ? tables.data<int32_t>()[s * width + b] : -1;
      wide[s * padded_width + b] = own >= 0 ? own : static_cast<int32_t>((7 * s + 3 * b + 1) % blocks);
    }
    const int64_t* row = seqs.data<int64_t>() + s * 3;
    list.push_back({wide.data() + s * padded_width, row[0], row[1], row[2], padded});
  }
  std::vector<float> out(q.num_elements(), 0.0f);
  paged_attention(shape, q.data<float>(), {k.data<float>(), v.data<float>(), DataType::kFloat32}, list, out.data());
  double worst = 0;
  for (int64_t i = 0; i < q.num_elements(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - expected.data<float>()[i]));
  EXPECT_LT(worst, 1e-5) << "max abs difference from NumPy with " << padded << " padded keys";
}

TEST(PagedAttention, PaddedKeysWeighNothing) {
  check_padded("attention", {4, 2, 40, 4});
  check_padded("attention_wide", {8, 2, 64, 32});
}

TEST(PagedAttention, MatchesNumPyThroughShuffledBlockTables) { check_fp32("attention", {4, 2, 40, 4}); }

TEST(PagedAttention, Bf16PoolRoundsToNearestEvenAndMatchesNumPy) { check_bf16("attention", {4, 2, 40, 4}); }

TEST(PagedAttention, WideHeadsAndBlocksMatchNumPy) { check_fp32("attention_wide", {8, 2, 64, 32}); }

TEST(PagedAttention, WideBf16PoolMatchesNumPy) { check_bf16("attention_wide", {8, 2, 64, 32}); }

TEST(PagedAttention, WideOneSequencePerCallOnEightThreadsMatchesNumPy) {
  const int before = num_threads();
  set_num_threads(8);
  check_fp32("attention_wide", {8, 2, 64, 32}, true);
  set_num_threads(before);
}

}  // namespace
}  // namespace kiln::llm
