// StepTiming; see step_timing.h.
#include "engine/cuda/step_timing.h"

#include <cstdio>

#include "kernels/cuda/gpu_timeline.h"
#include "kernels/time_account.h"

namespace tnmt::cuda_engine {

namespace {

double Ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace

void StepTiming::Enter() {
  if (!on()) return;
  const Clock::time_point now = Clock::now();
  if (!open_) {
    first_ = now;
    open_ = true;
  } else {
    ctx_.timeline().account().AddHost("between steps (beam search, caller)", Ms(now - last_exit_));
  }
  ctx_.timeline().StepBoundary();
  mark_ = now;
}

void StepTiming::Phase(const char* name) {
  if (!on() || !open_) return;
  const Clock::time_point now = Clock::now();
  ctx_.timeline().account().AddHost(name, Ms(now - mark_));
  mark_ = now;
}

void StepTiming::Exit(const char* name, bool step) {
  if (!on() || !open_) return;
  Phase(name);
  last_exit_ = mark_;
  if (step && ++steps_ >= kReportEverySteps) Report();
}

void StepTiming::Report() {
  if (!on() || !open_) return;
  absl::StatusOr<kernels::TimeAccount> a = kernels::cuda::TakeDeviceTimes(ctx_);
  kernels::TimeWindow w;
  w.steps = steps_;
  w.wall_ms = last_exit_ > first_ ? Ms(last_exit_ - first_) : 0.0;
  w.step = "decode step";
  w.between = "between steps";
  if (!a.ok()) {
    std::fprintf(stderr, "tnmt gpu timing, %s: %s\n", label_.c_str(), a.status().ToString().c_str());
  } else if (!a->empty()) {
    std::fprintf(stderr, "tnmt gpu timing, %s (encoder work included):\n%s", label_.c_str(),
                 kernels::FormatTimeTable(*a, w).c_str());
  }
  steps_ = 0;
  open_ = false;
}

}  // namespace tnmt::cuda_engine
