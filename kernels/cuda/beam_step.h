// The flat beam step (kernels/beam_step.h) on the GPU: the same BeamStepSentence, compiled by
// nvcc, one thread per sentence, reading the decoder step's top-k where the step left it on
// the device. Takes the stream (not a Context) so that this file's nvcc compile needs only
// the contract header and check.h.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "kernels/beam_step.h"

namespace tnmt::kernels::cuda {

// Queues the step for every sentence of `a` (every pointer on the device) on `stream`.
// 1 <= a.beam <= kMaxFlatBeam; a.sentences == 0 queues nothing.
absl::Status BeamStep(cudaStream_t stream, const BeamStepArgs& a);

}  // namespace tnmt::kernels::cuda
