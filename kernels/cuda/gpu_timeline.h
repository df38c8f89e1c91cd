// Device time by category (kernels/time_account.h) measured with CUDA events on one stream:
// a timed call records an event before and after the work it queues; nothing waits for the
// device until the window is taken (TakeDeviceTimes), which waits once, for the last event,
// and reads every pair's elapsed time and the gap before it.
//
// Off by default; TNMT_GPU_TIMING=1 in the environment turns it on for every Context created
// afterwards, set_enabled for one. Off, a timed call records nothing: one branch.
//
// Invariants: events are pooled (created on first use, then reused window after window: no
// allocation per step once the pool has grown); nested timed calls count in the outermost
// only; calls queued while the stream is being captured into a CUDA graph are not timed (a
// replayed graph is timed as a whole by its caller); all timed work is on one stream, so
// consecutive pairs give the gaps between them. When the pool is full the recorded pairs are
// read at once (one wait for the device, counted as a flush) and the pool reused.
// One host thread at a time, like its Context.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/time_account.h"

namespace tnmt::kernels::cuda {

using ::tnmt::kernels::TimeAccount;
using ::tnmt::kernels::TimeCategory;

class Context;

class GpuTimeline {
 public:
  // Events the pool may hold (two per timed call) before a flush.
  static constexpr int kDefaultMaxEvents = 1 << 17;

  // Whether TNMT_GPU_TIMING asks for timing (set, and neither empty nor "0").
  static bool EnabledByEnvironment();

  explicit GpuTimeline(int max_events = kDefaultMaxEvents) : max_events_(max_events < 4 ? 4 : max_events) {}
  ~GpuTimeline();
  GpuTimeline(const GpuTimeline&) = delete;
  GpuTimeline& operator=(const GpuTimeline&) = delete;

  bool enabled() const { return enabled_; }
  void set_enabled(bool on) { enabled_ = on; }

  // The next gap is between steps (TimeAccount::between_ms), not inside one.
  void StepBoundary() { boundary_ = true; }

  // Times the work queued on `stream` during its lifetime as category `c`.
  class Scope {
   public:
    Scope(GpuTimeline& t, cudaStream_t stream, TimeCategory c) : t_(t), stream_(stream) {
      if (t.enabled_) {
        entered_ = true;
        t.Begin(stream, c);
      }
    }
    ~Scope() {
      if (entered_) t_.End(stream_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    GpuTimeline& t_;
    cudaStream_t stream_;
    bool entered_ = false;
  };

  // The account so far (callers add host phases to it).
  TimeAccount& account() { return account_; }

  // Reads every recorded pair into the account (waits for the last event), returns the
  // account and starts a new window; the first error met while recording, if any. The
  // counters are running totals (cudaMalloc calls, GEMM plans built): the account gets their
  // increase since the previous Take. Not inside a Scope.
  absl::StatusOr<TimeAccount> Take(int64_t device_allocs = 0, int64_t gemm_plans = 0);

  int64_t events_created() const { return static_cast<int64_t>(events_.size()); }

 private:
  struct Record {
    TimeCategory category;
    int begin;       // events_[begin] and events_[begin + 1]
    bool boundary;   // a step boundary came before this call
  };
  void Begin(cudaStream_t stream, TimeCategory c);
  void End(cudaStream_t stream);
  // Reads the recorded pairs into account_; keeps the last end event for the next gap.
  absl::Status Resolve(bool keep_last);
  // events_[used_], creating it if the pool has not grown that far.
  bool NextEvent(int* index);

  const int max_events_;
  bool enabled_ = false;
  bool boundary_ = false;
  int depth_ = 0;            // open scopes (only the outermost records)
  bool open_recorded_ = false;  // the outermost open scope recorded its begin event
  std::vector<cudaEvent_t> events_;
  int used_ = 0;             // events_[0, used_) recorded in this window
  int last_end_ = -1;        // the previous call's end event, for the gap before the next
  bool kept_end_ = false;    // events_[0] is the end event kept from a flush
  std::vector<Record> records_;
  TimeAccount account_;
  absl::Status error_;
  int64_t allocs_seen_ = 0, plans_seen_ = 0;  // the counters at the previous Take
};

// Runs `f` (which queues work on ctx's stream and returns a Status) as one timed call.
template <typename Ctx, typename F>
absl::Status Timed(Ctx& ctx, TimeCategory c, F&& f) {
  GpuTimeline::Scope scope(ctx.timeline(), ctx.stream(), c);
  return f();
}

// ctx's timeline taken (GpuTimeline::Take) with the counters of the window: cudaMalloc calls
// of its allocator and GEMM plans built since the previous call.
absl::StatusOr<TimeAccount> TakeDeviceTimes(Context& ctx);

}  // namespace tnmt::kernels::cuda
