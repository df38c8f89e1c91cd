// GpuTimeline; see gpu_timeline.h.
#include "kernels/cuda/gpu_timeline.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "kernels/cuda/check.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"

namespace tnmt::kernels::cuda {

namespace {

// Adds the host time of its scope to `ms` (the timing's own cost).
class HostCost {
 public:
  explicit HostCost(double* ms) : ms_(ms), start_(std::chrono::steady_clock::now()) {}
  ~HostCost() { *ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double* ms_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

bool GpuTimeline::EnabledByEnvironment() {
  const char* v = std::getenv("TNMT_GPU_TIMING");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

GpuTimeline::~GpuTimeline() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

bool GpuTimeline::NextEvent(int* index) {
  if (used_ == static_cast<int>(events_.size())) {
    cudaEvent_t e = nullptr;
    if (absl::Status s = TNMT_CUDA_CHECK(cudaEventCreate(&e)); !s.ok()) {
      error_.Update(s);
      return false;
    }
    events_.push_back(e);
  }
  *index = used_++;
  return true;
}

void GpuTimeline::Begin(cudaStream_t stream, TimeCategory c) {
  if (depth_++ > 0) return;  // nested: the outermost call times it
  HostCost cost(&account_.timing_host_ms);
  open_recorded_ = false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  if (used_ + 2 > max_events_) {
    ++account_.flushes;
    error_.Update(Resolve(/*keep_last=*/true));
  }
  const int mark = used_;
  int begin = 0, end = 0;
  if (!NextEvent(&begin) || !NextEvent(&end)) {
    used_ = mark;
    return;
  }
  if (absl::Status s = TNMT_CUDA_CHECK(cudaEventRecord(events_[begin], stream)); !s.ok()) {
    error_.Update(s);
    used_ = begin;
    return;
  }
  records_.push_back({c, begin, boundary_});
  boundary_ = false;
  open_recorded_ = true;
}

void GpuTimeline::End(cudaStream_t stream) {
  if (--depth_ > 0 || !open_recorded_) return;
  HostCost cost(&account_.timing_host_ms);
  open_recorded_ = false;
  const int end = records_.back().begin + 1;
  if (absl::Status s = TNMT_CUDA_CHECK(cudaEventRecord(events_[end], stream)); !s.ok()) {
    error_.Update(s);
    used_ = records_.back().begin;
    records_.pop_back();
    return;
  }
  last_end_ = end;
}

absl::Status GpuTimeline::Resolve(bool keep_last) {
  absl::Status status;
  if (!records_.empty()) {
    status = TNMT_CUDA_CHECK(cudaEventSynchronize(events_[records_.back().begin + 1]));
    // The end event kept from the previous flush, if any, is the first gap's start.
    int prev = kept_end_ ? 0 : -1;
    for (const Record& r : records_) {
      if (!status.ok()) break;
      float ms = 0;
      status = TNMT_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[r.begin], events_[r.begin + 1]));
      account_.AddWork(r.category, ms);
      if (prev >= 0 && status.ok()) {
        float gap = 0;
        status = TNMT_CUDA_CHECK(cudaEventElapsedTime(&gap, events_[prev], events_[r.begin]));
        if (r.boundary) {
          account_.between_ms += gap;
          ++account_.betweens;
        } else {
          account_.gap_ms += gap;
        }
      }
      prev = r.begin + 1;
    }
  }
  // Events are reused from the start; the last end event moves to slot 0 when kept.
  kept_end_ = keep_last && last_end_ >= 0 && status.ok();
  if (kept_end_) {
    std::swap(events_[0], events_[last_end_]);
    last_end_ = 0;
    used_ = 1;
  } else {
    last_end_ = -1;
    used_ = 0;
  }
  records_.clear();
  return status;
}

absl::StatusOr<TimeAccount> GpuTimeline::Take(int64_t device_allocs, int64_t gemm_plans) {
  if (depth_ > 0) return absl::FailedPreconditionError("GpuTimeline::Take inside a timed call");
  error_.Update(Resolve(/*keep_last=*/false));
  boundary_ = false;
  account_.device_allocs += device_allocs - allocs_seen_;
  account_.gemm_plans_built += gemm_plans - plans_seen_;
  allocs_seen_ = device_allocs;
  plans_seen_ = gemm_plans;
  TimeAccount out = account_;
  account_.Clear();
  if (!error_.ok()) {
    absl::Status e = std::move(error_);
    error_ = absl::OkStatus();
    return e;
  }
  return out;
}

absl::StatusOr<TimeAccount> TakeDeviceTimes(Context& ctx) {
  return ctx.timeline().Take(ctx.allocator().stats().device_allocs, CachedGemmPlans(ctx));
}

}  // namespace tnmt::kernels::cuda
