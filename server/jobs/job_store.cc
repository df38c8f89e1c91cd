// JobStore; see job_store.h.
#include "server/jobs/job_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/core/quote.h"
#include "server/jobs/sqlite.h"

namespace tnmt::server::jobs {

namespace {

// Schema migrations: kMigrations[v] takes a database from version v to v + 1. Only append;
// never edit a step that has shipped (databases in the field have applied it already).
constexpr const char* kMigrations[] = {
    // 1: jobs and their events. A job's id is "job-" + its seq; AUTOINCREMENT means SQLite
    // never hands out a seq again, even after the newest jobs are deleted.
    R"sql(
CREATE TABLE jobs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  request_id TEXT NOT NULL DEFAULT '',
  spec_json TEXT NOT NULL,
  device TEXT NOT NULL DEFAULT '',
  state TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  started_ms INTEGER NOT NULL DEFAULT 0,
  finished_ms INTEGER NOT NULL DEFAULT 0,
  updated_ms INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0,
  step INTEGER NOT NULL DEFAULT 0,
  max_steps INTEGER NOT NULL DEFAULT 0,
  loss REAL NOT NULL DEFAULT 0,
  dev_bleu REAL NOT NULL DEFAULT -1,
  tokens_per_second REAL NOT NULL DEFAULT 0,
  eta_seconds REAL NOT NULL DEFAULT -1,
  last_checkpoint TEXT NOT NULL DEFAULT '',
  published_model TEXT NOT NULL DEFAULT '',
  error TEXT NOT NULL DEFAULT '',
  cancel_requested INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX jobs_request_id ON jobs(request_id) WHERE request_id <> '';
CREATE TABLE job_events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  job_id TEXT NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
  time_ms INTEGER NOT NULL,
  kind TEXT NOT NULL,
  json TEXT NOT NULL
);
CREATE INDEX job_events_job_seq ON job_events(job_id, seq);
)sql",
    // 2: each job's event count, kept by AppendEvent so that enforcing the per-job cap does
    // not count the events on every append (backfilled here); and an index on state for
    // ListByState, CountInStates and List's state filter.
    R"sql(
ALTER TABLE jobs ADD COLUMN event_count INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET event_count = (SELECT COUNT(*) FROM job_events WHERE job_events.job_id = jobs.id);
CREATE INDEX jobs_state ON jobs(state);
)sql",
    // 3: the signature of the newest dev BLEU (which BLEU, on how many dev sentences).
    R"sql(
ALTER TABLE jobs ADD COLUMN dev_bleu_signature TEXT NOT NULL DEFAULT '';
)sql",
};
constexpr int kLatestVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

constexpr int kBusyTimeoutMs = 5000;
constexpr int kMaxPageSize = 1000;

// The fields Update overwrites, in the order BindMutable binds and ReadJob reads them.
constexpr const char* kMutableColumns[] = {
    "name",
    "device",
    "state",
    "started_ms",
    "finished_ms",
    "attempts",
    "step",
    "max_steps",
    "loss",
    "dev_bleu",
    "tokens_per_second",
    "eta_seconds",
    "last_checkpoint",
    "published_model",
    "error",
    "cancel_requested",
    "dev_bleu_signature",
};
constexpr int kNumMutable = sizeof(kMutableColumns) / sizeof(kMutableColumns[0]);

// What ReadJob reads: seq (for page tokens), the fixed fields, then kMutableColumns.
const std::string& JobColumns() {
  static const std::string* columns =
      new std::string(absl::StrCat("seq, id, request_id, spec_json, created_ms, updated_ms, ",
                                   absl::StrJoin(kMutableColumns, ", ")));
  return *columns;
}

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

void BindMutable(const JobRecord& r, Statement& s) {
  s.BindText(r.name);
  s.BindText(r.device);
  s.BindText(JobStateName(r.state));
  s.BindInt(r.started_ms);
  s.BindInt(r.finished_ms);
  s.BindInt(r.attempts);
  s.BindInt(r.step);
  s.BindInt(r.max_steps);
  s.BindDouble(r.loss);
  s.BindDouble(r.dev_bleu);
  s.BindDouble(r.tokens_per_second);
  s.BindDouble(r.eta_seconds);
  s.BindText(r.last_checkpoint);
  s.BindText(r.published_model);
  s.BindText(r.error);
  s.BindInt(r.cancel_requested ? 1 : 0);
  s.BindText(r.dev_bleu_signature);
}

