// Batching policy: hand-worked budget edges, and BatchFill against a naive loop that recomputes
// every prefix's rows and padded tokens from scratch.
#include "engine/runtime/batching_policy.h"

#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace tnmt {
namespace {

struct Sentence {
  int64_t length;
  int rows;
};

// Sentences taken from the front of `offered` by TryAdd until one does not fit.
int64_t Taken(const BatchLimits& limits, int64_t rows_in_use, int64_t tokens_in_use, bool first_always_fits,
              const std::vector<Sentence>& offered) {
  BatchFill fill(limits, rows_in_use, tokens_in_use, first_always_fits);
  for (const Sentence& s : offered) {
    if (!fill.TryAdd(s.length, s.rows)) break;
  }
  return fill.count();
}

// The same from the definition: the longest prefix whose every prefix stays within the limits
// (k sentences cost k x their longest tokens), at least one when first_always_fits.
int64_t NaiveTaken(const BatchLimits& limits, int64_t rows_in_use, int64_t tokens_in_use, bool first_always_fits,
                   const std::vector<Sentence>& offered) {
  int64_t taken = 0;
  for (size_t k = 1; k <= offered.size(); ++k) {
    int64_t rows = rows_in_use, longest = 0;
    for (size_t j = 0; j < k; ++j) {
      rows += offered[j].rows;
      longest = std::max(longest, offered[j].length);
    }
    const bool fits = rows <= limits.max_rows && tokens_in_use + static_cast<int64_t>(k) * longest <= limits.max_tokens;
    if (!fits && !(k == 1 && first_always_fits)) break;
    taken = static_cast<int64_t>(k);
  }
  return taken;
}

TEST(BatchFillTest, EmptyInputTakesNothing) {
  BatchFill fill(BatchLimits{}, 0, 0, true);
  EXPECT_EQ(fill.count(), 0);
  EXPECT_EQ(fill.longest(), 0);
  EXPECT_EQ(fill.rows(), 0);
  EXPECT_EQ(fill.padded_tokens(), 0);
}

TEST(BatchFillTest, SentenceLongerThanTheBudgetRunsAloneOnlyWhenIdle) {
  BatchLimits limits;
  limits.max_tokens = 100;
  BatchFill idle(limits, 0, 0, /*first_always_fits=*/true);
  EXPECT_TRUE(idle.TryAdd(150));
  EXPECT_FALSE(idle.Fits(1));  // 2 x 150 padded tokens
  EXPECT_EQ(idle.count(), 1);
  EXPECT_EQ(idle.padded_tokens(), 150);
  BatchFill busy(limits, 0, 0, /*first_always_fits=*/false);
  EXPECT_FALSE(busy.TryAdd(150));
  EXPECT_EQ(busy.count(), 0);
}

TEST(BatchFillTest, EqualLengthsFillTheBudgetExactly) {
  BatchLimits limits;
  limits.max_tokens = 4096;
  EXPECT_EQ(Taken(limits, 0, 0, true, std::vector<Sentence>(1000, {16, 1})), 256);
  EXPECT_EQ(Taken(limits, 0, 0, true, std::vector<Sentence>(1000, {10, 1})), 409);
  EXPECT_EQ(FullBatch(limits, 16), 256);
  EXPECT_EQ(FullBatch(limits, 10), 409);
}

TEST(BatchFillTest, PaddingIsCounted) {
  BatchLimits limits;
  limits.max_tokens = 25;
  // Longest first: 10, then 2 x 10 = 20, then 3 x 10 = 30 > 25.
  EXPECT_EQ(Taken(limits, 0, 0, true, {{10, 1}, {1, 1}, {1, 1}, {1, 1}}), 2);
  // A longer sentence raises the cost of those before it: 3 x 1, then 4 x 10 = 40 > 25.
  EXPECT_EQ(Taken(limits, 0, 0, true, {{1, 1}, {1, 1}, {1, 1}, {10, 1}, {1, 1}}), 3);
  BatchFill fill(limits, 0, 0, true);
  fill.Add(3);
  fill.Add(7);
  EXPECT_EQ(fill.padded_tokens(), 14);
}

TEST(BatchFillTest, TokensAndRowsInUseCount) {
  BatchLimits limits;
  limits.max_tokens = 100;
  limits.max_rows = 8;
  EXPECT_EQ(Taken(limits, 0, 70, false, std::vector<Sentence>(10, {10, 1})), 3);
  EXPECT_EQ(Taken(limits, 0, 120, false, std::vector<Sentence>(10, {10, 1})), 0);
  EXPECT_EQ(Taken(limits, 4, 0, false, std::vector<Sentence>(10, {1, 2})), 2);  // rows 6, 8
  BatchFill fill(limits, 4, 0, false);
  EXPECT_EQ(fill.rows(), 4);
  fill.Add(1, 4);
  EXPECT_EQ(fill.rows(), 8);
  EXPECT_FALSE(fill.Fits(1, 1));
}

TEST(BatchFillTest, AWideSentenceOverTheRowsRunsAloneOnlyWhenIdle) {
  BatchLimits limits;
  limits.max_rows = 4;
  EXPECT_EQ(Taken(limits, 0, 0, true, {{5, 8}, {5, 1}}), 1);
  EXPECT_EQ(Taken(limits, 0, 0, false, {{5, 8}, {5, 1}}), 0);
  EXPECT_EQ(FullBatch(limits, 5, 8), 1);
  EXPECT_EQ(FullBatch(limits, 5, 2), 2);
}

TEST(BatchFillTest, MatchesNaiveLoop) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 2000; ++trial) {
    BatchLimits limits;
    limits.max_tokens = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    if (trial % 2 == 0) limits.max_rows = std::uniform_int_distribution<int>(1, 40)(rng);
    std::vector<Sentence> offered(std::uniform_int_distribution<int>(0, 12)(rng));
    for (Sentence& s : offered) {
      s.length = std::uniform_int_distribution<int64_t>(1, 60)(rng);
      s.rows = std::uniform_int_distribution<int>(1, 6)(rng);
    }
    if (trial % 3 == 0) {  // the offline order
      std::stable_sort(offered.begin(), offered.end(),
                       [](const Sentence& a, const Sentence& b) { return a.length > b.length; });
    }
    const int64_t rows_in_use = std::uniform_int_distribution<int64_t>(0, 10)(rng);
    const int64_t tokens_in_use = std::uniform_int_distribution<int64_t>(0, 100)(rng);
    const bool first = trial % 5 < 2;
    EXPECT_EQ(Taken(limits, rows_in_use, tokens_in_use, first, offered),
              NaiveTaken(limits, rows_in_use, tokens_in_use, first, offered))
        << "trial " << trial;
  }
}

TEST(FullBatchTest, AtLeastOne) {
  BatchLimits limits;
  limits.max_tokens = 100;
  EXPECT_EQ(FullBatch(limits, 101), 1);
  EXPECT_EQ(FullBatch(limits, 100), 1);
  EXPECT_EQ(FullBatch(limits, 50), 2);
  EXPECT_EQ(FullBatch(limits, 49), 2);
}

TEST(SortLongestFirstTest, StableOnEqualLengths) {
  const std::vector<int64_t> length_of = {3, 5, 3, 9, 5, 1};
  std::vector<int> items = {0, 1, 2, 3, 4, 5};
  SortLongestFirst(&items, length_of);
  EXPECT_EQ(items, (std::vector<int>{3, 1, 4, 0, 2, 5}));
  std::vector<int> none;
  SortLongestFirst(&none, length_of);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace tnmt
