// TrainEngine factory; see make_train_engine.h.
#include "trainer/model/make_train_engine.h"

#include "trainer/model/cpu_train_engine.h"
#include "trainer/model/cuda_train_engine.h"

namespace tnmt::train {

absl::StatusOr<std::unique_ptr<TrainEngine>> MakeTrainEngine(const ModelConfig& c,
                                                             const TrainEngineOptions& options,
                                                             ModelWeights params, Adam adam) {
  if (options.device.cuda) {
    if (absl::Status s = c.CheckCudaSupport(); !s.ok()) return s;
    return MakeCudaTrainEngine(c, options, std::move(params), std::move(adam));
  }
  return MakeCpuTrainEngine(c, options, std::move(params), std::move(adam));
}

}  // namespace tnmt::train
