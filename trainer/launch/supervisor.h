// Starts and supervises the worker processes of one training run on this node (the
// `tnmt train --devices ...` launcher), in the manner of torchrun: all succeed or all stop.
//
// Invariants:
// - Each worker runs in its own process group with PR_SET_PDEATHSIG(SIGKILL), so workers die
//   with the launcher even if it is killed with SIGKILL. (The signal follows the *thread* that
//   forked: call RunWorkers from a thread that outlives the workers, e.g. main.)
// - A stop request (`stop`, set by the caller's SIGTERM/SIGINT handler) reaches every running
//   worker once, as SIGTERM to its process group; workers are expected to checkpoint and exit 0.
// - When a worker exits non-zero or is killed by a signal, every other worker gets SIGTERM and,
//   `grace` later, SIGKILL; RunWorkers returns once all are reaped, with an error naming the
//   first failed worker, how it ended, and the tail of what it wrote to its log.
// - Output: a worker with an empty log_path shares this process's stdout/stderr; the others
//   append both streams to their log_path (a header line marks each start). stdin is /dev/null.
#pragma once

#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tnmt::train {

struct WorkerSpec {
  std::string name;                 // in messages, e.g. "rank 1 (cuda:1)"
  std::string program;              // executed as is (not searched in PATH), e.g. /proc/self/exe
  std::vector<std::string> argv;    // argv[0] is what the worker sees as its name
  std::vector<std::pair<std::string, std::string>> env;  // set on top of this process's environment
  std::string log_path;             // empty: inherit stdout/stderr; else both appended here
};

struct SupervisorOptions {
  const std::atomic<bool>* stop = nullptr;              // see the header comment
  absl::Duration grace = absl::Seconds(5);              // SIGTERM → SIGKILL after a failure
  absl::Duration poll_interval = absl::Milliseconds(20);
  int tail_lines = 10;                                  // log lines quoted in a failure
};

// Runs every worker to completion. OK when all exit with status 0.
absl::Status RunWorkers(const std::vector<WorkerSpec>& workers, const SupervisorOptions& options);

}  // namespace tnmt::train
