// Helpers shared by the kernels/cpu tests: uniform random inputs and an element-wise
// comparison with a double-precision reference that reports the first few mismatches.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace tnmt::kernels::cpu::testing {

inline std::vector<float> Random(size_t count, std::mt19937& rng, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// got[i] within abs + rel * |want[i]| for every i; reports up to five mismatches.
inline void ExpectAllNear(const std::vector<float>& got, const std::vector<double>& want,
                          const std::string& what, double abs, double rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double tol = abs + rel * std::fabs(want[i]);
    if (!(std::fabs(got[i] - want[i]) <= tol)) {
      ++failures;
      ADD_FAILURE() << what << ": [" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
}

}  // namespace tnmt::kernels::cpu::testing
