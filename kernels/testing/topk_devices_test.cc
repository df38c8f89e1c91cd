// TopK (kernels/cpu/topk.h, kernels/cuda/topk.h), one test body run on every device
// (kernels/testing/devices.h) against a full sort on the host in the engine's beam order: value
// descending, ties by lower id, an excluded id (the pad) never chosen. Rows with many ties, all
// tied, -inf, +inf and -0; k from 1 to 256 (the GPU's limit) and k equal to the eligible count.
// Values and ids must be exactly the sort's.
//
// On one device only: rows with fewer eligible entries than k (the CPU fills -inf and the
// excluded id; the GPU rejects them) and each instruction-set path are CPU checks
// (kernels/cpu/topk_test.cc); NaN's rank and the argument errors are GPU checks
// (kernels/cuda/topk_test.cc).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/topk.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/topk.h"
#endif

namespace tnmt::kernels {
namespace {

class TopKTest : public testing::DeviceTest {
 protected:
  absl::Status TopK(float* values, int32_t* ids, const float* x, int64_t rows, int n, int k,
                    int32_t exclude) {
    if (cpu()) return cpu::TopK(values, ids, x, rows, n, k, exclude), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::TopK(ctx(), values, ids, x, rows, n, k, exclude));
  }
};

TEST_P(TopKTest, MatchesFullSort) {
  struct Case {
    int rows, n, k, exclude;
    bool ties;
  };
  const Case cases[] = {{64, 32000, 8, 1, false}, {128, 8000, 4, 1, false}, {16, 32000, 64, 0, true},
                        {9, 8000, 256, -1, true}, {5, 37, 36, 3, true},     {3, 1, 1, -1, false},
                        {7, 1000, 1, 999, true},  {4, 17, 5, 16, true},     {256, 32000, 64, 1, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("rows ", c.rows, " n ", c.n, " k ", c.k, " exclude ", c.exclude));
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(c.rows) * c.n);
    for (float& v : x) v = dist(rng_);
    std::uniform_int_distribution<int> pick(0, c.n - 1);
    for (int r = 0; r < c.rows; ++r) {
      float* row = x.data() + static_cast<size_t>(r) * c.n;
      if (c.ties) {
        for (int j = 0; j < c.n; ++j) row[j] = std::round(row[j] * 2.0f) / 2.0f;  // many ties
        if (r == 0) std::fill(row, row + c.n, 1.25f);                             // all tied
      }
      if (c.n > 4) {
        row[pick(rng_)] = -INFINITY;
        if (r == 1) row[pick(rng_)] = INFINITY;
        if (r == 2) row[pick(rng_)] = -0.0f;
      }
      if (c.exclude >= 0) row[c.exclude] = 100.0f;  // would win if not excluded
    }
    float* values = Alloc<float>(static_cast<size_t>(c.rows) * c.k);
    int32_t* ids = Alloc<int32_t>(static_cast<size_t>(c.rows) * c.k);
    ASSERT_TRUE(TopK(values, ids, Upload(x), c.rows, c.n, c.k, c.exclude).ok());
    const std::vector<float> got_values = Download(values, static_cast<size_t>(c.rows) * c.k);
    const std::vector<int32_t> got_ids = Download(ids, static_cast<size_t>(c.rows) * c.k);
    int mismatches = 0;
    for (int r = 0; r < c.rows; ++r) {
      const float* row = x.data() + static_cast<size_t>(r) * c.n;
      std::vector<int> order;
      for (int j = 0; j < c.n; ++j) {
        if (j != c.exclude) order.push_back(j);
      }
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
      for (int t = 0; t < c.k; ++t) {
        const int32_t want = order[t];
        const int32_t got = got_ids[static_cast<size_t>(r) * c.k + t];
        const float value = got_values[static_cast<size_t>(r) * c.k + t];
        // -0 and +0 tie: the id check covers their order.
        if ((got != want || value != row[want]) && ++mismatches <= 5) {
          ADD_FAILURE() << "row " << r << " rank " << t << ": got id " << got << " (" << value << "), want "
                        << want << " (" << row[want] << ")";
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(TopKTest);

}  // namespace
}  // namespace tnmt::kernels