// The current row of a statement selecting JobColumns().
absl::StatusOr<JobRecord> ReadJob(const Statement& s) {
  JobRecord r;
  r.id = s.Text(1);
  r.request_id = s.Text(2);
  r.spec_json = s.Text(3);
  r.created_ms = s.Int(4);
  r.updated_ms = s.Int(5);
  r.name = s.Text(6);
  r.device = s.Text(7);
  absl::StatusOr<JobState> state = ParseJobState(s.Text(8));
  if (!state.ok()) {
    return absl::DataLossError(
        absl::StrCat("job ", r.id, " in the database: ", state.status().message()));
  }
  r.state = *state;
  r.started_ms = s.Int(9);
  r.finished_ms = s.Int(10);
  r.attempts = static_cast<int>(s.Int(11));
  r.step = s.Int(12);
  r.max_steps = s.Int(13);
  r.loss = s.Double(14);
  r.dev_bleu = s.Double(15);
  r.tokens_per_second = s.Double(16);
  r.eta_seconds = s.Double(17);
  r.last_checkpoint = s.Text(18);
  r.published_model = s.Text(19);
  r.error = s.Text(20);
  r.cancel_requested = s.Int(21) != 0;
  r.dev_bleu_signature = s.Text(22);
  return r;
}

// Every row of `s` (selecting JobColumns()); their seqs appended to *seqs if not null.
absl::StatusOr<std::vector<JobRecord>> ReadJobs(Statement& s,
                                                std::vector<int64_t>* seqs = nullptr) {
  std::vector<JobRecord> jobs;
  while (true) {
    absl::StatusOr<bool> row = s.Step();
    if (!row.ok()) return row.status();
    if (!*row) return jobs;
    absl::StatusOr<JobRecord> job = ReadJob(s);
    if (!job.ok()) return job.status();
    jobs.push_back(*std::move(job));
    if (seqs != nullptr) seqs->push_back(s.Int(0));
  }
}

// "?, ?, ?" (n of them): placeholders, never values.
std::string Placeholders(size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) absl::StrAppend(&out, i == 0 ? "?" : ", ?");
  return out;
}

void BindStates(const std::vector<JobState>& states, Statement& s) {
  for (JobState state : states) s.BindText(JobStateName(state));
}

// A LIKE pattern matching names that contain `text` literally (with ESCAPE '\').
std::string ContainsPattern(absl::string_view text) {
  std::string pattern = "%";
  for (char c : text) {
    if (c == '%' || c == '_' || c == '\\') pattern.push_back('\\');
    pattern.push_back(c);
  }
  pattern.push_back('%');
  return pattern;
}


absl::Status NewerSchemaError(int version) {
  return absl::FailedPreconditionError(
      absl::StrCat("schema version ", version, " is newer than this tnmt (", kLatestVersion,
                   "): use the newer tnmt that wrote it, or another database"));
}

// NOT_FOUND unless job `id` exists; mu_ held.
absl::Status CheckJobExists(sqlite3* db, const std::string& id) {
  Statement s(db, "SELECT 1 FROM jobs WHERE id = ?", absl::StrCat("looking up job ", id));
  s.BindText(id);
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job ", QuoteForError(id), " not found"));
  return absl::OkStatus();
}

}  // namespace

const char* JobStateName(JobState s) {
  switch (s) {
    case tnmt::v1::JOB_STATE_QUEUED:
      return "QUEUED";
    case tnmt::v1::JOB_STATE_RUNNING:
      return "RUNNING";
    case tnmt::v1::JOB_STATE_CANCELLING:
      return "CANCELLING";
    case tnmt::v1::JOB_STATE_PUBLISHING:
      return "PUBLISHING";
    case tnmt::v1::JOB_STATE_SUCCEEDED:
      return "SUCCEEDED";
    case tnmt::v1::JOB_STATE_FAILED:
      return "FAILED";
    case tnmt::v1::JOB_STATE_CANCELLED:
      return "CANCELLED";
    default:
      return "UNKNOWN";
  }
}

absl::StatusOr<JobState> ParseJobState(absl::string_view name) {
  std::vector<std::string> names;
  for (JobState s : kAllJobStates) {
    if (name == JobStateName(s)) return s;
    names.push_back(JobStateName(s));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown job state \"", name, "\" (expected one of ", absl::StrJoin(names, ", "), ")"));
}

