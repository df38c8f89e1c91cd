// Where a CudaStepModel's time goes, when its Context's timeline is on (TNMT_GPU_TIMING=1,
// kernels/cuda/gpu_timeline.h): the device time of its calls by category, and the host's part
// of each call (setup and launch, the wait for the device, the copy-out) and between calls (the
// beam search and the rest of the caller). The table (kernels/time_account.h) goes to stderr
// every kReportEverySteps steps and when the model is destroyed, named by `label`.
// Off, every method returns at once. Used by one thread at a time, as its model.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "kernels/cuda/context.h"

namespace tnmt::cuda_engine {

class StepTiming {
 public:
  static constexpr int64_t kReportEverySteps = 100000;

  StepTiming(kernels::cuda::Context& ctx, std::string label) : ctx_(ctx), label_(std::move(label)) {}
  ~StepTiming() { Report(); }
  StepTiming(const StepTiming&) = delete;
  StepTiming& operator=(const StepTiming&) = delete;

  bool on() const { return ctx_.timeline().enabled(); }
  // A call begins: the host time since the previous call ended is the caller's
  // ("between steps: beam search, host"); the device's next gap is between steps.
  void Enter();
  // The host time since Enter or the previous Phase goes to the phase `name`.
  void Phase(const char* name);
  // The call ends, its remaining host time going to `name`; a decode step if `step`.
  void Exit(const char* name, bool step);
  // Writes the window's table to stderr (if anything was timed) and starts a new window.
  void Report();

 private:
  using Clock = std::chrono::steady_clock;
  kernels::cuda::Context& ctx_;
  const std::string label_;
  int64_t steps_ = 0;
  bool open_ = false;  // a window has begun
  Clock::time_point first_, mark_, last_exit_;
};

}  // namespace tnmt::cuda_engine
