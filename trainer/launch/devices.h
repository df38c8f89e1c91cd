// The device list of `tnmt train --devices`: which devices one training run uses, one rank per
// device. Syntax (comma-separated):
//   cpu[,cpu...]        that many CPU ranks (threads of one process, data-parallel in memory)
//   cuda:N[,M,...]      these GPUs; a bare number continues a cuda list (cuda:0,1,3)
//   cuda:N,cuda:M       the same, spelled out
//   cuda                every visible GPU (resolved with ResolveAllVisible)
// Errors name the flag and its value, e.g. `--devices cuda:0,cuda:0: device listed twice (cuda:0)`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tnmt::train {

struct DeviceList {
  bool cuda = false;         // false: CPU ranks
  bool all_visible = false;  // "cuda": one worker per visible GPU, ids filled by ResolveAllVisible
  std::vector<int> ids;      // cuda: GPU ordinals in order; cpu: one 0 per rank

  int size() const { return static_cast<int>(ids.size()); }
  // "cpu" or "cuda:N" for rank i.
  std::string Name(int i) const;
};

// `flag` names the flag in errors (e.g. "--devices").
absl::StatusOr<DeviceList> ParseDeviceList(absl::string_view value, absl::string_view flag = "--devices");

// For "cuda": ids = 0 .. visible-1. An error when no GPU is visible.
absl::Status ResolveAllVisible(int visible, DeviceList* devices);

// This process's rank among the processes on its node under mpirun (Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, or SLURM_LOCALID); nullopt when unset.
std::optional<int> MpiLocalRank();

// The device of the process with this local rank under mpirun: "cuda" gives
// cuda:(local_rank mod visible); a list gives its local_rank-th entry (an error when the list is
// shorter); cpu gives "cpu". `visible` is used only for "cuda".
absl::StatusOr<std::string> DeviceForLocalRank(const DeviceList& devices, int local_rank, int visible,
                                               absl::string_view flag_value);

}  // namespace tnmt::train