bool IsTerminal(JobState s) {
  return s == tnmt::v1::JOB_STATE_SUCCEEDED || s == tnmt::v1::JOB_STATE_FAILED || s == tnmt::v1::JOB_STATE_CANCELLED;
}

int JobStore::LatestSchemaVersion() { return kLatestVersion; }

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path) {
  return OpenImpl(path, kLatestVersion);
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::OpenAtVersionForTest(const std::string& path,
                                                                         int version) {
  return OpenImpl(path, std::clamp(version, 0, kLatestVersion));
}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::OpenImpl(const std::string& path,
                                                             int target_version) {
  auto fail = [&path](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("job database ", path, ": ", s.message()));
  };
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  // The store owns the handle from here on, even a failed open's (which must be closed too).
  std::unique_ptr<JobStore> store(new JobStore(db));
  if (rc != SQLITE_OK) {
    return fail(
        SqliteError(db, rc,
                    (rc & 0xff) == SQLITE_CANTOPEN
                        ? "opening (does its directory exist, and may this user write there?)"
                        : "opening"));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, kBusyTimeoutMs);

  // Read the version before writing anything: a file that is not a database fails here, and
  // one from a newer tnmt is left exactly as it was.
  absl::StatusOr<int> version = ReadUserVersion(db);
  if (!version.ok()) return fail(version.status());
  if (*version > kLatestVersion) return fail(NewerSchemaError(*version));

  std::string mode;
  {  // (finished before the migration transaction commits)
    Statement wal(db, "PRAGMA journal_mode = WAL", "setting journal_mode=WAL");
    absl::StatusOr<bool> row = wal.Step();
    if (!row.ok()) return fail(row.status());
    if (*row) mode = wal.Text(0);
  }
  if (mode != "wal") {
    return fail(absl::FailedPreconditionError(absl::StrCat(
        "journal_mode is \"", mode, "\", not \"wal\" (WAL needs a local filesystem)")));
  }
  // synchronous=NORMAL: in WAL mode a crash of the process never loses a commit and a power
  // loss never corrupts the database; it can only roll back the last commits before the
  // outage, which startup recovery handles like any interrupted job. FULL would fsync on every
  // progress event of every running job.
  absl::Status s = Exec(db, "PRAGMA synchronous = NORMAL", "setting synchronous=NORMAL");
  if (s.ok()) s = Exec(db, "PRAGMA foreign_keys = ON", "enabling foreign keys");
  if (s.ok()) s = store->Migrate(target_version);
  if (!s.ok()) return fail(s);
  return store;
}

absl::Status JobStore::Migrate(int target_version) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(db_);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  // Read again inside the transaction: another process may have migrated meanwhile.
  absl::StatusOr<int> version = ReadUserVersion(db_);
  if (!version.ok()) return version.status();
  if (*version > kLatestVersion) return NewerSchemaError(*version);
  for (int v = *version; v < target_version; ++v) {
    absl::Status s = Exec(db_, kMigrations[v],
                          absl::StrCat("migrating the schema from version ", v, " to ", v + 1));
    if (!s.ok()) return s;
  }
  if (*version < target_version) {
    // PRAGMA takes no bound parameters; the value is our own constant.
    const std::string sql = absl::StrCat("PRAGMA user_version = ", target_version);
    if (absl::Status s = Exec(db_, sql.c_str(), "setting the schema version"); !s.ok()) return s;
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  schema_version_ = std::max(*version, target_version);
  return absl::OkStatus();
}

JobStore::~JobStore() { sqlite3_close_v2(db_); }

void JobStore::SetMaxEventsPerJobForTest(int max_events) {
  std::lock_guard<std::mutex> lock(mu_);
  max_events_per_job_ = std::max(max_events, 1);
}

