// Paged attention against NumPy (tests/llm/make_test_data.py): sequences whose blocks lie in
// shuffled order in the pool, GQA (4 query heads on 2 KV heads), a decode token, a whole
// prompt, a chunk after a cached prefix and a one-token sequence, in one call; and the same
// with a bf16 pool filled through KvCache::write, against NumPy's own bfloat16 rounding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "llm/kv_cache.h"
#include "llm/paged_attention.h"
#include "llm_test_data.h"

namespace kiln::llm {
namespace {

// Runs paged attention over the case's sequences (block tables, (start, count, row) rows) and
// returns the largest absolute difference from `expected`.
double attend_and_compare(const AttentionShape& shape, const Tensor& q, const KvPools& pools, const Tensor& tables,
                          const Tensor& seqs, const Tensor& expected) {
  std::vector<AttentionSequence> list;
  const int64_t width = tables.dims()[1];
  for (int64_t s = 0; s < seqs.dims()[0]; ++s) {
    const int64_t* row = seqs.data<int64_t>() + s * 3;
    list.push_back({tables.data<int32_t>() + s * width, row[0], row[1], row[2]});
  }
  std::vector<float> out(q.num_elements(), 0.0f);
  paged_attention(shape, q.data<float>(), pools, list, out.data());
  double worst = 0;
  for (int64_t i = 0; i < q.num_elements(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - expected.data<float>()[i]));
  return worst;
}

TEST(PagedAttention, MatchesNumPyThroughShuffledBlockTables) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  Tensor k = test::npy("attention/k_pool.npy"), v = test::npy("attention/v_pool.npy");
  Tensor tables = test::npy("attention/tables.npy"), seqs = test::npy("attention/sequences.npy");
  Tensor q = test::npy("attention/q.npy"), expected = test::npy("attention/expected.npy");
  ASSERT_EQ(q.dims().size(), 3u);
  const AttentionShape shape{4, 2, 40, 4};
  ASSERT_EQ(q.dims()[1], shape.heads);
  ASSERT_EQ(q.dims()[2], shape.head_dim);
  const double worst =
      attend_and_compare(shape, q, {k.data<float>(), v.data<float>(), DataType::kFloat32}, tables, seqs, expected);
  EXPECT_LT(worst, 1e-5) << "max abs difference from NumPy";
}

// The fp32 pool above stored into a bf16 KvCache slot by slot: the stored bits equal NumPy's
// round to nearest even (ties included: the case holds exact ties), and attention over them
// equals NumPy's attention over the rounded K/V as tightly as in fp32 (the math is fp32 in
// both; only the stored K/V are rounded).
TEST(PagedAttention, Bf16PoolRoundsToNearestEvenAndMatchesNumPy) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  Tensor k = test::npy("attention/k_pool.npy"), v = test::npy("attention/v_pool.npy");
  Tensor k_bits = test::npy("attention/k_bf16.npy"), v_bits = test::npy("attention/v_bf16.npy");
  Tensor tables = test::npy("attention/tables.npy"), seqs = test::npy("attention/sequences.npy");
  Tensor q = test::npy("attention/q.npy"), expected = test::npy("attention/expected_bf16.npy");
  ASSERT_EQ(k.dims().size(), 4u);
  const AttentionShape shape{4, 2, 40, 4};
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

}  // namespace
}  // namespace kiln::llm
