// The Adam update (kernels/cpu/adam.h, kernels/cuda/adam.h with the options of kernels/adam.h),
// each test body run on every device (kernels/testing/devices.h) against float64 host loops:
// five steps over 100003 elements, each step from the device's own float32 state (w within
// 1e-6 per element scaled by 1 + |want|, m and v within a 2-norm relative 1e-6: a handful of
// float32 roundings per step, 2^-24 = 6e-8 each, where the CPU's AVX2/AVX-512 clones may fuse
// multiply-adds and the GPU rounds each operation on its own); a three-step trajectory in
// double with edge gradients; and the first step's size.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/adam.h"
#include "kernels/cpu/adam.h"
#include "kernels/testing/devices.h"
#if TNMT_TEST_CUDA
#include "kernels/cuda/adam.h"
#endif

namespace tnmt::kernels {
namespace {

using testing::ExpectAllNear;
using testing::MaxScaledError;
using testing::RelativeError;

class AdamTest : public testing::DeviceTest {
 protected:
  absl::Status AdamUpdate(float* w, float* m, float* v, const float* g, int64_t count, float grad_scale,
                          const AdamOptions& o) {
    if (cpu()) return cpu::AdamUpdate(w, m, v, g, count, grad_scale, o), absl::OkStatus();
    return TNMT_IF_CUDA(cuda::AdamUpdate(ctx(), w, m, v, g, count, grad_scale, o));
  }
};

TEST_P(AdamTest, FiveStepsMatchDouble) {
  const int64_t n = 100003;
  const float grad_scale = 0.5f;
  std::vector<float> w = Random(n), m(n, 0.0f), v(n, 0.0f);
  float* dw = Upload(w);
  float* dm = Upload(m);
  float* dv = Upload(v);
  AdamOptions o;
  o.lr = 7e-4f;
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> g = Random(n, 0.0f, 0.01f);
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

// The whole trajectory in double (errors compound over three steps), with gradient scales,
// two eps, a zero gradient (w must not move at all), tiny gradients (eps matters) and large
// ones. m and v suffer float cancellation: absolute floors on the gradient's scale, 1e-5
// relative; w within 1e-7 absolute and 1e-6 relative.
TEST_P(AdamTest, MatchesNaiveDoubleAdamOverThreeSteps) {
  const int64_t n = 64;
  for (float grad_scale : {1.0f, 0.25f, 3.0f}) {
    for (float eps : {1e-9f, 1e-3f}) {
      SCOPED_TRACE(absl::StrCat("grad_scale ", grad_scale, " eps ", eps));
      AdamOptions o;
      o.lr = 2e-3f;
      o.eps = eps;
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::vector<float> w(n);
      for (float& x : w) x = uniform(rng_);
      std::vector<double> wd(w.begin(), w.end()), md(n, 0.0), vd(n, 0.0);
      float* dw = Upload(w);
      float* dm = Upload(std::vector<float>(n, 0.0f));
      float* dv = Upload(std::vector<float>(n, 0.0f));
      for (int64_t t = 1; t <= 3; ++t) {
        std::vector<float> g(n);
        for (float& x : g) x = 2.0f * uniform(rng_);
        g[0] = 0.0f;    // never any gradient: w[0] stays put
        g[1] = 1e-7f;   // tiny gradients: eps matters
        g[2] = -50.0f;  // large ones
        o.step = t;
        ASSERT_TRUE(AdamUpdate(dw, dm, dv, Upload(g), n, grad_scale, o).ok());
        const double b1 = o.beta1, b2 = o.beta2;
        for (int64_t i = 0; i < n; ++i) {
          const double gi = static_cast<double>(g[i]) * grad_scale;
          md[i] = b1 * md[i] + (1.0 - b1) * gi;
          vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
          const double mhat = md[i] / (1.0 - std::pow(b1, t));
          const double vhat = vd[i] / (1.0 - std::pow(b2, t));
          wd[i] -= static_cast<double>(o.lr) * mhat / (std::sqrt(vhat) + eps);
        }
        SCOPED_TRACE(absl::StrCat("step ", t));
        ExpectAllNear(Download(dm, n), md, "m", 1e-6 * grad_scale, 1e-5);
        ExpectAllNear(Download(dv, n), vd, "v", 1e-6 * grad_scale * grad_scale, 1e-5);
        ExpectAllNear(Download(dw, n), wd, "w", 1e-7, 1e-6);
      }
      EXPECT_EQ(Download(dw, 1)[0], static_cast<float>(wd[0]));
    }
  }
}

// With bias correction the first step is lr * sign(g) (eps small), whatever |g| is.
TEST_P(AdamTest, FirstStepMovesByLearningRate) {
  AdamOptions o;
  o.lr = 0.01f;
  o.step = 1;
  float* w = Upload(std::vector<float>{1.0f, 1.0f, 1.0f});
  float* m = Upload(std::vector<float>(3, 0.0f));
  float* v = Upload(std::vector<float>(3, 0.0f));
  ASSERT_TRUE(AdamUpdate(w, m, v, Upload(std::vector<float>{0.001f, -5.0f, 300.0f}), 3, 0.5f, o).ok());
  const std::vector<float> got = Download(w, 3);
  EXPECT_NEAR(got[0], 0.99f, 1e-6);
  EXPECT_NEAR(got[1], 1.01f, 1e-6);
  EXPECT_NEAR(got[2], 0.99f, 1e-6);
}

TNMT_INSTANTIATE_DEVICE_TEST(AdamTest);

}  // namespace
}  // namespace tnmt::kernels