absl::StatusOr<JobRecord> JobStore::Insert(JobRecord record, bool* created) {
  std::lock_guard<std::mutex> lock(mu_);
  Transaction txn(db_);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  if (!record.request_id.empty()) {
    // "request_id <> ''" lets SQLite use the partial unique index.
    Statement s(db_,
                absl::StrCat("SELECT ", JobColumns(),
                             " FROM jobs WHERE request_id = ? AND request_id <> ''"),
                absl::StrCat("looking up request_id ", record.request_id));
    s.BindText(record.request_id);
    absl::StatusOr<bool> row = s.Step();
    if (!row.ok()) return row.status();
    if (*row) {
      if (created != nullptr) *created = false;
      return ReadJob(s);
    }
  }

  // The next seq as AUTOINCREMENT would choose it (sqlite_sequence remembers the largest ever
  // used), chosen here because the id is derived from it.
  int64_t seq = 0;
  {  // (a statement still in progress would make COMMIT fail)
    Statement next(db_,
                   "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs'), 0),"
                   " COALESCE((SELECT MAX(seq) FROM jobs), 0)) + 1",
                   "choosing the next job id");
    absl::StatusOr<bool> row = next.Step();
    if (!row.ok()) return row.status();
    seq = next.Int(0);
  }
  record.id = absl::StrFormat("job-%06d", seq);
  record.created_ms = record.updated_ms = NowMs();

  static const std::string* sql = new std::string(
      absl::StrCat("INSERT INTO jobs (seq, id, request_id, spec_json, created_ms, updated_ms, ",
                   absl::StrJoin(kMutableColumns, ", "), ") VALUES (?, ?, ?, ?, ?, ?, ",
                   Placeholders(kNumMutable), ")"));
  Statement insert(db_, *sql, absl::StrCat("inserting job ", record.id));
  insert.BindInt(seq);
  insert.BindText(record.id);
  insert.BindText(record.request_id);
  insert.BindText(record.spec_json);
  insert.BindInt(record.created_ms);
  insert.BindInt(record.updated_ms);
  BindMutable(record, insert);
  if (absl::Status s = insert.Run(); !s.ok()) return s;
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  if (created != nullptr) *created = true;
  return record;
}

absl::StatusOr<JobRecord> JobStore::Get(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  Statement s(db_, absl::StrCat("SELECT ", JobColumns(), " FROM jobs WHERE id = ?"),
              absl::StrCat("reading job ", id));
  s.BindText(id);
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::NotFoundError(absl::StrCat("job ", QuoteForError(id), " not found"));
  return ReadJob(s);
}

absl::StatusOr<std::vector<JobRecord>> JobStore::List(const ListFilter& filter,
                                                      std::string* next_page_token) const {
  const int page_size = std::clamp(filter.page_size, 1, kMaxPageSize);
  // The token is the seq of the last job of the previous page; this page starts below it.
  int64_t before = std::numeric_limits<int64_t>::max();
  if (!filter.page_token.empty() &&
      (!absl::SimpleAtoi(filter.page_token, &before) || before <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token \"", filter.page_token,
        "\" is not valid: pass the next_page_token of the previous page, or \"\" for the first"));
  }
  std::string sql = absl::StrCat("SELECT ", JobColumns(), " FROM jobs WHERE seq < ?");
  if (!filter.states.empty()) {
    absl::StrAppend(&sql, " AND state IN (", Placeholders(filter.states.size()), ")");
  }
  if (!filter.name_contains.empty()) absl::StrAppend(&sql, " AND name LIKE ? ESCAPE '\\'");
  absl::StrAppend(&sql, " ORDER BY seq DESC LIMIT ?");

  std::lock_guard<std::mutex> lock(mu_);
  Statement s(db_, sql, "listing jobs");
  s.BindInt(before);
  BindStates(filter.states, s);
  if (!filter.name_contains.empty()) s.BindText(ContainsPattern(filter.name_contains));
  s.BindInt(page_size + 1);  // one more than a page says whether another page follows
  std::vector<int64_t> seqs;
  absl::StatusOr<std::vector<JobRecord>> jobs = ReadJobs(s, &seqs);
  if (!jobs.ok()) return jobs.status();
  std::string token;
  if (static_cast<int>(jobs->size()) > page_size) {
    jobs->resize(page_size);
    token = absl::StrCat(seqs[page_size - 1]);
  }
  if (next_page_token != nullptr) *next_page_token = std::move(token);
  return jobs;
}

