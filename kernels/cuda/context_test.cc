// The caching allocator and the Context: size rounding (no GPU needed), reuse of freed blocks,
// buffers handed back on destruction, out-of-memory as ResourceExhausted with the allocator
// still usable, and a Context's stream/handle/workspace.
#include "kernels/cuda/context.h"

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

TEST(DeviceAllocatorRounding, Granules) {
  EXPECT_EQ(DeviceAllocator::RoundUp(0), 0u);
  EXPECT_EQ(DeviceAllocator::RoundUp(1), 512u);
  EXPECT_EQ(DeviceAllocator::RoundUp(512), 512u);
  EXPECT_EQ(DeviceAllocator::RoundUp(513), 1024u);
  EXPECT_EQ(DeviceAllocator::RoundUp((1 << 20) - 1), size_t{1} << 20);
  EXPECT_EQ(DeviceAllocator::RoundUp((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(DeviceAllocator::RoundUp((size_t{5} << 20) + 7), size_t{6} << 20);
}

class ContextTest : public CudaTest {};

TEST_F(ContextTest, CreatesStreamHandleAndWorkspace) {
  EXPECT_NE(ctx_->stream(), nullptr);
  EXPECT_NE(ctx_->lt(), nullptr);
  EXPECT_EQ(ctx_->workspace_bytes(), Context::kDefaultWorkspaceBytes);
  EXPECT_NE(ctx_->workspace(), nullptr);
  EXPECT_GT(ctx_->props().multiProcessorCount, 0);
  std::printf("device: %s, %d SMs, %.1f GiB, compute capability %d.%d\n", ctx_->props().name,
              ctx_->props().multiProcessorCount,
              ctx_->props().totalGlobalMem / double(1 << 30), ctx_->props().major,
              ctx_->props().minor);
  EXPECT_TRUE(ctx_->Activate().ok());
  EXPECT_TRUE(ctx_->Synchronize().ok());
}

TEST_F(ContextTest, FreedBlocksAreReused) {
  DeviceAllocator a(ctx_->device());
  auto p = a.Allocate(1000);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(a.stats().in_use_bytes, 1024);
  ASSERT_TRUE(a.Free(*p).ok());
  EXPECT_EQ(a.stats().cached_bytes, 1024);
  auto q = a.Allocate(900);  // same granule: the cached block
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  EXPECT_EQ(a.stats().reuses, 1);
  EXPECT_EQ(a.stats().device_allocs, 1);
  ASSERT_TRUE(a.Free(*q).ok());
  auto r = a.Allocate(100);  // 512 B: the cached 1024-byte block is twice that, too big
  ASSERT_TRUE(r.ok());
  EXPECT_NE(*r, *p);
  EXPECT_EQ(a.stats().device_allocs, 2);
  EXPECT_EQ(a.stats().in_use_bytes, 512);
  EXPECT_EQ(a.stats().cached_bytes, 1024);
  EXPECT_FALSE(a.Free(reinterpret_cast<void*>(0x1234)).ok());
  {
    auto b = a.Buffer(3 << 20);  // 4 MiB granule
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a.stats().in_use_bytes, 512 + (4 << 20));
  }
  EXPECT_EQ(a.stats().cached_bytes, 1024 + (4 << 20));
  EXPECT_TRUE(a.ReleaseCache().ok());
  EXPECT_EQ(a.stats().cached_bytes, 0);
  EXPECT_EQ(a.stats().in_use_bytes, 512);
}

TEST_F(ContextTest, OutOfMemoryIsResourceExhaustedAndRecoverable) {
  DeviceAllocator a(ctx_->device());
  auto small = a.Allocate(1 << 20);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE(a.Free(*small).ok());
  auto huge = a.Allocate(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("cudaMalloc"), std::string::npos);
  auto again = a.Allocate(1 << 20);
  EXPECT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

}  // namespace
}  // namespace tnmt::kernels::cuda
