// RowTopK against a stable sort of the whole row: every k, with ties (values drawn from a few
// levels), an excluded index, rows not a multiple of 16 long, and fewer entries than k.
#include "kernels/cpu/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

namespace tnmt::kernels::cpu {
namespace {

void Check(const std::vector<float>& logits, int k, int32_t exclude) {
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  order.erase(std::remove(order.begin(), order.end(), exclude), order.end());
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<float> top(k);
  std::vector<int32_t> ids(k);
  RowTopK(logits.data(), static_cast<int>(logits.size()), k, exclude, top.data(), ids.data());
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

TEST(RowTopK, MatchesAStableSort) {
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

TEST(RowTopK, RisingRowsAndInfinities) {
  // Every new value beats the list (the skip never applies), and -inf entries.
  std::vector<float> rising(300);
  for (int i = 0; i < 300; ++i) rising[i] = static_cast<float>(i);
  Check(rising, 4, 299);
  std::vector<float> flat(64, -INFINITY);
  flat[40] = 1.0f;
  Check(flat, 3, -1);
}

}  // namespace
}  // namespace tnmt::kernels::cpu
