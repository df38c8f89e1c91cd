// Adam (β1 0.9, β2 0.98, ε 1e-9 by default, as the paper) over ModelWeights-shaped parameters,
// the paper's learning-rate schedule, and global-norm gradient clipping.
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

// sqrt(sum of squares) over every unique gradient tensor.
double GlobalGradNorm(const ModelConfig& c, ModelWeights* grads);

class Adam {
 public:
  // Moments start at zero, shaped like `params`.
  static absl::StatusOr<Adam> Create(const ModelConfig& c, const ModelWeights& params,
                                     kernels::AdamOptions options = {});

  // One update with learning rate `lr` (step counter advanced first, 1-based), gradients
  // multiplied by `grad_scale` (e.g. 1/tokens, times a clipping factor).
  void Step(ModelWeights* params, ModelWeights* grads, double lr, float grad_scale);

  int64_t step() const { return step_; }
  // Betas and epsilon (lr and step are set per update).
  const kernels::AdamOptions& options() const { return options_; }
  void set_step(int64_t s) { step_ = s; }
  ModelWeights& m() { return m_; }
  ModelWeights& v() { return v_; }

 private:
  ModelConfig config_;
  kernels::AdamOptions options_;
  int64_t step_ = 0;
  ModelWeights m_, v_;
};

}  // namespace tnmt::train
