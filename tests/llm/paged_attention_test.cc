// Paged attention against NumPy (tests/llm/make_test_data.py): sequences whose blocks lie in
// shuffled order in the pool, GQA (4 query heads on 2 KV heads), a decode token, a whole
// prompt, a chunk after a cached prefix and a one-token sequence, in one call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "llm/paged_attention.h"
#include "llm_test_data.h"

namespace kiln::llm {
namespace {

TEST(PagedAttention, MatchesNumPyThroughShuffledBlockTables) {
  ASSERT_TRUE(std::filesystem::is_directory(test::data_dir())) << test::data_dir() << ": no test data (ctest runs the llm.make_test_data fixture first)";
  Tensor k = test::npy("attention/k_pool.npy"), v = test::npy("attention/v_pool.npy");
  Tensor tables = test::npy("attention/tables.npy"), seqs = test::npy("attention/sequences.npy");
  Tensor q = test::npy("attention/q.npy"), expected = test::npy("attention/expected.npy");
  ASSERT_EQ(q.dims().size(), 3u);
  const AttentionShape shape{4, 2, 40, 4};
  ASSERT_EQ(q.dims()[1], shape.heads);
  ASSERT_EQ(q.dims()[2], shape.head_dim);
  std::vector<AttentionSequence> list;
  const int64_t width = tables.dims()[1];
  for (int64_t s = 0; s < seqs.dims()[0]; ++s) {
    const int64_t* row = seqs.data<int64_t>() + s * 3;
    list.push_back({tables.data<int32_t>() + s * width, row[0], row[1], row[2]});
  }
  std::vector<float> out(q.num_elements(), 0.0f);
  paged_attention(shape, q.data<float>(), k.data<float>(), v.data<float>(), list, out.data());
  double worst = 0;
  for (int64_t i = 0; i < q.num_elements(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(out[i]) - expected.data<float>()[i]));
  EXPECT_LT(worst, 1e-5) << "max abs difference from NumPy";
}

}  // namespace
}  // namespace kiln::llm
