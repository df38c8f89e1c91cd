// One training run as N worker processes on this node: the launcher side (LaunchLocalWorkers:
// a fresh bootstrap directory, one worker per device, supervision) and the worker side
// (WorkerEnvFromEnvironment: what the launcher told this process).
//
// Contract between the two, through the environment of each worker:
//   TNMT_RANK            0 .. N-1
//   TNMT_WORLD_SIZE      N
//   TNMT_BOOTSTRAP_DIR   a fresh directory for MakeFileCollective, removed when the run ends
// and optionally, set by the user for the launcher and inherited by the workers:
//   TNMT_COLLECTIVE_TIMEOUT_S   seconds one collective operation waits for a peer (default 1800)
// Rank 0 shares the launcher's stdout/stderr; rank R > 0 appends to work_dir/worker-R.log.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tnmt::train {

inline constexpr char kRankEnv[] = "TNMT_RANK";
inline constexpr char kWorldSizeEnv[] = "TNMT_WORLD_SIZE";
inline constexpr char kBootstrapDirEnv[] = "TNMT_BOOTSTRAP_DIR";
inline constexpr char kCollectiveTimeoutEnv[] = "TNMT_COLLECTIVE_TIMEOUT_S";

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  std::string bootstrap_dir;
  absl::Duration collective_timeout = absl::Minutes(30);
};

// nullopt when TNMT_RANK is unset (this process is not a launched worker); an error naming the
// variable when one is missing or malformed.
absl::StatusOr<std::optional<WorkerEnv>> WorkerEnvFromEnvironment();

struct LocalLaunchOptions {
  std::string program;                          // executed for every worker (e.g. /proc/self/exe)
  std::vector<std::string> args;                // argv of every worker, argv[0] included
  std::vector<std::vector<std::string>> extra;  // one entry per worker: arguments appended to args
  std::vector<std::string> names;               // one per worker, for messages, e.g. "cuda:1"
  std::string work_dir;                         // must exist: logs and the bootstrap directory go here
  const std::atomic<bool>* stop = nullptr;      // forwarded to the workers as SIGTERM
  // After a failure, SIGTERM → SIGKILL of the others. Short: a worker whose peer is gone
  // cannot finish a step (nor a checkpoint) anyway; SIGTERM only lets it flush its output.
  absl::Duration grace = absl::Seconds(5);
};

// Runs the workers to completion (see supervisor.h). OK when every worker exits 0; otherwise an
// error naming the first failed rank, how it ended and the end of its log.
absl::Status LaunchLocalWorkers(const LocalLaunchOptions& options);

}  // namespace tnmt::train
