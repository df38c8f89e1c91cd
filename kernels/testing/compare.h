// Comparisons shared by the kernel tests of every device (host vectors only): element-wise
// tolerances and identical bits (each reporting the first five mismatches), and the 2-norm and
// worst scaled errors. NaN never passes.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace tnmt::kernels::testing {

// got[i] within abs + rel * |want[i]| for every i.
template <typename W>
void ExpectAllNear(const std::vector<float>& got, const std::vector<W>& want, const std::string& what,
                   double abs, double rel) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double w = static_cast<double>(want[i]);
    if (!(std::fabs(static_cast<double>(got[i]) - w) <= abs + rel * std::fabs(w))) {
      ++failures;
      ADD_FAILURE() << what << ": [" << i << "] = " << got[i] << ", want " << w;
    }
  }
}

// ||got - want|| / ||want|| (2-norms, double); NaN anywhere gives NaN (which fails EXPECT_LE).
template <typename A, typename B>
double RelativeError(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    num += d * d;
    den += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// max_i |got - want| / (1 + |want|); NaN anywhere gives NaN.
template <typename A, typename B>
double MaxScaledError(const std::vector<A>& got, const std::vector<B>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])) /
                     (1.0 + std::fabs(static_cast<double>(want[i])));
    if (std::isnan(d)) return d;
    worst = std::max(worst, d);
  }
  return worst;
}

// got and want the same bits.
template <typename T>
void ExpectSameBits(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      ++failures;
      ADD_FAILURE() << what << ": [" << i << "] = " << got[i] << ", want the bits of " << want[i];
    }
  }
}

}  // namespace tnmt::kernels::testing
