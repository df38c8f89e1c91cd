// The update half of a training step over flat arrays; see flat_optimizer.h.
#include "trainer/optim/flat_optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace tnmt::train {

absl::Status ValidateLossScaling(const LossScaling& s) {
  if (s.window < 1) return absl::InvalidArgumentError("loss scale window must be positive");
  if (s.dynamic && !(s.initial >= kMinLossScale && std::isfinite(s.initial))) {
    return absl::InvalidArgumentError(absl::StrCat("initial loss scale ", s.initial, " out of range"));
  }
  return absl::OkStatus();
}

FlatOptimizer::FlatOptimizer(const FlatLayout* layout, FlatArrays arrays, FlatKernels kernels,
                             kernels::AdamOptions adam, int64_t step, LossScaling scaling)
    : layout_(layout), arrays_(arrays), kernels_(std::move(kernels)), adam_(adam), step_(step), scaling_(scaling),
      loss_scale_(scaling.dynamic ? scaling.initial : 1.0) {}

void FlatOptimizer::BeginStep() {
  next_bucket_ = 0;
  norm_valid_ = false;
}

absl::Status FlatOptimizer::ReduceBuckets(int stage,
                                          const std::function<absl::Status(size_t, const GradBucket&)>& reduce) {
  const std::vector<GradBucket>& buckets = layout_->buckets();
  while (next_bucket_ < buckets.size() && buckets[next_bucket_].last_stage <= stage) {
    TNMT_RETURN_IF_ERROR(reduce(next_bucket_, buckets[next_bucket_]));
    ++next_bucket_;
  }
  return absl::OkStatus();
}

absl::StatusOr<double> FlatOptimizer::GradNorm() {
  if (!norm_valid_) {
    TNMT_ASSIGN_OR_RETURN(const double sum, kernels_.sum_of_squares(arrays_.grads, layout_->size()));
    norm_ = std::sqrt(sum) / loss_scale_;
    norm_valid_ = true;
  }
  return norm_;
}

absl::StatusOr<bool> FlatOptimizer::AdamStep(double lr, float grad_scale) {
  float scale = grad_scale;
  if (scaling_.dynamic) {
    TNMT_ASSIGN_OR_RETURN(const double norm, GradNorm());
    if (!std::isfinite(norm)) {
      loss_scale_ /= 2;
      good_steps_ = 0;
      norm_valid_ = false;
      if (loss_scale_ < kMinLossScale) {
        return absl::FailedPreconditionError(
            absl::StrCat("float16 gradients are not finite even at loss scale ", loss_scale_ * 2,
                         ": training diverged (try a lower learning rate, or bfloat16/float32)"));
      }
      return false;
    }
    scale = static_cast<float>(grad_scale / loss_scale_);
  }
  ++step_;
  kernels::AdamOptions o = adam_;
  o.lr = static_cast<float>(lr);
  o.step = step_;
  TNMT_RETURN_IF_ERROR(
      kernels_.adam_update(arrays_.params, arrays_.m, arrays_.v, arrays_.grads, layout_->size(), scale, o));
  if (kernels_.after_update) TNMT_RETURN_IF_ERROR(kernels_.after_update());
  norm_valid_ = false;
  if (scaling_.dynamic && ++good_steps_ >= scaling_.window) {
    loss_scale_ *= 2;
    good_steps_ = 0;
  }
  return true;
}

}  // namespace tnmt::train
