// Device time by category (kernels/time_account.h) measured with CUDA events on a Context's
// stream: kernels/timed_calls.h's bookkeeping over CUDA events. A timed call records an event
// before and after the work it queues; nothing waits for the device until the window is taken
// (TakeDeviceTimes), which waits once, for the last event.
//
// Off by default; TNMT_GPU_TIMING=1 in the environment turns it on for every Context created
// afterwards, set_enabled for one. Off, a timed call records nothing: one branch.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/time_account.h"
#include "kernels/timed_calls.h"

namespace tnmt::kernels::cuda {

using ::tnmt::kernels::TimeAccount;
using ::tnmt::kernels::TimeCategory;

class Context;

// TimedCalls' event API over the CUDA runtime (timing events, default flags).
struct CudaEvents {
  using Event = cudaEvent_t;
  using Stream = cudaStream_t;
  absl::Status Create(Event* e) const;
  void Destroy(Event e) const;
  absl::Status Record(Event e, Stream s) const;
  bool Capturing(Stream s) const;  // also true when the query fails: then nothing is recorded
  absl::Status Wait(Event e) const;
  absl::Status Elapsed(float* ms, Event from, Event to) const;
};

using GpuTimeline = TimedCalls<CudaEvents>;

// Runs `f` (which queues work on ctx's stream and returns a Status) as one timed call.
template <typename Ctx, typename F>
absl::Status Timed(Ctx& ctx, TimeCategory c, F&& f) {
  GpuTimeline::Scope scope(ctx.timeline(), ctx.stream(), c);
  return f();
}

// ctx's timeline taken (TimedCalls::Take) with the counters of the window: cudaMalloc calls of
// its allocator and GEMM plans built since the previous call.
absl::StatusOr<TimeAccount> TakeDeviceTimes(Context& ctx);

}  // namespace tnmt::kernels::cuda
