// GpuTimeline on a GPU (its bookkeeping is also tested on the CPU, kernels/timed_calls_test.cc):
// nothing recorded when off, calls by category when on, nested calls counted once, the step
// boundary's gap apart, work + gaps equal to the span two outer events measure, events reused
// window after window, a full pool flushed without losing a call or a gap, no timing inside a
// graph capture, and the allocator and GEMM-plan counters.
#include "kernels/cuda/gpu_timeline.h"

#include <gtest/gtest.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class GpuTimelineTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (ctx_ == nullptr) return;
    auto b = ctx_->allocator().Buffer(kBytes);
    ASSERT_TRUE(b.ok()) << b.status();
    buffer_ = std::move(*b);
  }
  void TearDown() override {
    buffer_.Reset();
    CudaTest::TearDown();
  }
  // Some device work: a memset of 64 MiB.
  absl::Status Work() { return TNMT_CUDA_CHECK(cudaMemsetAsync(buffer_.get(), 1, kBytes, ctx_->stream())); }

  static constexpr size_t kBytes = size_t{64} << 20;
  DeviceBuffer buffer_;
};

TEST_F(GpuTimelineTest, OffRecordsNothing) {
  GpuTimeline& t = ctx_->timeline();
  t.set_enabled(false);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Timed(*ctx_, TimeCategory::kGemm, [&] { return Work(); }).ok());
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->empty());
  EXPECT_EQ(t.events_created(), 0);
}

TEST_F(GpuTimelineTest, CategoriesGapsAndSpan) {
  GpuTimeline& t = ctx_->timeline();
  t.set_enabled(true);
  cudaEvent_t first, last;
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventCreate(&first)).ok());
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventCreate(&last)).ok());
  for (int step = 0; step < 3; ++step) {
    t.StepBoundary();
    ASSERT_TRUE(Timed(*ctx_, TimeCategory::kGemm, [&] { return Work(); }).ok());
    if (step == 0) {
      ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventRecord(first, ctx_->stream())).ok());
    }
    ASSERT_TRUE(Work().ok());  // untimed: a gap inside the step
    ASSERT_TRUE(Timed(*ctx_, TimeCategory::kLoss, [&] {
                  // Nested: counted in the outer call only.
                  EXPECT_TRUE(Timed(*ctx_, TimeCategory::kGemm, [&] { return Work(); }).ok());
                  return Work();
                }).ok());
  }
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventRecord(last, ctx_->stream())).ok());
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  const CategoryTime gemm = a->work[static_cast<int>(TimeCategory::kGemm)];
  const CategoryTime loss = a->work[static_cast<int>(TimeCategory::kLoss)];
  EXPECT_EQ(gemm.calls, 3);
  EXPECT_EQ(loss.calls, 3);
  EXPECT_EQ(a->Calls(), 6);
  EXPECT_GT(gemm.ms, 0);
  EXPECT_GT(loss.ms, gemm.ms);  // two memsets against one
  EXPECT_GT(a->gap_ms, 0);      // the untimed memsets
  EXPECT_EQ(a->betweens, 2);    // steps 2 and 3 start after a boundary
  // From the first step's gemm start to the last loss end: the span, less the first gemm.
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventSynchronize(last)).ok());
  float outer = 0;
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaEventElapsedTime(&outer, first, last)).ok());
  const double span_after_first_gemm = a->SpanMs() - gemm.ms / 3;
  EXPECT_NEAR(span_after_first_gemm, outer, 0.05 + 0.05 * outer);
  std::printf("gemm %.3f ms, loss %.3f ms, gaps %.3f ms, between %.3f ms; span %.3f ms\n", gemm.ms, loss.ms,
              a->gap_ms, a->between_ms, a->SpanMs());
  cudaEventDestroy(first);
  cudaEventDestroy(last);

  // The next window reuses the pool.
  const int64_t events = t.events_created();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Timed(*ctx_, TimeCategory::kCopy, [&] { return Work(); }).ok());
  auto b = t.Take();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->work[static_cast<int>(TimeCategory::kCopy)].calls, 6);
  EXPECT_EQ(b->work[static_cast<int>(TimeCategory::kGemm)].calls, 0);
  EXPECT_EQ(t.events_created(), events);
  t.set_enabled(false);
}

TEST_F(GpuTimelineTest, FullPoolFlushesWithoutLosingCallsOrGaps) {
  GpuTimeline t(CudaEvents(), /*max_events=*/8);
  t.set_enabled(true);
  for (int i = 0; i < 10; ++i) {
    GpuTimeline::Scope s(t, ctx_->stream(), TimeCategory::kOther);
    ASSERT_TRUE(Work().ok());
  }
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->work[static_cast<int>(TimeCategory::kOther)].calls, 10);
  EXPECT_GT(a->flushes, 0);
  EXPECT_LE(t.events_created(), 8);
  EXPECT_GE(a->gap_ms, 0);
  EXPECT_EQ(a->betweens, 0);
}

TEST_F(GpuTimelineTest, NotTimedWhileCapturing) {
  GpuTimeline& t = ctx_->timeline();
  t.set_enabled(true);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaStreamBeginCapture(ctx_->stream(), cudaStreamCaptureModeThreadLocal)).ok());
  ASSERT_TRUE(Timed(*ctx_, TimeCategory::kAttentionForward, [&] { return Work(); }).ok());
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaStreamEndCapture(ctx_->stream(), &graph)).ok());
  ASSERT_TRUE(TNMT_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0)).ok());
  ASSERT_TRUE(Timed(*ctx_, TimeCategory::kGraph, [&] {
                return TNMT_CUDA_CHECK(cudaGraphLaunch(exec, ctx_->stream()));
              }).ok());
  auto a = t.Take();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->work[static_cast<int>(TimeCategory::kAttentionForward)].calls, 0);
  EXPECT_EQ(a->work[static_cast<int>(TimeCategory::kGraph)].calls, 1);
  EXPECT_GT(a->work[static_cast<int>(TimeCategory::kGraph)].ms, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  t.set_enabled(false);
}

TEST_F(GpuTimelineTest, CountsAllocationsAndGemmPlans) {
  ctx_->timeline().set_enabled(true);
  ASSERT_TRUE(TakeDeviceTimes(*ctx_).ok());  // the window so far (workspace, buffer_)
  auto fresh = ctx_->allocator().Buffer(size_t{3} << 30 >> 4);  // not in the cache
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  float* m = buffer_.as<float>();
  ASSERT_TRUE(GemmNT(*ctx_, 64, 64, 64, 1.0f, m, 64, m, 64, 0.0f, m + 64 * 64, 64).ok());
  ASSERT_TRUE(GemmNT(*ctx_, 64, 64, 64, 1.0f, m, 64, m, 64, 0.0f, m + 64 * 64, 64).ok());  // plan reused
  auto a = TakeDeviceTimes(*ctx_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->device_allocs, 1);
  EXPECT_EQ(a->gemm_plans_built, 1);
  auto b = TakeDeviceTimes(*ctx_);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->device_allocs, 0);
  EXPECT_EQ(b->gemm_plans_built, 0);
  ctx_->timeline().set_enabled(false);
}

}  // namespace
}  // namespace tnmt::kernels::cuda
