// NCCL collectives for multi-GPU data parallelism (CUDA builds only: --config=cuda).
// One process (or thread) per GPU; the NCCL unique id travels over a bootstrap collective (the
// file collective of the local launcher, MPI across nodes, or the in-process group), which is
// used for nothing else. Data pointers passed to this collective are CUDA device memory.
//
// The Collective methods queue on the collective's own stream and wait for the result before
// they return. The *Async methods only queue on the stream given, for overlapping reductions
// with other work (order them with events); every rank must queue the same operations in the
// same order. Sums are deterministic for a fixed world size and message sizes, and identical
// on every rank.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "trainer/collective/collective.h"

namespace tnmt::train {

class NcclCollective : public Collective {
 public:
  virtual int device() const = 0;
  // In place, device memory, queued on `stream` without waiting.
  virtual absl::Status AllReduceSumAsync(float* data, int64_t count, cudaStream_t stream) = 0;
  virtual absl::Status AllReduceSumAsync(double* data, int64_t count, cudaStream_t stream) = 0;
};

// Collective over `bootstrap`'s ranks, one GPU each (`device` of this rank; ranks must use
// distinct GPUs). Every rank must call it together. `stream` serves the synchronous methods
// (null: the legacy default stream).
absl::StatusOr<std::unique_ptr<NcclCollective>> MakeNcclCollective(Collective* bootstrap, int device,
                                                                   cudaStream_t stream);

}  // namespace tnmt::train
