// NCCL collective on one GPU per rank, the id bootstrapped through the in-process group:
// synchronous all-reduce and broadcast, queued (async) all-reduce of floats and doubles on a
// caller's stream; with two or more GPUs, a group of threads (one GPU each) sums exactly and
// identically on every rank. Skips without a CUDA device ("SKIPPED: no CUDA device").
#include "trainer/collective/nccl_collective.h"

#include <cuda_runtime.h>

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::train {
namespace {

using kernels::cuda::testing::NoDeviceReason;

TEST(NcclCollectiveTest, SingleRankAllReduceAndBroadcast) {
  const std::string reason = NoDeviceReason();
  if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
  auto group = MakeInProcessGroup(1);
  auto nccl = MakeNcclCollective(group[0].get(), 0, nullptr);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->device(), 0);
  std::vector<float> host = {1, 2, 3};
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 3), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), sizeof(float) * 3, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*nccl)->AllReduceSum(d, 3).ok());
  ASSERT_TRUE((*nccl)->Broadcast(d, 3, 0).ok());
  EXPECT_FALSE((*nccl)->Broadcast(d, 3, 1).ok());
  ASSERT_EQ(cudaMemcpy(host.data(), d, sizeof(float) * 3, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, (std::vector<float>{1, 2, 3}));

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<double> hd = {0.5, -2.25};
  double* dd = nullptr;
  ASSERT_EQ(cudaMalloc(&dd, sizeof(double) * 2), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dd, hd.data(), sizeof(double) * 2, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*nccl)->AllReduceSumAsync(d, 3, stream).ok());
  ASSERT_TRUE((*nccl)->AllReduceSumAsync(dd, 2, stream).ok());
  ASSERT_TRUE((*nccl)->AllReduceSumAsync(dd, 0, stream).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hd.data(), dd, sizeof(double) * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(hd, (std::vector<double>{0.5, -2.25}));
  cudaStreamDestroy(stream);
  cudaFree(dd);
  cudaFree(d);
}

TEST(NcclCollectiveTest, ThreadsOnSeveralGpusSumIdentically) {
  const std::string reason = NoDeviceReason();
  if (!reason.empty()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << reason << ")";
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, found " << devices;
  const int n = std::min(devices, 4);
  const int64_t count = 1 << 20;
  auto group = MakeInProcessGroup(n);
  std::vector<std::vector<float>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto nccl = MakeNcclCollective(group[r].get(), r, nullptr);
      ASSERT_TRUE(nccl.ok()) << nccl.status();
      std::vector<float> h(count);
      for (int64_t i = 0; i < count; ++i) h[i] = static_cast<float>((i % 1000) * (r + 1)) * 0.25f;
      float* d = nullptr;
      ASSERT_EQ(cudaMalloc(&d, sizeof(float) * count), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(d, h.data(), sizeof(float) * count, cudaMemcpyHostToDevice), cudaSuccess);
      cudaStream_t stream;
      ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
      ASSERT_TRUE((*nccl)->AllReduceSumAsync(d, count / 2, stream).ok());
      ASSERT_TRUE((*nccl)->AllReduceSumAsync(d + count / 2, count - count / 2, stream).ok());
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      out[r].resize(count);
      ASSERT_EQ(cudaMemcpy(out[r].data(), d, sizeof(float) * count, cudaMemcpyDeviceToHost), cudaSuccess);
      cudaStreamDestroy(stream);
      cudaFree(d);
    });
  }
  for (auto& t : threads) t.join();
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(out[r].size(), static_cast<size_t>(count));
    for (int64_t i = 0; i < count; i += 997) {
      ASSERT_EQ(out[r][i], static_cast<float>(i % 1000) * 0.25f * ranks_sum) << "rank " << r << " i " << i;
    }
    EXPECT_EQ(out[r], out[0]) << "rank " << r;
  }
}

}  // namespace
}  // namespace tnmt::train
