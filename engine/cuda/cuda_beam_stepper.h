// The flat beam step on the GPU (FlatBeamStepper, engine/decode/flat_beam_step.h): the
// CudaStepModel's decoder step, log-sum-exp and top-k stay on the device
// (CudaStepModel::StepOnDevice) and kernels::cuda::BeamStep selects from them there. Per step
// the host uploads the sentences' small state (per sentence: rows, t, limits, length
// penalties, best finished score; per row: the running score) and brings back only the
// selection: per sentence the next live count, best finished score and row, and per next
// hypothesis its parent row, token and score — about 5 + 4K words a sentence, against
// today's rows x (2 + 2k) words of candidates (k = 2K + 1). Then one stream sync, as before.
// Outputs are those of the host stepper over the same model (kernels/beam_step.h is one
// definition for both), hence of BeamDecoder on the same CudaStepModel.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "engine/cuda/pinned_buffer.h"
#include "engine/decode/flat_beam_step.h"
#include "kernels/cuda/context.h"

namespace tnmt {

class CudaBeamStepper : public FlatBeamStepper {
 public:
  // `model` must be a CudaStepModel (else Step fails).
  absl::Status Step(StepModel& model, const int32_t* ids, FlatBeamStep* step) override;

 private:
  kernels::cuda::DeviceBuffer in_, out_;
  cuda_engine::PinnedBuffer up_, down_;
};

}  // namespace tnmt
