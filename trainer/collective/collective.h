// Collectives for data-parallel training: every participant (rank) calls the same operations
// in the same order. Implementations: a single process, an in-process group of threads
// (`tnmt train --devices cpu,cpu`, and tests), MPI across processes and nodes
// (mpi_collective.h), and NCCL across GPUs (nccl_collective.h, CUDA builds only).
#pragma once

#include <cstdint>
#include <functional>
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

// `n` participants meant to run on n threads of this process. Sums are taken in rank order
// (0 + x_0 + x_1 + ...), so results are deterministic and identical on every rank.
std::vector<std::unique_ptr<Collective>> MakeInProcessGroup(int n);

// Runs rank_fn(collective) for ranks 0..n-1 of one in-process group, rank 0 on the calling
// thread and each other rank on a thread of its own, and returns when all have returned.
// The first rank_fn to return closes the group: every operation waiting in it, and every later
// one, returns ABORTED naming that rank, so when a rank fails the others stop at their next
// collective instead of waiting forever (ranks that end together have no operation left). Returns OK when every rank did, else the
// error of the rank whose return closed the group (or, if that rank succeeded, the first failed
// rank's), its message prefixed "rank R: ".
absl::Status RunInProcessGroup(int n, const std::function<absl::Status(Collective*)>& rank_fn);

}  // namespace tnmt::train
