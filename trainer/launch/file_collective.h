// The host collective between the worker processes that `tnmt train --devices cuda:0,1,...`
// launches on one node, through files in a directory they share. It carries what the GPUs'
// NCCL collective cannot before it exists or for host memory: the NCCL unique id (a broadcast
// from rank 0), the training loop's barriers (one-element double sums) and its broadcast of the
// initial parameters. Gradients and per-step totals go over NCCL, so float sums are refused
// (FAILED_PRECONDITION); CPU ranks use the in-process group or MPI (collective.h).
//
// Protocol. Every rank numbers its operations 1, 2, 3, ... (all ranks call the same operations
// in the same order). For operation g, rank r writes `dir/op-<g>.rank-<r>` atomically (written
// under a temporary name, then renamed), waits, polling with backoff, until the files of every
// rank for g exist, and reads them in rank order:
//   AllReduceSum(double): the sum 0 + x_0 + x_1 + ... in rank order, identical on every rank;
//   Broadcast: root's payload (the other ranks write a header-only arrival file).
// Each file's header repeats the operation number, kind, element count and root; a rank whose
// peers called a different operation gets an error naming both instead of mixed-up data.
// Cleanup: when rank r has seen every file of operation g, every rank has finished reading
// operation g-1 (it wrote its file of g after that), so r deletes its own file of g-1. The files of
// the last operation stay until the directory is removed (the launcher removes it).
// A peer that never arrives gives DEADLINE_EXCEEDED naming the missing ranks after `timeout`.
// One object per rank; not thread-safe (ranks may be threads of one process, each with its own).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/collective/collective.h"

namespace tnmt::train {

// `dir` must exist and hold no file of this rank (a fresh directory per run). 0 <= rank < world_size.
// `timeout`: how long one operation waits for the slowest peer before failing (a year or more,
// e.g. absl::InfiniteDuration(): forever).
absl::StatusOr<std::unique_ptr<Collective>> MakeFileCollective(const std::string& dir, int rank, int world_size,
                                                               absl::Duration timeout = absl::Minutes(30));

}  // namespace tnmt::train
