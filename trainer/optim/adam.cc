// Adam, schedule and clipping; see adam.h.
#include "trainer/optim/adam.h"

#include <algorithm>
#include <cmath>

#include "engine/core/status_macros.h"
#include "kernels/cpu/adam.h"
#include "trainer/model/parameters.h"

namespace tnmt::train {

double NoamLearningRate(int64_t step, int d_model, const ScheduleOptions& o) {
  const double s = static_cast<double>(std::max<int64_t>(step, 1));
  const double w = static_cast<double>(std::max<int64_t>(o.warmup_steps, 1));
  return o.scale * std::pow(d_model, -0.5) * std::min(std::pow(s, -0.5), s * std::pow(w, -1.5));
}

double GlobalGradNorm(const ModelConfig& c, ModelWeights* grads) {
  double sum = 0.0;
  for (ParamRef& p : TrainableParams(c, grads)) {
    const float* g = p.tensor->f32();
    for (int64_t i = 0; i < p.tensor->numel(); ++i) sum += static_cast<double>(g[i]) * g[i];
  }
  return std::sqrt(sum);
}

absl::StatusOr<Adam> Adam::Create(const ModelConfig& c, const ModelWeights& params,
                                  kernels::AdamOptions options) {
  Adam a;
  a.config_ = c;
  a.options_ = options;
  TNMT_ASSIGN_OR_RETURN(a.m_, ZerosLike(c, params));
  TNMT_ASSIGN_OR_RETURN(a.v_, ZerosLike(c, params));
  return a;
}

void Adam::Step(ModelWeights* params, ModelWeights* grads, double lr, float grad_scale) {
  ++step_;
  kernels::AdamOptions o = options_;
  o.lr = static_cast<float>(lr);
  o.step = step_;
  auto p = TrainableParams(config_, params);
  auto g = TrainableParams(config_, grads);
  auto m = TrainableParams(config_, &m_);
  auto v = TrainableParams(config_, &v_);
  for (size_t i = 0; i < p.size(); ++i) {
    kernels::cpu::AdamUpdate(p[i].tensor->f32(), m[i].tensor->f32(), v[i].tensor->f32(), g[i].tensor->f32(),
                             p[i].tensor->numel(), grad_scale, o);
  }
}

}  // namespace tnmt::train
