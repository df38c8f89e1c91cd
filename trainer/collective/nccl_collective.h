// NCCL collectives for multi-GPU data parallelism (CUDA builds only: --config=cuda).
// One process per GPU; the NCCL unique id travels over a bootstrap collective (MPI across
// nodes, or the in-process group). Data pointers passed to this collective are CUDA device
// memory; operations are enqueued on `stream` and complete before they return.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "absl/status/statusor.h"
#include "trainer/collective/collective.h"

namespace tnmt::train {

// Collective over `bootstrap`'s ranks, one GPU each (`device` of this rank).
absl::StatusOr<std::unique_ptr<Collective>> MakeNcclCollective(Collective* bootstrap, int device,
                                                               cudaStream_t stream);

}  // namespace tnmt::train
