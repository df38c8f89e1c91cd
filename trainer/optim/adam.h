// Adam's state (β1 0.9, β2 0.98, ε 1e-9 by default, as the paper; the moments, ModelWeights-
// shaped as checkpoints store them; the update counter) and the paper's learning-rate schedule.
// The update itself, with the gradient norm for clipping, is FlatOptimizer's (flat_optimizer.h),
// run by the train engines over their flat arrays.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/adam.h"

namespace tnmt::train {

struct ScheduleOptions {
  int64_t warmup_steps = 4000;
  double scale = 1.0;  // multiplies the paper's rate ("lr factor")
};

// lr = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step >= 1.
double NoamLearningRate(int64_t step, int d_model, const ScheduleOptions& o);

class Adam {
 public:
  // Moments start at zero, shaped like `params`.
  static absl::StatusOr<Adam> Create(const ModelConfig& c, const ModelWeights& params,
                                     kernels::AdamOptions options = {});

  // Updates applied so far (1-based bias correction: the next update is step() + 1).
  int64_t step() const { return step_; }
  // Betas and epsilon (lr and step are set per update).
  const kernels::AdamOptions& options() const { return options_; }
  void set_step(int64_t s) { step_ = s; }
  ModelWeights& m() { return m_; }
  ModelWeights& v() { return v_; }

 private:
  kernels::AdamOptions options_;
  int64_t step_ = 0;
  ModelWeights m_, v_;
};

}  // namespace tnmt::train
