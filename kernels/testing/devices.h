// One test body per kernel operation, run on every device this binary was built for (the shape
// of CTranslate2's device-parameterised tests): a gtest value-parameterised fixture over
// Device, with buffers that live on the test's device and copies to and from the host.
//
// Devices: kCpu always; kCuda in --config=cuda builds (TNMT_TEST_CUDA), where an instance
// without a usable GPU skips with "SKIPPED: no CUDA device (<why>)" (the words
// tests/gpu/check.sh looks for). CPU-only builds have no kCuda instance at all.
//
// A test reaches a device's kernel through TNMT_IF_CUDA, which keeps the CUDA call out of
// CPU-only builds:
//   if (cpu()) { cpu::Add(out, x, r, n); return absl::OkStatus(); }
//   return TNMT_IF_CUDA(cuda::Add(ctx(), out, x, r, n));
// Buffers (Upload, Alloc) belong to the fixture and are freed after the test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/testing/compare.h"

#if TNMT_TEST_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/context.h"
#include "kernels/cuda/test_util.h"
#define TNMT_IF_CUDA(...) __VA_ARGS__
#else
#define TNMT_IF_CUDA(...) ::absl::UnimplementedError("built without CUDA")
#endif

namespace tnmt::kernels::testing {

enum class Device { kCpu, kCuda };

inline const char* DeviceName(Device d) { return d == Device::kCpu ? "cpu" : "cuda"; }

// The devices of this build: the CPU, and CUDA when built with it.
inline std::vector<Device> BuiltDevices() {
#if TNMT_TEST_CUDA
  return {Device::kCpu, Device::kCuda};
#else
  return {Device::kCpu};
#endif
}

class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
#if TNMT_TEST_CUDA
    if (cuda_device()) {
      const std::string reason = cuda::testing::NoDeviceReason();
      if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
      auto ctx = cuda::Context::Create(0);
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      ctx_ = std::move(*ctx);
    }
#endif
  }
  void TearDown() override {
#if TNMT_TEST_CUDA
    if (ctx_ != nullptr) {
      EXPECT_TRUE(ctx_->Synchronize().ok());
      device_buffers_.clear();
      ctx_.reset();
    }
#endif
  }

  Device device() const { return GetParam(); }
  bool cpu() const { return GetParam() == Device::kCpu; }
  bool cuda_device() const { return GetParam() == Device::kCuda; }
#if TNMT_TEST_CUDA
  cuda::Context& ctx() { return *ctx_; }
#endif

  // n normal floats (mean, stddev) from the fixture's generator: a fixed seed, the same data
  // every run and on every device.
  std::vector<float> Random(size_t n, float mean = 0.0f, float stddev = 1.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }

  // n elements of T on the test's device, uninitialized (NaN bytes on the GPU, see Poison).
  template <typename T>
  T* Alloc(size_t n) {
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
#if TNMT_TEST_CUDA
    if (cuda_device()) {
      auto b = ctx_->allocator().Buffer(bytes);
      EXPECT_TRUE(b.ok()) << b.status();
      device_buffers_.push_back(std::move(*b));
      T* p = device_buffers_.back().template as<T>();
      Poison(p, bytes);
      return p;
    }
#endif
    host_buffers_.push_back(std::make_unique<char[]>(bytes));
    T* p = reinterpret_cast<T*>(host_buffers_.back().get());
    Poison(p, bytes);
    return p;
  }

  // A copy of h on the test's device.
  template <typename T>
  T* Upload(const std::vector<T>& h) {
    T* p = Alloc<T>(h.size());
    Copy(p, h.data(), h.size() * sizeof(T), /*to_device=*/true);
    return p;
  }

  // n elements from the test's device (waits for the device's queued work).
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> h(n);
    Copy(h.data(), p, n * sizeof(T), /*to_device=*/false);
    return h;
  }

  // Fills bytes of a device buffer with 0xff (NaN as float, -1 as int32), so that an output the
  // kernel fails to write fails the comparison.
  void Poison(void* p, size_t bytes) {
#if TNMT_TEST_CUDA
    if (cuda_device()) {
      EXPECT_EQ(cudaMemsetAsync(p, 0xff, bytes, ctx_->stream()), cudaSuccess);
      return;
    }
#endif
    std::memset(p, 0xff, bytes);
  }

  std::mt19937 rng_{20261207};

 private:
  void Copy(void* dst, const void* src, size_t bytes, bool to_device) {
#if TNMT_TEST_CUDA
    if (cuda_device()) {
      EXPECT_EQ(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                ctx_->stream()),
                cudaSuccess);
      EXPECT_EQ(cudaStreamSynchronize(ctx_->stream()), cudaSuccess);
      return;
    }
#endif
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }

  std::vector<std::unique_ptr<char[]>> host_buffers_;
#if TNMT_TEST_CUDA
  std::unique_ptr<cuda::Context> ctx_;
  std::vector<cuda::DeviceBuffer> device_buffers_;
#endif
};

// Instantiates a DeviceTest subclass once per built device, named cpu / cuda.
#define TNMT_INSTANTIATE_DEVICE_TEST(Fixture)                                                               \
  INSTANTIATE_TEST_SUITE_P(Devices, Fixture, ::testing::ValuesIn(::tnmt::kernels::testing::BuiltDevices()), \
                           [](const ::testing::TestParamInfo<::tnmt::kernels::testing::Device>& info) {     \
                             return std::string(::tnmt::kernels::testing::DeviceName(info.param));          \
                           })

}  // namespace tnmt::kernels::testing
