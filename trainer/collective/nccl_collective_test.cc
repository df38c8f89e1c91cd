// NCCL collective on one GPU per rank: all-reduce and broadcast over device memory, with the
// id bootstrapped through the in-process group. Skips without a CUDA device.
#include "trainer/collective/nccl_collective.h"

#include <cuda_runtime.h>

#include <vector>

#include <gtest/gtest.h>

namespace tnmt::train {
namespace {

TEST(NcclCollectiveTest, SingleRankAllReduceAndBroadcast) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  auto group = MakeInProcessGroup(1);
  auto nccl = MakeNcclCollective(group[0].get(), 0, nullptr);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  std::vector<float> host = {1, 2, 3};
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 3), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(d, host.data(), sizeof(float) * 3, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*nccl)->AllReduceSum(d, 3).ok());
  ASSERT_TRUE((*nccl)->Broadcast(d, 3, 0).ok());
  EXPECT_FALSE((*nccl)->Broadcast(d, 3, 1).ok());
  ASSERT_EQ(cudaMemcpy(host.data(), d, sizeof(float) * 3, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(host, (std::vector<float>{1, 2, 3}));
  cudaFree(d);
}

}  // namespace
}  // namespace tnmt::train
