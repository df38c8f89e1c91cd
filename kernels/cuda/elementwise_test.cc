// CUDA row-wise kernels against the CPU kernels on random data. Skips when no CUDA device or
// driver is present.
#include "kernels/cuda/elementwise.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/elementwise.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels {
namespace {

class CudaElementwiseTest : public cuda::testing::CudaTest {
 protected:
  std::vector<float> Random(size_t n) {
    std::normal_distribution<float> dist(0.5f, 2.0f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  std::mt19937 rng_{3};
};

void ExpectClose(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol * (1 + std::fabs(b[i]))) << i;
}

// Bit for bit, separate and in place (out = x), as the layers' residual additions use it.
TEST_F(CudaElementwiseTest, AddMatchesCpu) {
  for (int64_t count : {int64_t{1}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count), r = Random(count);
    std::vector<float> want(count);
    cpu::Add(want.data(), x.data(), r.data(), count);
    float* dx = ToDevice(x);
    float* dout = Alloc<float>(count);
    ASSERT_TRUE(cuda::Add(*ctx_, dout, dx, ToDevice(r), count).ok());
    const std::vector<float> got = ToHost(dout, count);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), count * sizeof(float)), 0) << count;
    ASSERT_TRUE(cuda::Add(*ctx_, dx, dx, ToDevice(r), count).ok());
    const std::vector<float> in_place = ToHost(dx, count);
    EXPECT_EQ(std::memcmp(in_place.data(), want.data(), count * sizeof(float)), 0) << count;
  }
  EXPECT_EQ(cuda::Add(*ctx_, nullptr, nullptr, nullptr, -1).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CudaElementwiseTest, LayerNormMatchesCpu) {
  for (auto [rows, d] : {std::pair<int, int>{1, 1}, {7, 33}, {130, 512}, {3, 1030}}) {
    auto x = Random(rows * d), r = Random(rows * d), g = Random(d), b = Random(d);
    std::vector<float> want(rows * d);
    cpu::LayerNorm(want.data(), x.data(), r.data(), g.data(), b.data(), rows, d, 1e-6f);
    float* dx = ToDevice(x);
    ASSERT_TRUE(
        cuda::LayerNorm(*ctx_, dx, dx, ToDevice(r), ToDevice(g), ToDevice(b), rows, d, 1e-6f).ok());
    ExpectClose(ToHost(dx, rows * d), want, 1e-4f);
  }
}

TEST_F(CudaElementwiseTest, SoftmaxAndBiasActivationMatchCpu) {
  for (auto [rows, n] : {std::pair<int, int>{1, 5}, {9, 257}, {64, 8000}}) {
    auto x = Random(rows * n);
    x[0] = -INFINITY;
    std::vector<float> want = x;
    cpu::Softmax(want.data(), rows, n);
    float* dx = ToDevice(x);
    ASSERT_TRUE(cuda::Softmax(*ctx_, dx, rows, n).ok());
    ExpectClose(ToHost(dx, rows * n), want, 1e-5f);

    for (bool gelu : {false, true}) {
      auto y = Random(rows * n), bias = Random(n);
      std::vector<float> ref = y;
      cpu::BiasActivation(ref.data(), bias.data(), rows, n,
                          gelu ? cpu::Activation::kGelu : cpu::Activation::kRelu);
      float* dy = ToDevice(y);
      const Activation act = gelu ? Activation::kGelu : Activation::kRelu;
      ASSERT_TRUE(cuda::BiasActivation(*ctx_, dy, ToDevice(bias), rows, n, act).ok());
      ExpectClose(ToHost(dy, rows * n), ref, 1e-5f);
    }
  }
}

}  // namespace
}  // namespace tnmt::kernels
