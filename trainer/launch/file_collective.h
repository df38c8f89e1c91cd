// A host-memory Collective (collective.h semantics) between the processes of one node, through
// files in a directory they share: the bootstrap that carries the NCCL id for
// `tnmt train --devices cuda:0,1,...`, and the whole gradient transport of `--devices cpu,cpu`.
//
// Protocol. Every rank numbers its operations 1, 2, 3, ... (all ranks call the same operations
// in the same order). For operation g, rank r writes `dir/op-<g>.rank-<r>` atomically (written
// under a temporary name, then renamed), waits, polling with backoff, until the files of every
// rank for g exist, and reads them in rank order:
//   AllReduceSum: the sum 0 + x_0 + x_1 + ... in rank order, so every rank computes bit-identical
//     values, exactly as MakeInProcessGroup does;
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
