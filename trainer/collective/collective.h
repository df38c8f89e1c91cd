// Collectives for data-parallel training: every participant (rank) calls the same operations
// in the same order. Implementations: a single process, an in-process group of threads (tests
// and shared-memory data parallelism), MPI across processes and nodes (mpi_collective.h), and
// NCCL across GPUs (nccl_collective.h, CUDA builds only).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"

namespace tnmt::train {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // In place: data = sum over ranks of data. Every rank ends with identical values.
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  virtual absl::Status AllReduceSum(double* data, int64_t count) = 0;
  // In place: every rank gets root's data.
  virtual absl::Status Broadcast(float* data, int64_t count, int root) = 0;
};

// world_size 1: every operation is a no-op.
std::unique_ptr<Collective> MakeSingleProcessCollective();

// `n` participants meant to run on n threads of this process. Sums are taken in rank order, so
// results are deterministic and identical on every rank.
std::vector<std::unique_ptr<Collective>> MakeInProcessGroup(int n);

}  // namespace tnmt::train
