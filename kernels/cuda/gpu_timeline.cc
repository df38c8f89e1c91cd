// CudaEvents and TakeDeviceTimes; see gpu_timeline.h.
#include "kernels/cuda/gpu_timeline.h"

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"

namespace tnmt::kernels::cuda {

absl::Status CudaEvents::Create(Event* e) const { return TNMT_CUDA_CHECK(cudaEventCreate(e)); }

void CudaEvents::Destroy(Event e) const { cudaEventDestroy(e); }

absl::Status CudaEvents::Record(Event e, Stream s) const { return TNMT_CUDA_CHECK(cudaEventRecord(e, s)); }

bool CudaEvents::Capturing(Stream s) const {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return capture != cudaStreamCaptureStatusNone;
}

absl::Status CudaEvents::Wait(Event e) const { return TNMT_CUDA_CHECK(cudaEventSynchronize(e)); }

absl::Status CudaEvents::Elapsed(float* ms, Event from, Event to) const {
  return TNMT_CUDA_CHECK(cudaEventElapsedTime(ms, from, to));
}

absl::StatusOr<TimeAccount> TakeDeviceTimes(Context& ctx) {
  return ctx.timeline().Take(ctx.allocator().stats().device_allocs, CachedGemmPlans(ctx));
}

}  // namespace tnmt::kernels::cuda