absl::Status JobStore::Update(const JobRecord& record) {
  static const std::string* sql =
      new std::string(absl::StrCat("UPDATE jobs SET updated_ms = ?, ",
                                   absl::StrJoin(kMutableColumns, " = ?, "), " = ? WHERE id = ?"));
  std::lock_guard<std::mutex> lock(mu_);
  Statement s(db_, *sql, absl::StrCat("updating job ", record.id));
  s.BindInt(NowMs());
  BindMutable(record, s);
  s.BindText(record.id);
  if (absl::Status st = s.Run(); !st.ok()) return st;
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat("job ", QuoteForError(record.id), " not found"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobRecord>> JobStore::ListByState(
    const std::vector<JobState>& states) const {
  if (states.empty()) return std::vector<JobRecord>();
  std::lock_guard<std::mutex> lock(mu_);
  Statement s(db_,
              absl::StrCat("SELECT ", JobColumns(), " FROM jobs WHERE state IN (",
                           Placeholders(states.size()), ") ORDER BY seq"),
              "listing jobs by state");
  BindStates(states, s);
  return ReadJobs(s);
}

int64_t JobStore::CountInStates(const std::vector<JobState>& states) const {
  if (states.empty()) return 0;
  std::lock_guard<std::mutex> lock(mu_);
  Statement s(
      db_,
      absl::StrCat("SELECT COUNT(*) FROM jobs WHERE state IN (", Placeholders(states.size()), ")"),
      "counting jobs by state");
  BindStates(states, s);
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok() || !*row) return -1;
  return s.Int(0);
}

absl::StatusOr<int64_t> JobStore::AppendEvent(const std::string& job_id, const std::string& kind,
                                              const std::string& json) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string what = absl::StrCat("appending an event to job ", job_id);
  Transaction txn(db_);
  if (absl::Status s = txn.Begin(); !s.ok()) return s;
  {
    Statement s(db_, "UPDATE jobs SET event_count = event_count + 1 WHERE id = ?", what);
    s.BindText(job_id);
    if (absl::Status st = s.Run(); !st.ok()) return st;
    if (sqlite3_changes(db_) == 0) {
      return absl::NotFoundError(absl::StrCat("job ", QuoteForError(job_id), " not found"));
    }
  }
  Statement insert(db_, "INSERT INTO job_events (job_id, time_ms, kind, json) VALUES (?, ?, ?, ?)",
                   what);
  insert.BindText(job_id);
  insert.BindInt(NowMs());
  insert.BindText(kind);
  insert.BindText(json);
  if (absl::Status s = insert.Run(); !s.ok()) return s;
  const int64_t seq = sqlite3_last_insert_rowid(db_);

  int64_t count = 0;
  {  // (a statement still in progress would make COMMIT fail)
    Statement counted(db_, "SELECT event_count FROM jobs WHERE id = ?", what);
    counted.BindText(job_id);
    absl::StatusOr<bool> row = counted.Step();
    if (!row.ok()) return row.status();
    if (*row) count = counted.Int(0);
  }
  if (count > max_events_per_job_) {
    Statement trim(db_,
                   "DELETE FROM job_events WHERE seq IN (SELECT seq FROM job_events"
                   " WHERE job_id = ? ORDER BY seq LIMIT ?)",
                   absl::StrCat("deleting the oldest events of job ", job_id));
    trim.BindText(job_id);
    trim.BindInt(count - max_events_per_job_);
    if (absl::Status s = trim.Run(); !s.ok()) return s;
    Statement recount(db_, "UPDATE jobs SET event_count = event_count - ? WHERE id = ?", what);
    recount.BindInt(sqlite3_changes(db_));
    recount.BindText(job_id);
    if (absl::Status s = recount.Run(); !s.ok()) return s;
  }
  if (absl::Status s = txn.Commit(); !s.ok()) return s;
  return seq;
}

absl::StatusOr<std::vector<JobEvent>> JobStore::Events(const std::string& job_id, int64_t after_seq,
                                                       int limit) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (absl::Status s = CheckJobExists(db_, job_id); !s.ok()) return s;
  Statement s(db_,
              "SELECT seq, job_id, time_ms, kind, json FROM job_events"
              " WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
              absl::StrCat("reading the events of job ", job_id));
  s.BindText(job_id);
  s.BindInt(after_seq);
  s.BindInt(std::clamp(limit, 1, kMaxEventsPerJob));
  std::vector<JobEvent> events;
  while (true) {
    absl::StatusOr<bool> row = s.Step();
    if (!row.ok()) return row.status();
    if (!*row) return events;
    JobEvent e;
    e.seq = s.Int(0);
    e.job_id = s.Text(1);
    e.time_ms = s.Int(2);
    e.kind = s.Text(3);
    e.json = s.Text(4);
    events.push_back(std::move(e));
  }
}

}  // namespace tnmt::server::jobs
