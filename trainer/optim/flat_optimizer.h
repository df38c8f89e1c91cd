// FlatOptimizer: the update half of a training step over the flat arrays of a FlatLayout
// (trainer/model/flat_layout.h), the same code for every device: the bucketed gradient
// all-reduce's order, the gradient norm, float16 dynamic loss scaling, the Adam step counter and
// the update. A device supplies only the kernels (FlatKernels) that run on its arrays: the CPU
// engine host loops over host memory, the CUDA engine its kernels over device memory.
//
// Invariants: gradients are of the summed loss times loss_scale() (1 unless dynamic scaling is
// on); GradNorm is computed once per set of gradients (BeginStep and an update invalidate it);
// buckets are handed to the reduce function in layout order, each once per update; a skipped
// update leaves the parameters, moments and step counter unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/adam.h"
#include "trainer/model/flat_layout.h"

namespace tnmt::train {

// A device's arrays of layout.size() float32 elements each.
struct FlatArrays {
  float* params = nullptr;
  float* grads = nullptr;
  float* m = nullptr;  // Adam's first moment
  float* v = nullptr;  // Adam's second moment
};

// The device kernels over those arrays.
struct FlatKernels {
  // Sum of squares of x[0, n) in double, once it is known on the host.
  std::function<absl::StatusOr<double>(const float* x, int64_t n)> sum_of_squares;
  // kernels/adam.h's update of n elements, the gradients multiplied by grad_scale first.
  std::function<absl::Status(float* w, float* m, float* v, const float* g, int64_t n, float grad_scale,
                             const kernels::AdamOptions& o)>
      adam_update;
  // Runs after every applied update (e.g. refreshing half-precision copies); may be empty.
  std::function<absl::Status()> after_update;
};

struct LossScaling {
  // float16: the scale starts at `initial`, halves (and the update is skipped) when the
  // gradients are not finite and doubles after `window` consecutive applied updates. Off: the
  // scale is 1 and every update is applied.
  bool dynamic = false;
  double initial = 8.0;
  int window = 2000;
};

// Below this the float16 loss scale cannot help: the gradients are not finite unscaled.
inline constexpr double kMinLossScale = 1.0 / 16384;

// Checks the window and, when dynamic, the start (InvalidArgument naming the bad value).
absl::Status ValidateLossScaling(const LossScaling& s);

class FlatOptimizer {
 public:
  // `layout` must outlive the optimizer; `step` is the number of updates already applied (Adam's
  // bias-correction counter, from a checkpoint).
  FlatOptimizer(const FlatLayout* layout, FlatArrays arrays, FlatKernels kernels, kernels::AdamOptions adam,
                int64_t step, LossScaling scaling);

  // A new update's gradients begin: the norm is unknown, no bucket has been reduced.
  void BeginStep();

  // Calls reduce(index, bucket) for every bucket whose last stage is <= `stage` and that has not
  // been handed out this update, in layout order (INT_MAX: every remaining bucket).
  absl::Status ReduceBuckets(int stage, const std::function<absl::Status(size_t, const GradBucket&)>& reduce);

  // sqrt(sum of squares) of the gradients divided by the loss scale. Not finite when the
  // gradients are not.
  absl::StatusOr<double> GradNorm();

  // Adam with learning rate `lr`, the gradients multiplied by grad_scale / loss_scale(). False:
  // dynamic scaling found non-finite gradients, halved the scale and skipped the update.
  // FailedPrecondition when the scale would fall below kMinLossScale.
  absl::StatusOr<bool> AdamStep(double lr, float grad_scale);

  double loss_scale() const { return loss_scale_; }
  int64_t step() const { return step_; }

 private:
  const FlatLayout* layout_;
  FlatArrays arrays_;
  FlatKernels kernels_;
  kernels::AdamOptions adam_;
  int64_t step_;
  LossScaling scaling_;
  double loss_scale_;
  int good_steps_ = 0;
  size_t next_bucket_ = 0;
  bool norm_valid_ = false;
  double norm_ = 0;
};

}  // namespace tnmt::train
