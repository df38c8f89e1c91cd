// Shared helpers of the CUDA tests: a fixture that skips with "SKIPPED: no CUDA device" when
// there is no GPU or driver (Bazel reports a skipped test as passed; tests/gpu/check.sh counts
// it as not passed), device copies, random data, and the error norms of kernels/testing.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/context.h"
#include "kernels/testing/compare.h"

namespace tnmt::kernels::cuda::testing {

// Empty when a CUDA device is usable, else why not.
inline std::string NoDeviceReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  if (count == 0) return "cudaGetDeviceCount() = 0";
  return "";
}

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoDeviceReason();
    if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
    auto ctx = Context::Create(0);
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
  }
  void TearDown() override {
    if (ctx_ != nullptr) {
      EXPECT_TRUE(ctx_->Synchronize().ok());
      buffers_.clear();
      ctx_.reset();
    }
  }

  cudaStream_t stream() const { return ctx_->stream(); }

  template <typename T>
  T* Alloc(size_t n) {
    auto b = ctx_->allocator().Buffer(std::max<size_t>(n, 1) * sizeof(T));
    EXPECT_TRUE(b.ok()) << b.status();
    buffers_.push_back(std::move(*b));
    return buffers_.back().template as<T>();
  }
  template <typename T>
  T* ToDevice(const std::vector<T>& h) {
    T* d = Alloc<T>(h.size());
    EXPECT_EQ(cudaMemcpyAsync(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice, stream()),
              cudaSuccess);
    return d;
  }
  template <typename T>
  std::vector<T> ToHost(const T* d, size_t n) {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream()),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream()), cudaSuccess);
    return h;
  }
  // Fills a device buffer with NaN bytes (0xff), so unwritten outputs fail the comparison.
  void Poison(void* d, size_t bytes) {
    EXPECT_EQ(cudaMemsetAsync(d, 0xff, bytes, stream()), cudaSuccess);
  }
  std::vector<float> Random(size_t n, float mean = 0.0f, float stddev = 1.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }

  std::unique_ptr<Context> ctx_;
  std::vector<DeviceBuffer> buffers_;
  std::mt19937 rng_{20261129};
};

// The error norms of kernels/testing/compare.h.
using ::tnmt::kernels::testing::MaxScaledError;
using ::tnmt::kernels::testing::RelativeError;

}  // namespace tnmt::kernels::cuda::testing
