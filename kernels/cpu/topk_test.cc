// TopK against a stable sort of the whole row: every k, with ties (values drawn from a few
// levels), an excluded index, rows not a multiple of 16 long, and fewer entries than k, one row
// and two rows at a time; on every instruction-set path this CPU has (the block skip is vectorized per ISA).
#include "kernels/cpu/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_features.h"

namespace tnmt::kernels::cpu {
namespace {

class TopKTest : public ::testing::TestWithParam<CpuIsa> {
 protected:
  void SetUp() override {
    if (static_cast<int>(GetParam()) > static_cast<int>(DetectedIsa())) GTEST_SKIP() << "CPU lacks " << IsaName(GetParam());
    SetIsaForTesting(GetParam());
  }
  void TearDown() override { SetIsaForTesting(CpuIsa::kAvx512); }
};

void Check(const std::vector<float>& logits, int k, int32_t exclude) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  order.erase(std::remove(order.begin(), order.end(), exclude), order.end());
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<float> top(k);
  std::vector<int32_t> ids(k);
  const int n = static_cast<int>(logits.size());
  TopK(top.data(), ids.data(), logits.data(), 1, n, k, exclude);
  // The same row twice: each output row is the one-row result.
  std::vector<float> twice(logits), top2(2 * k);
  twice.insert(twice.end(), logits.begin(), logits.end());
  std::vector<int32_t> ids2(2 * k);
  TopK(top2.data(), ids2.data(), twice.data(), 2, n, k, exclude);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), ids2.begin() + r * k)) << "row " << r;
    EXPECT_TRUE(std::equal(top.begin(), top.end(), top2.begin() + r * k)) << "row " << r;
  }
  for (int i = 0; i < k; ++i) {
    if (i < static_cast<int>(order.size())) {
      EXPECT_EQ(ids[i], order[i]) << "rank " << i << " of k=" << k << ", vocab " << logits.size();
      EXPECT_EQ(top[i], logits[order[i]]);
    } else {
      EXPECT_EQ(ids[i], exclude);
      EXPECT_TRUE(std::isinf(top[i]) && top[i] < 0);
    }
  }
}

TEST_P(TopKTest, MatchesAStableSort) {
  std::mt19937 rng(11);
  for (int vocab : {1, 3, 15, 16, 17, 100, 1000, 8003}) {
    for (int levels : {3, 1000000}) {
      std::uniform_int_distribution<int> level(0, levels - 1);
      std::vector<float> logits(vocab);
      for (float& x : logits) x = static_cast<float>(level(rng)) * 0.25f - 3.0f;
      for (int k : {1, 2, 4, 5, 16}) {
        Check(logits, k, -1);
        Check(logits, k, 0);
        Check(logits, k, vocab / 2);
      }
    }
  }
}

TEST_P(TopKTest, RisingRowsAndInfinities) {
  // Every new value beats the list (the skip never applies), and -inf entries.
  std::vector<float> rising(300);
  for (int i = 0; i < 300; ++i) rising[i] = static_cast<float>(i);
  Check(rising, 4, 299);
  std::vector<float> flat(64, -INFINITY);
  flat[40] = 1.0f;
  Check(flat, 3, -1);
  // A late winner in each position of a 64-block, and -inf entries among them.
  for (int at = 0; at < 130; ++at) {
    std::vector<float> row(131, 0.0f);
    row[5] = -INFINITY;
    row[at] = 2.0f;
    row[130 - at] = 1.0f;
    Check(row, 2, -1);
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, TopKTest,
                         ::testing::Values(CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512),
                         [](const auto& info) { return std::string(IsaName(info.param)); });

}  // namespace
}  // namespace tnmt::kernels::cpu
