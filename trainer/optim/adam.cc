// Adam's state and the schedule; see adam.h.
#include "trainer/optim/adam.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status_macros.h"
#include "trainer/model/parameters.h"

namespace tnmt::train {

double NoamLearningRate(int64_t step, int d_model, const ScheduleOptions& o) {
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  const double w = static_cast<double>(std::max<int64_t>(o.warmup_steps, 1));
  return o.scale * std::pow(d_model, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(w, -1.5));
}

absl::StatusOr<Adam> Adam::Create(const ModelConfig& c, const ModelWeights& params,
                                  kernels::AdamOptions options) {
  Adam a;
  a.options_ = options;
  TNMT_ASSIGN_OR_RETURN(a.m_, ZerosLike(c, params));
  TNMT_ASSIGN_OR_RETURN(a.v_, ZerosLike(c, params));
  return a;
}

}  // namespace tnmt::train
