// What only the CUDA elementwise kernels have; the operations both devices have are tested once
// for every device in kernels/testing/elementwise_devices_test.cc. ScaleInPlace (the training
// graph's loss scaling; no CPU kernel) bit for bit against a host loop (one correctly rounded
// product per element), and the argument errors the CUDA kernels return (the CPU's return
// nothing): negative counts, activations without a CUDA kernel, d < 1.
#include "kernels/cuda/elementwise.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class CudaElementwiseTest : public CudaTest {};

TEST_F(CudaElementwiseTest, ScaleInPlace) {
  for (int64_t count : {int64_t{1}, int64_t{4099}, int64_t{1000003}}) {
    const std::vector<float> x = Random(count);
    std::vector<float> scaled(count);
    for (int64_t i = 0; i < count; ++i) scaled[i] = x[i] * 0.37f;
    float* d_x = ToDevice(x);
    ASSERT_TRUE(ScaleInPlace(*ctx_, d_x, count, 0.37f).ok());
    const std::vector<float> got = ToHost(d_x, count);
    EXPECT_EQ(std::memcmp(got.data(), scaled.data(), count * sizeof(float)), 0) << count;
  }
}

TEST_F(CudaElementwiseTest, InvalidArguments) {
  float* p = Alloc<float>(16);
  EXPECT_EQ(Add(*ctx_, nullptr, nullptr, nullptr, -1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScaleInPlace(*ctx_, p, -1, 2.0f).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(BiasActivation(*ctx_, p, p, 1, 16, Activation::kSwish).ok());  // no CUDA kernel
  EXPECT_FALSE(ActivationBackward(*ctx_, p, p, p, -1, Activation::kRelu).ok());
  EXPECT_FALSE(ActivationBackward(*ctx_, p, p, p, 16, Activation::kSwish).ok());
  EXPECT_FALSE(LayerNormBackward(*ctx_, p, p, p, p, p, p, 1, 0, 1e-5f).ok());
  EXPECT_FALSE(AccumulateColumnSum(*ctx_, p, p, -1, 4).ok());
  EXPECT_TRUE(ctx_->Synchronize().ok());
}

}  // namespace
}  // namespace tnmt::kernels::cuda
