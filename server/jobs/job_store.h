// JobStore: the training-jobs service's persistent state, one SQLite database holding every job
// (spec, state, progress, outcome) and each job's event log, so that a restarted server finds
// its queue and the jobs that were running when it stopped. The schema is versioned
// (PRAGMA user_version) and migrated forward by Open.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;

#include "proto/tnmt/v1/training.pb.h"

namespace tnmt::server::jobs {

// A job's state is the API's (tnmt.v1.JobState); the store writes it by name without the
// JOB_STATE_ prefix ("QUEUED", ...), as every schema version has.
using JobState = tnmt::v1::JobState;

// Every state, in lifecycle order.
inline constexpr JobState kAllJobStates[] = {
    tnmt::v1::JOB_STATE_QUEUED,    tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_CANCELLING,
    tnmt::v1::JOB_STATE_PUBLISHING, tnmt::v1::JOB_STATE_SUCCEEDED, tnmt::v1::JOB_STATE_FAILED,
    tnmt::v1::JOB_STATE_CANCELLED,
};

// "QUEUED", "RUNNING", "CANCELLING", "PUBLISHING", "SUCCEEDED", "FAILED", "CANCELLED".
const char* JobStateName(JobState s);
// The inverse of JobStateName (exact, upper case); INVALID_ARGUMENT naming the bad value.
absl::StatusOr<JobState> ParseJobState(absl::string_view name);
// SUCCEEDED, FAILED and CANCELLED.
bool IsTerminal(JobState s);

struct JobRecord {
  std::string id;    // assigned by Insert: "job-" + 6-digit zero-padded sequence, never reused
  std::string name;  // display name from the spec
  std::string request_id;  // client idempotency key; "" = none
  std::string spec_json;   // the validated job spec (opaque text to the store)
  std::string device;      // e.g. "cpu" or "cuda:0"
  JobState state = tnmt::v1::JOB_STATE_QUEUED;
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0, updated_ms = 0;  // unix ms; 0 = not yet
  int attempts = 0;  // trainer processes started for this job
  int64_t step = 0, max_steps = 0;
  // loss 0: no progress report yet (a training loss is positive); -1 = unknown
  double loss = 0, dev_bleu = -1, tokens_per_second = 0, eta_seconds = -1;
  std::string dev_bleu_signature;  // which BLEU dev_bleu is (sacreBLEU-style), "" if none
  std::string last_checkpoint;  // path of the newest checkpoint
  std::string published_model;  // model name once published
  std::string error;            // why it failed
  bool cancel_requested = false;
};

struct JobEvent {
  int64_t seq = 0;  // global, increasing, never reused
  std::string job_id;
  int64_t time_ms = 0;
  std::string kind;  // "state", "progress", "validation", "checkpoint", "log": opaque to the store
  std::string json;  // opaque payload
};

struct ListFilter {
  std::vector<JobState> states;  // empty = all
  // "" = any. A plain substring ('%' and '_' match themselves), case-insensitive for ASCII.
  std::string name_contains;
  int page_size = 50;      // clamped to [1, 1000]
  std::string page_token;  // "" = first page; otherwise the token List returned
};

// All methods are safe to call from several threads at once (one connection behind a mutex).
// Several processes may share the file: writes take the database lock (busy timeout 5 s).
class JobStore {
 public:
  static constexpr int kMaxEventsPerJob = 10000;

  // Opens or creates the database at `path` (its directory must exist) in WAL mode and applies
  // pending schema migrations in one transaction. Fails naming the path if it cannot be opened,
  // is not a database, or has a schema newer than this binary knows (FAILED_PRECONDITION).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);
  // Tests only: like Open but migrates no further than `version` (to build old databases).
  static absl::StatusOr<std::unique_ptr<JobStore>> OpenAtVersionForTest(const std::string& path,
                                                                        int version);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  int schema_version() const { return schema_version_; }  // after migrations
  static int LatestSchemaVersion();

  // Inserts a new job (id, created_ms and updated_ms assigned; the other fields as given) and
  // returns it. If record.request_id is non-empty and a job with that request_id exists,
  // inserts nothing and returns that job with *created = false. `created` may be null.
  absl::StatusOr<JobRecord> Insert(JobRecord record, bool* created);
  // NOT_FOUND naming the id.
  absl::StatusOr<JobRecord> Get(const std::string& id) const;
  // Newest first (by id descending); *next_page_token is "" when there are no more.
  // INVALID_ARGUMENT for a page token List did not return.
  absl::StatusOr<std::vector<JobRecord>> List(const ListFilter& filter,
                                              std::string* next_page_token) const;
  // Overwrites every mutable field of job `record.id` (all but id, created_ms, request_id and
  // spec_json) and sets updated_ms to now. NOT_FOUND if absent.
  absl::Status Update(const JobRecord& record);
  // Jobs in any of `states` (empty = none), oldest first: at startup, the interrupted jobs and
  // the queue.
  absl::StatusOr<std::vector<JobRecord>> ListByState(const std::vector<JobState>& states) const;
  // Jobs in any of `states` (empty = none); -1 on a database error.
  int64_t CountInStates(const std::vector<JobState>& states) const;

  // Appends an event to job `job_id` (NOT_FOUND if absent), assigning seq and time, and returns
  // its seq. Keeps the job's newest kMaxEventsPerJob events, deleting older ones.
  absl::StatusOr<int64_t> AppendEvent(const std::string& job_id, const std::string& kind,
                                      const std::string& json);
  // Events of job `job_id` (NOT_FOUND if absent) with seq > after_seq, oldest first, at most
  // `limit` (clamped to [1, kMaxEventsPerJob]).
  absl::StatusOr<std::vector<JobEvent>> Events(const std::string& job_id, int64_t after_seq,
                                               int limit) const;

  // Tests only: a smaller per-job event cap, applied from the next AppendEvent.
  void SetMaxEventsPerJobForTest(int max_events);

 private:
  explicit JobStore(sqlite3* db) : db_(db) {}
  static absl::StatusOr<std::unique_ptr<JobStore>> OpenImpl(const std::string& path,
                                                            int target_version);
  // Applies the migration steps up to `target_version` in one transaction (called by Open).
  absl::Status Migrate(int target_version);

  mutable std::mutex mu_;  // guards db_ (and sqlite3_errmsg, which reads its last error)
  sqlite3* const db_;
  int schema_version_ = 0;
  int max_events_per_job_ = kMaxEventsPerJob;  // guarded by mu_
};

}  // namespace tnmt::server::jobs
