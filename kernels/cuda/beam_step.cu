// BeamStep on the GPU; see beam_step.h. A sentence's selection is a few dozen candidates, so
// one thread does it serially (kernels/beam_step.h); sentences run in parallel.
#include "kernels/cuda/beam_step.h"

#include <string>

#include "kernels/cuda/check.h"

namespace tnmt::kernels::cuda {

namespace {

constexpr int kThreads = 64;

__global__ void BeamStepKernel(BeamStepArgs a) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < a.sentences) BeamStepSentence(a, s);
}

}  // namespace

absl::Status BeamStep(cudaStream_t stream, const BeamStepArgs& a) {
  if (a.beam < 1 || a.beam > kMaxFlatBeam) {
    return absl::InvalidArgumentError("BeamStep: beam " + std::to_string(a.beam) + " outside [1, " +
                                      std::to_string(kMaxFlatBeam) + "]");
  }
  if (a.sentences == 0) return absl::OkStatus();
  if (a.sentences < 0 || a.k < 1) {
    return absl::InvalidArgumentError("BeamStep: " + std::to_string(a.sentences) + " sentences, k " +
                                      std::to_string(a.k));
  }
  const unsigned blocks = static_cast<unsigned>((a.sentences + kThreads - 1) / kThreads);
  BeamStepKernel<<<blocks, kThreads, 0, stream>>>(a);
  return TNMT_CUDA_LAUNCH_CHECK();
}

}  // namespace tnmt::kernels::cuda
