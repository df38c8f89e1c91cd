// What only the GPU's top-k promises (TopK on both devices is tested once for every device in
// kernels/testing/topk_devices_test.cc): NaN ranks below every number (rows with NaN, ties,
// -inf and an excluded pad id against a full sort in that order), and its argument checks
// (k above the eligible count or kMaxTopK).
#include "kernels/cuda/topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class TopKTest : public CudaTest {};

// The engine's order: larger value first, ties by lower id; NaN below everything.
bool Better(float a, int ia, float b, int ib) {
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na != nb) return nb;
  if (!na && a != b) return a > b;
  return ia < ib;
}

TEST_F(TopKTest, NaNRanksLowest) {
  struct Case {
    int rows, n, k, exclude;
    bool ties;
  };
  const Case cases[] = {{64, 32000, 8, 1, false}, {9, 8000, 256, -1, true}, {5, 37, 36, 3, true}};
  for (const Case& c : cases) {
    std::vector<float> x = Random(static_cast<size_t>(c.rows) * c.n, 0.0f, 3.0f);
    std::uniform_int_distribution<int> pick(0, c.n - 1);
    for (int r = 0; r < c.rows; ++r) {
      float* row = x.data() + static_cast<size_t>(r) * c.n;
      if (c.ties) {
        for (int j = 0; j < c.n; ++j) row[j] = std::round(row[j] * 2.0f) / 2.0f;  // many ties
        if (r == 0) std::fill(row, row + c.n, 1.25f);                           // all tied
      }
      if (c.n > 4) {
        row[pick(rng_)] = -INFINITY;
        row[pick(rng_)] = NAN;
        if (r == 1) row[pick(rng_)] = INFINITY;
        if (r == 2) row[pick(rng_)] = -0.0f;
      }
      if (c.exclude >= 0) row[c.exclude] = 100.0f;  // would win if not excluded
    }
    float* dvals = Alloc<float>(static_cast<size_t>(c.rows) * c.k);
    int32_t* dids = Alloc<int32_t>(static_cast<size_t>(c.rows) * c.k);
    Poison(dids, static_cast<size_t>(c.rows) * c.k * sizeof(int32_t));
    ASSERT_TRUE(TopK(*ctx_, dvals, dids, ToDevice(x), c.rows, c.n, c.k, c.exclude).ok());
    std::vector<float> vals = ToHost(dvals, static_cast<size_t>(c.rows) * c.k);
    std::vector<int32_t> ids = ToHost(dids, static_cast<size_t>(c.rows) * c.k);
    int mismatches = 0;
    for (int r = 0; r < c.rows; ++r) {
      const float* row = x.data() + static_cast<size_t>(r) * c.n;
      std::vector<int> order;
      for (int j = 0; j < c.n; ++j) {
        if (j != c.exclude) order.push_back(j);
      }
      std::sort(order.begin(), order.end(), [&](int a, int b) { return Better(row[a], a, row[b], b); });
      for (int t = 0; t < c.k; ++t) {
        const int32_t want = order[t];
        const int32_t got = ids[static_cast<size_t>(r) * c.k + t];
        const float gv = vals[static_cast<size_t>(r) * c.k + t];
        const bool same_value = std::isnan(row[want]) ? std::isnan(gv) : gv == row[want];
        // -0 and +0 tie: then only the order by id matters, which the id check covers.
        if (got != want || !same_value) {
          if (++mismatches <= 5) {
            ADD_FAILURE() << "rows=" << c.rows << " n=" << c.n << " k=" << c.k << " row " << r
                          << " rank " << t << ": got id " << got << " (" << gv << "), want "
                          << want << " (" << row[want] << ")";
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0) << "rows=" << c.rows << " n=" << c.n << " k=" << c.k;
  }
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 10, 10, 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 1000, kMaxTopK + 1, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tnmt::kernels::cuda
