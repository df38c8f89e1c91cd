// The Adam update (kernels/cpu/adam.h, kernels/cuda/adam.h with the options of kernels/adam.h),
// one test body run on every device (kernels/testing/devices.h) against the update computed in
// double from the same float32 state each step (then rounded to float32, as the devices store
// it), over five steps with a gradient scale: w within 1e-6 per element scaled by 1 + |want|,
// m and v within a 2-norm relative 1e-6: a handful of float32 roundings per step (2^-24 = 6e-8
// each), and the CPU's AVX2/AVX-512 clones may fuse multiply-adds where the GPU rounds each
// operation on its own.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "kernels/adam.h"
#include "kernels/cpu/adam.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/adam.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::MaxScaledError;
using testing::RelativeError;

class AdamTest : public testing::DeviceTest {
 protected:
  absl::Status AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count,
                          float grad_scale, const AdamOptions& o) {
    if (cpu()) return cpu::AdamUpdate(w, m, v, g, count, grad_scale, o), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::AdamUpdate(ctx(), w, m, v, g, count, grad_scale, o));
  }
  std::vector<float> Random(size_t n, float stddev) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::mt19937 rng_{20261211};
};

TEST_P(AdamTest, FiveStepsMatchDouble) {
  const int64_t n = 100003;
  const float grad_scale = 0.5f;
  std::vector<float> w = Random(n, 1.0f), m(n, 0.0f), v(n, 0.0f);
  float* dw = Upload(w);
  float* dm = Upload(m);
  float* dv = Upload(v);
  AdamOptions o;
  o.lr = 7e-4f;
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> g = Random(n, 0.01f);
    o.step = step;
    ASSERT_TRUE(AdamUpdate(dw, dm, dv, Upload(g), n, grad_scale, o).ok());
    const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), step);
    const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), step);
    for (int64_t i = 0; i < n; ++i) {
      const double gi = static_cast<double>(g[i]) * grad_scale;
      const double mi = o.beta1 * static_cast<double>(m[i]) + (1.0 - o.beta1) * gi;
      const double vi = o.beta2 * static_cast<double>(v[i]) + (1.0 - o.beta2) * gi * gi;
      w[i] = static_cast<float>(w[i] - o.lr * (mi / bc1) / (std::sqrt(vi / bc2) + o.eps));
      m[i] = static_cast<float>(mi);
      v[i] = static_cast<float>(vi);
    }
    // The next step starts from the device's own state, so errors do not compound.
    EXPECT_LE(MaxScaledError(Download(dw, n), w), 1e-6) << "w after step " << step;
    EXPECT_LE(RelativeError(Download(dm, n), m), 1e-6) << "m after step " << step;
    EXPECT_LE(RelativeError(Download(dv, n), v), 1e-6) << "v after step " << step;
    w = Download(dw, n);
    m = Download(dm, n);
    v = Download(dv, n);
  }
}

TNMT_INSTANTIATE_DEVICE_TEST(AdamTest);

}  // namespace
}  // namespace tnmt::kernels
