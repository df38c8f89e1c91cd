// JobRunner: runs stored training jobs as `tnmt train` child processes and publishes their
// results. One thread owns every child: it starts queued jobs oldest first while their device
// has a free slot, follows each trainer's JSON-lines metrics into the store and to watchers,
// and turns exits into states. Cancel sends SIGTERM (the trainer writes a final checkpoint)
// and SIGKILL after the grace period.
//
// Crash safety: the job row is the truth. A child dies with the server (PR_SET_PDEATHSIG) and
// holds an exclusive lock on its work directory while it lives, so a restarted server never
// runs a job twice; Start() re-queues jobs that were running (resumed from their newest
// checkpoint, since the trainer resumes exactly) or fails them, per the spec's on_interrupt.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/tnmt/v1/training.pb.h"
#include "server/jobs/job_store.h"

namespace tnmt::server::jobs {

struct RunnerOptions {
  std::string state_dir;       // jobs/<id>/ (work directories) and models/<name>/ (published)
  std::string data_root;       // where specs may read
  std::string trainer_binary;  // the tnmt executable (`tnmt train` is run from it)
  int max_running_jobs = 1;    // per device
  int default_threads = 1;     // trainer threads when the spec gives none
  absl::Duration cancel_grace = absl::Seconds(30);  // SIGTERM → SIGKILL
  absl::Duration poll_interval = absl::Milliseconds(200);
};

// What watchers receive: the job after a change. kind: "state", "progress", "validation",
// "checkpoint".
struct JobChange {
  std::string kind;
  JobRecord job;
  double dev_loss = 0;
};

// Makes `dir` (a complete model directory) servable under `name`; true on success.
using PublishFn = std::function<absl::Status(const std::string& name, const std::string& dir)>;

class JobRunner {
 public:
  JobRunner(RunnerOptions options, JobStore* store, PublishFn publish);
  ~JobRunner();  // Stop()

  // Recovers jobs interrupted by a previous server's death, then starts the runner thread.
  absl::Status Start();
  // Server shutdown: stops every trainer (SIGTERM, final checkpoint; SIGKILL after the grace
  // period) and puts its job back in the queue, so the next start resumes it. Idempotent.
  void Stop();

  // Stores a validated job (spec already checked) and wakes the runner.
  absl::StatusOr<JobRecord> Submit(const tnmt::v1::JobSpec& spec, const std::string& request_id, bool* created);
  // Cancels a queued or running job; FAILED_PRECONDITION if it already finished.
  absl::StatusOr<JobRecord> Cancel(const std::string& id);

  // Calls `fn` (on the runner thread) for every change of job `id` until Unsubscribe; `fn`
  // must not call back into the runner. Unsubscribe returns only once no call is running.
  int Subscribe(const std::string& id, std::function<void(const JobChange&)> fn);
  void Unsubscribe(int token);

  std::string WorkDir(const std::string& id) const;
  std::string ModelDir(const std::string& name) const;

 private:
  struct Child {
    pid_t pid = -1;
    std::string device;
    int64_t metrics_offset = 0;  // bytes of metrics.jsonl already read
    absl::Time kill_at = absl::InfiniteFuture();  // SIGKILL after a SIGTERM
    bool stopping_for_shutdown = false;
  };

  void Loop();
  void Tick();
  void StartQueued();
  absl::Status Launch(JobRecord* job);
  void Follow(const std::string& id, Child* child);  // new metrics lines
  void Finished(const std::string& id, const Child& child, int wait_status);
  void Publish(JobRecord* job, const tnmt::v1::JobSpec& spec);
  void SetState(JobRecord* job, JobState state, const std::string& error = "");
  void Notify(const std::string& kind, const JobRecord& job, double dev_loss = 0);
  std::string TrainDir(const std::string& id) const;

  const RunnerOptions options_;
  JobStore* const store_;
  const PublishFn publish_;

  std::mutex mu_;  // children_, stopping_, wake_
  std::condition_variable cv_;
  std::map<std::string, Child> children_;  // running jobs by id
  bool wake_ = false;
  bool stopping_ = false;
  std::thread thread_;

  std::mutex subs_mu_;
  std::map<int, std::pair<std::string, std::function<void(const JobChange&)>>> subs_;
  int next_sub_ = 1;
};

}  // namespace tnmt::server::jobs
