// Dropout (kernels/cpu/dropout.h, kernels/cuda/dropout.h), one test body run on every device
// (kernels/testing/devices.h) against a host loop over the counter hash
// (kernels/counter_uniform.h): x[i] * (1 / (1 - p)) where CounterUniform(seed, stream, i) >= p,
// else 0. One correctly rounded product per kept element, so every device must give the
// host's bits: the masks are the same on the CPU and the GPU, which lets a run move between
// them. p == 0 leaves x as it is. The kept fraction is 1 - p and streams differ.
//
// On one device only: DropoutFrom, DropoutAdd, DropoutBlock and the fused activation dropout
// are CPU kernels (kernels/cpu/elementwise_test.cc, backward_test.cc); the GPU's attention
// dropout is tested with the attention (attention_devices_test.cc).
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/counter_uniform.h"
#include "kernels/cpu/dropout.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/dropout.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::ExpectSameBits;

class DropoutTest : public testing::DeviceTest {
 protected:
  absl::Status Dropout(float* x, int64_t count, float p, uint64_t seed, uint64_t stream) {
    if (cpu()) return cpu::Dropout(x, count, p, seed, stream), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::Dropout(ctx(), x, count, p, seed, stream));
  }
};

TEST_P(DropoutTest, MasksAreTheCounterHashs) {
  for (int64_t count : {int64_t{1}, int64_t{17}, int64_t{4099}, int64_t{(1 << 20) + 3}}) {
    for (float p : {0.1f, 0.3f, 0.0f}) {
      SCOPED_TRACE(absl::StrCat("count ", count, " p ", p));
      const uint64_t seed = 1234, stream = 7;
      std::normal_distribution<float> dist(0.0f, 1.0f);
      std::vector<float> x(count);
      for (float& v : x) v = dist(rng_);
      std::vector<float> want = x;
      if (p > 0.0f) {
        const float keep_scale = 1.0f / (1.0f - p);
        for (int64_t i = 0; i < count; ++i) {
          want[i] = CounterUniform(seed, stream, static_cast<uint64_t>(i)) >= p ? x[i] * keep_scale : 0.0f;
        }
      }
      float* dx = Upload(x);
      ASSERT_TRUE(Dropout(dx, count, p, seed, stream).ok());
      ExpectSameBits(Download(dx, count), want, "x");
    }
  }
}

// The kept fraction is 1 - p (within 0.01 over 100000 elements), and another stream drops
// other positions (about 2 p (1 - p) n of them differ for independent masks).
TEST_P(DropoutTest, KeepsTheFractionAndStreamsDiffer) {
  const int64_t n = 100000;
  for (float p : {0.1f, 0.3f, 0.5f}) {
    SCOPED_TRACE(absl::StrCat("p ", p));
    float* ones = Upload(std::vector<float>(n, 1.0f));
    float* other = Upload(std::vector<float>(n, 1.0f));
    ASSERT_TRUE(Dropout(ones, n, p, 77, 5).ok());
    ASSERT_TRUE(Dropout(other, n, p, 77, 6).ok());
    const std::vector<float> a = Download(ones, n), b = Download(other, n);
    int64_t kept = 0, differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      kept += a[i] != 0.0f;
      differ += (a[i] == 0.0f) != (b[i] == 0.0f);
    }
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.01);
    EXPECT_GT(differ, n * p * (1.0 - p));
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(DropoutTest);

}  // namespace
}  // namespace tnmt::kernels
