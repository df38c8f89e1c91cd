// What only the GPU's top-k promises (TopK on both devices is tested once for every device in
// kernels/testing/topk_devices_test.cc): NaN ranks below every number, ties by lower id (rows
// with many NaN and an excluded pad id against a partial sort in that order), and its argument
// checks (k above the eligible count or kMaxTopK).
#include "kernels/cuda/topk.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <tuple>
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

// Every third entry NaN (the pad id excluded): the k chosen are the first k of the row sorted
// by Better, NaN entries only once the numbers run out (k up to every eligible entry).
TEST_F(TopKTest, NaNRanksLowest) {
  const int32_t pad = 1;
  for (auto [rows, n, k] : {std::tuple<int, int, int>{4, 37, 36}, {3, 8000, 256}, {64, 32000, 8}}) {
    std::vector<float> x = Random(static_cast<size_t>(rows) * n, 0.0f, 3.0f);
    for (size_t i = 0; i < x.size(); i += 3) x[i] = NAN;
    float* dvals = Alloc<float>(static_cast<size_t>(rows) * k);
    int32_t* dids = Alloc<int32_t>(static_cast<size_t>(rows) * k);
    ASSERT_TRUE(TopK(*ctx_, dvals, dids, ToDevice(x), rows, n, k, pad).ok());
    const std::vector<int32_t> ids = ToHost(dids, static_cast<size_t>(rows) * k);
    const std::vector<float> vals = ToHost(dvals, static_cast<size_t>(rows) * k);
    for (int r = 0; r < rows; ++r) {
      const float* row = x.data() + static_cast<size_t>(r) * n;
      std::vector<int32_t> ranked(n);
      std::iota(ranked.begin(), ranked.end(), 0);
      ranked.erase(ranked.begin() + pad);
      std::partial_sort(ranked.begin(), ranked.begin() + k, ranked.end(),
                        [&](int32_t a, int32_t b) { return Better(row[a], a, row[b], b); });
      ranked.resize(k);
      const std::vector<int32_t> got(ids.begin() + static_cast<size_t>(r) * k, ids.begin() + static_cast<size_t>(r + 1) * k);
      ASSERT_EQ(got, ranked) << "n " << n << " k " << k << " row " << r;
      for (int t = 0; t < k; ++t) {
        const float v = vals[static_cast<size_t>(r) * k + t];
        ASSERT_TRUE(std::isnan(row[ranked[t]]) ? std::isnan(v) : v == row[ranked[t]]) << "rank " << t;
      }
    }
  }
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 10, 10, 3).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopK(*ctx_, nullptr, nullptr, nullptr, 1, 1000, kMaxTopK + 1, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tnmt::kernels::cuda
