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
#include <string>
#include <vector>

#include "absl/status/status.h"

#if TNMT_TEST_CUDA
#include <cuda_runtime.h>

#include "kernels/cuda/context.h"
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

#if TNMT_TEST_CUDA
// Empty when a CUDA device is usable, else why not.
inline std::string NoCudaDeviceReason() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
  if (count == 0) return "cudaGetDeviceCount() = 0";
  return "";
}
#endif

class DeviceTest : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
#if TNMT_TEST_CUDA
    if (cuda_device()) {
      const std::string reason = NoCudaDeviceReason();
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

// The element-wise comparisons of the tests, each reporting the first five mismatches.

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
