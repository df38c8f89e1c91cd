// JobStore: field round trips, ids, idempotent insert, listing and paging, persistence, schema
// migrations and refusals, the event log and its cap, concurrent use.
#include "server/jobs/job_store.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tnmt::server::jobs {
namespace {

using ::testing::HasSubstr;

// A fresh directory under the test's TEST_TMPDIR.
std::string MakeTempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/job_store_XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  return dir;
}

// A plain sqlite3 connection to the file, beside the store: builds old databases and reads
// what the store cannot tell (pragmas, the schema).
class RawDb {
 public:
  explicit RawDb(const std::string& path) {
    EXPECT_EQ(sqlite3_open(path.c_str(), &db_), SQLITE_OK) << path;
  }
  ~RawDb() { sqlite3_close(db_); }
  void Exec(const std::string& sql) {
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << sql << ": " << (err != nullptr ? err : "");
    sqlite3_free(err);
  }
  // The first column of the first row, as text ("" if there is no row).
  std::string Query(const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db_);
    std::string out;
    if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

// A record with every field set away from its default.
JobRecord FullRecord() {
  JobRecord r;
  r.name = "en-de base";
  r.request_id = "req-1";
  r.spec_json = R"({"model":"base","max_steps":1000})";
  r.device = "cuda:0";
  r.state = tnmt::v1::JOB_STATE_RUNNING;
  r.started_ms = 1700000000123;
  r.finished_ms = 1700000999456;
  r.attempts = 2;
  r.step = 420;
  r.max_steps = 1000;
  r.loss = 3.25;
  r.dev_bleu = 17.5;
  r.dev_bleu_signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0|sentences:300";
  r.tokens_per_second = 12345.5;
  r.eta_seconds = 600.25;
  r.last_checkpoint = "/ckpt/step-400";
  r.published_model = "en-de-v2";
  r.error = "it's \"quoted\"; DROP TABLE jobs; --";
  r.cancel_requested = true;
  return r;
}

void ExpectSameJob(const JobRecord& a, const JobRecord& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.request_id, b.request_id);
  EXPECT_EQ(a.spec_json, b.spec_json);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.created_ms, b.created_ms);
  EXPECT_EQ(a.started_ms, b.started_ms);
  EXPECT_EQ(a.finished_ms, b.finished_ms);
  EXPECT_EQ(a.updated_ms, b.updated_ms);
  EXPECT_EQ(a.attempts, b.attempts);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.max_steps, b.max_steps);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.dev_bleu, b.dev_bleu);
  EXPECT_EQ(a.dev_bleu_signature, b.dev_bleu_signature);
  EXPECT_EQ(a.tokens_per_second, b.tokens_per_second);
  EXPECT_EQ(a.eta_seconds, b.eta_seconds);
  EXPECT_EQ(a.last_checkpoint, b.last_checkpoint);
  EXPECT_EQ(a.published_model, b.published_model);
  EXPECT_EQ(a.error, b.error);
  EXPECT_EQ(a.cancel_requested, b.cancel_requested);
}

std::vector<std::string> Ids(const std::vector<JobRecord>& jobs) {
  std::vector<std::string> ids;
  for (const JobRecord& j : jobs) ids.push_back(j.id);
  return ids;
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = MakeTempDir() + "/jobs.db";
    Reopen();
  }
  void Reopen() {
    store_.reset();
    absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
  }
  JobRecord Add(const std::string& name, JobState state = tnmt::v1::JOB_STATE_QUEUED,
                const std::string& request_id = "") {
    JobRecord r;
    r.name = name;
    r.state = state;
    r.request_id = request_id;
    r.spec_json = "{}";
    bool created = false;
    absl::StatusOr<JobRecord> job = store_->Insert(r, &created);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobRecord();
  }

  std::string path_;
  std::unique_ptr<JobStore> store_;
};

TEST(JobStateTest, NamesRoundTrip) {
  for (JobState s :
       {tnmt::v1::JOB_STATE_QUEUED, tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_CANCELLING, tnmt::v1::JOB_STATE_PUBLISHING,
        tnmt::v1::JOB_STATE_SUCCEEDED, tnmt::v1::JOB_STATE_FAILED, tnmt::v1::JOB_STATE_CANCELLED}) {
    absl::StatusOr<JobState> parsed = ParseJobState(JobStateName(s));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_STREQ(JobStateName(tnmt::v1::JOB_STATE_CANCELLING), "CANCELLING");
  absl::StatusOr<JobState> bad = ParseJobState("queued");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("\"queued\""));
  EXPECT_TRUE(IsTerminal(tnmt::v1::JOB_STATE_SUCCEEDED));
  EXPECT_TRUE(IsTerminal(tnmt::v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsTerminal(tnmt::v1::JOB_STATE_CANCELLED));
  EXPECT_FALSE(IsTerminal(tnmt::v1::JOB_STATE_CANCELLING));
  EXPECT_FALSE(IsTerminal(tnmt::v1::JOB_STATE_PUBLISHING));
}

TEST_F(JobStoreTest, InsertGetUpdateRoundTripEveryField) {
  EXPECT_EQ(store_->schema_version(), JobStore::LatestSchemaVersion());
  bool created = false;
  absl::StatusOr<JobRecord> inserted = store_->Insert(FullRecord(), &created);
  ASSERT_TRUE(inserted.ok()) << inserted.status();
  EXPECT_TRUE(created);
  EXPECT_EQ(inserted->id, "job-000001");
  EXPECT_GT(inserted->created_ms, 0);
  EXPECT_EQ(inserted->updated_ms, inserted->created_ms);
  JobRecord expected = FullRecord();
  expected.id = inserted->id;
  expected.created_ms = inserted->created_ms;
  expected.updated_ms = inserted->updated_ms;
  ExpectSameJob(*inserted, expected);
  absl::StatusOr<JobRecord> got = store_->Get(inserted->id);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameJob(*got, expected);

  // Every mutable field changes; the immutable ones are ignored by Update.
  JobRecord changed = *got;
  changed.name = "renamed";
  changed.device = "cpu";
  changed.state = tnmt::v1::JOB_STATE_SUCCEEDED;
  changed.started_ms += 1;
  changed.finished_ms += 2;
  changed.attempts = 3;
  changed.step = 1000;
  changed.max_steps = 2000;
  changed.loss = 1.5;
  changed.dev_bleu = 28.75;
  changed.tokens_per_second = 99.5;
  changed.eta_seconds = -1;
  changed.last_checkpoint = "/ckpt/step-1000";
  changed.published_model = "en-de-v3";
  changed.error = "";
  changed.cancel_requested = false;
  JobRecord attempt = changed;
  attempt.request_id = "other";
  attempt.spec_json = "{\"changed\":true}";
  attempt.created_ms = 1;
  ASSERT_TRUE(store_->Update(attempt).ok());
  got = store_->Get(changed.id);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_GE(got->updated_ms, inserted->updated_ms);
  changed.updated_ms = got->updated_ms;
  ExpectSameJob(*got, changed);
}

TEST_F(JobStoreTest, IdsIncreaseAndUnknownIdsAreNotFound) {
  EXPECT_EQ(Add("a").id, "job-000001");
  EXPECT_EQ(Add("b").id, "job-000002");
  EXPECT_EQ(Add("c").id, "job-000003");
  absl::StatusOr<JobRecord> missing = store_->Get("job-999999");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("job-999999"));
  JobRecord ghost;
  ghost.id = "job-424242";
  absl::Status s = store_->Update(ghost);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("job-424242"));
}

TEST_F(JobStoreTest, IdsAreNeverReusedAfterDeletion) {
  Add("a");
  Add("b");
  Add("c");
  store_.reset();
  RawDb(path_).Exec("DELETE FROM jobs WHERE id IN ('job-000002', 'job-000003')");
  Reopen();
  EXPECT_EQ(Add("d").id, "job-000004");
}

TEST_F(JobStoreTest, InsertIsIdempotentByRequestId) {
  const JobRecord first = Add("first", tnmt::v1::JOB_STATE_QUEUED, "client-key");
  JobRecord again;
  again.name = "second";
  again.request_id = "client-key";
  bool created = true;
  absl::StatusOr<JobRecord> got = store_->Insert(again, &created);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(created);
  ExpectSameJob(*got, first);
  EXPECT_EQ(store_->CountInStates({tnmt::v1::JOB_STATE_QUEUED}), 1);

  // No request id: never a collision.
  const JobRecord x = Add("x");
  const JobRecord y = Add("y");
  EXPECT_NE(x.id, y.id);
  EXPECT_EQ(store_->CountInStates({tnmt::v1::JOB_STATE_QUEUED}), 3);
}

TEST_F(JobStoreTest, ListFiltersByStateAndLiteralSubstring) {
  Add("100% done", tnmt::v1::JOB_STATE_SUCCEEDED);    // 1
  Add("a_b", tnmt::v1::JOB_STATE_RUNNING);            // 2
  Add("axb", tnmt::v1::JOB_STATE_FAILED);             // 3
  Add("plain", tnmt::v1::JOB_STATE_QUEUED);           // 4
  Add("A_B upper", tnmt::v1::JOB_STATE_RUNNING);      // 5
  Add("back\\slash", tnmt::v1::JOB_STATE_CANCELLED);  // 6
  auto list = [this](ListFilter f) {
    std::string token = "unset";
    absl::StatusOr<std::vector<JobRecord>> jobs = store_->List(f, &token);
    EXPECT_TRUE(jobs.ok()) << jobs.status();
    EXPECT_EQ(token, "");
    return jobs.ok() ? Ids(*jobs) : std::vector<std::string>{};
  };
  ListFilter f;
  EXPECT_EQ(list(f).size(), 6u);
  f.name_contains = "%";
  EXPECT_THAT(list(f), testing::ElementsAre("job-000001"));
  f.name_contains = "_";
  EXPECT_THAT(list(f), testing::ElementsAre("job-000005", "job-000002"));
  f.name_contains = "a_b";  // not "axb"; ASCII case-insensitive
  EXPECT_THAT(list(f), testing::ElementsAre("job-000005", "job-000002"));
  f.name_contains = "\\";
  EXPECT_THAT(list(f), testing::ElementsAre("job-000006"));
  f.name_contains = "";
  f.states = {tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_FAILED};
  EXPECT_THAT(list(f), testing::ElementsAre("job-000005", "job-000003", "job-000002"));
  f.name_contains = "upper";
  EXPECT_THAT(list(f), testing::ElementsAre("job-000005"));

  EXPECT_THAT(Ids(*store_->ListByState({tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_QUEUED})),
              testing::ElementsAre("job-000002", "job-000004", "job-000005"));
  EXPECT_TRUE(store_->ListByState({})->empty());
  EXPECT_EQ(store_->CountInStates({tnmt::v1::JOB_STATE_RUNNING, tnmt::v1::JOB_STATE_SUCCEEDED}), 3);
  EXPECT_EQ(store_->CountInStates({}), 0);
}

TEST_F(JobStoreTest, ListPagesNewestFirstExactlyOnce) {
  for (int i = 0; i < 7; ++i) Add(absl::StrCat("job ", i));
  std::vector<std::string> seen;
  std::vector<size_t> sizes;
  ListFilter f;
  f.page_size = 3;
  do {
    std::string next;
    absl::StatusOr<std::vector<JobRecord>> page = store_->List(f, &next);
    ASSERT_TRUE(page.ok()) << page.status();
    sizes.push_back(page->size());
    for (const JobRecord& j : *page) seen.push_back(j.id);
    f.page_token = next;
  } while (!f.page_token.empty() && sizes.size() < 10);
  EXPECT_THAT(sizes, testing::ElementsAre(3, 3, 1));
  EXPECT_THAT(seen, testing::ElementsAre("job-000007", "job-000006", "job-000005", "job-000004",
                                         "job-000003", "job-000002", "job-000001"));

  std::string next;
  f.page_size = 0;  // clamped to 1
  f.page_token = "";
  EXPECT_EQ(store_->List(f, &next)->size(), 1u);
  EXPECT_FALSE(next.empty());
  f.page_size = 100000;  // clamped to 1000
  EXPECT_EQ(store_->List(f, &next)->size(), 7u);
  EXPECT_EQ(next, "");

  for (const char* bad : {"garbage", "-3", "0", "12abc"}) {
    f.page_token = bad;
    absl::StatusOr<std::vector<JobRecord>> page = store_->List(f, &next);
    EXPECT_EQ(page.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(page.status().message(), HasSubstr(bad));
  }
}

TEST_F(JobStoreTest, EverythingSurvivesReopenInWalMode) {
  absl::StatusOr<JobRecord> job = store_->Insert(FullRecord(), nullptr);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(store_->AppendEvent(job->id, "state", R"({"state":"RUNNING"})").ok());
  ASSERT_TRUE(store_->AppendEvent(job->id, "log", "line").ok());
  const std::vector<JobEvent> before = *store_->Events(job->id, 0, 100);
  Reopen();
  EXPECT_EQ(store_->schema_version(), JobStore::LatestSchemaVersion());
  absl::StatusOr<JobRecord> got = store_->Get(job->id);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSameJob(*got, *job);
  const std::vector<JobEvent> after = *store_->Events(job->id, 0, 100);
  ASSERT_EQ(after.size(), 2u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].seq, before[i].seq);
    EXPECT_EQ(after[i].time_ms, before[i].time_ms);
    EXPECT_EQ(after[i].kind, before[i].kind);
    EXPECT_EQ(after[i].json, before[i].json);
  }
  EXPECT_EQ(RawDb(path_).Query("PRAGMA journal_mode"), "wal");
}

TEST_F(JobStoreTest, MigratesAVersion1DatabaseKeepingItsRows) {
  store_.reset();
  const std::string path = MakeTempDir() + "/v1.db";
  {
    absl::StatusOr<std::unique_ptr<JobStore>> v1 = JobStore::OpenAtVersionForTest(path, 1);
    ASSERT_TRUE(v1.ok()) << v1.status();
    EXPECT_EQ((*v1)->schema_version(), 1);
  }
  {
    // A row and events as a version-1 tnmt wrote them (only version-1 columns).
    RawDb raw(path);
    EXPECT_EQ(raw.Query("PRAGMA user_version"), "1");
    raw.Exec(
        "INSERT INTO jobs (seq, id, name, request_id, spec_json, device, state, created_ms,"
        " updated_ms, step, max_steps, loss, dev_bleu, last_checkpoint) VALUES (1, 'job-000001',"
        " 'old job', 'req-old', '{\"v\":1}', 'cpu', 'RUNNING', 1000, 2000, 50, 100, 2.5, 9.5,"
        " '/ckpt/50')");
    for (int i = 0; i < 4; ++i) {
      raw.Exec(absl::StrCat("INSERT INTO job_events (job_id, time_ms, kind, json) VALUES",
                            " ('job-000001', ", 1000 + i, ", 'log', '", i, "')"));
    }
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->schema_version(), JobStore::LatestSchemaVersion());
  absl::StatusOr<JobRecord> job = (*store)->Get("job-000001");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "old job");
  EXPECT_EQ(job->request_id, "req-old");
  EXPECT_EQ(job->spec_json, "{\"v\":1}");
  EXPECT_EQ(job->device, "cpu");
  EXPECT_EQ(job->state, tnmt::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(job->created_ms, 1000);
  EXPECT_EQ(job->updated_ms, 2000);
  EXPECT_EQ(job->step, 50);
  EXPECT_EQ(job->max_steps, 100);
  EXPECT_EQ(job->loss, 2.5);
  EXPECT_EQ(job->dev_bleu, 9.5);
  EXPECT_EQ(job->eta_seconds, -1);  // column default
  EXPECT_EQ(job->dev_bleu_signature, "");  // added by version 3
  EXPECT_EQ(job->last_checkpoint, "/ckpt/50");
  EXPECT_EQ((*store)->Events("job-000001", 0, 100)->size(), 4u);
  // Version 2 backfilled the event count the cap relies on: with a cap of 4, one more event
  // drops exactly the oldest.
  (*store)->SetMaxEventsPerJobForTest(4);
  ASSERT_TRUE((*store)->AppendEvent("job-000001", "log", "4").ok());
  std::vector<std::string> kept;
  auto events = (*store)->Events("job-000001", 0, 100);  // named: a temporary's value would dangle
  ASSERT_TRUE(events.ok()) << events.status();
  for (const JobEvent& e : *events) kept.push_back(e.json);
  EXPECT_THAT(kept, testing::ElementsAre("1", "2", "3", "4"));
}

TEST_F(JobStoreTest, RefusesASchemaNewerThanThisBinary) {
  store_.reset();
  const std::string path = MakeTempDir() + "/future.db";
  const int newer = JobStore::LatestSchemaVersion() + 1;
  RawDb(path).Exec(absl::StrCat("CREATE TABLE t (x); PRAGMA user_version = ", newer));
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(),
              HasSubstr(absl::StrCat("schema version ", newer, " is newer than this tnmt (",
                                     JobStore::LatestSchemaVersion(), ")")));
  // Left exactly as it was: not even switched to WAL.
  EXPECT_EQ(RawDb(path).Query("PRAGMA journal_mode"), "delete");
}

TEST_F(JobStoreTest, RefusesAFileThatIsNotADatabase) {
  store_.reset();
  const std::string path = MakeTempDir() + "/garbage.db";
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 37 + 11) % 256));
  }
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("not a database"));

  const std::string nowhere = MakeTempDir() + "/no/such/dir/jobs.db";
  store = JobStore::Open(nowhere);
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr(nowhere));
}

TEST_F(JobStoreTest, EventsAppendReadAfterAndCapPerJob) {
  const std::string a = Add("a").id;
  const std::string b = Add("b").id;
  std::vector<int64_t> seqs;
  for (int i = 0; i < 5; ++i) {
    absl::StatusOr<int64_t> seq = store_->AppendEvent(a, "progress", absl::StrCat("a", i));
    ASSERT_TRUE(seq.ok()) << seq.status();
    if (!seqs.empty()) {
      EXPECT_GT(*seq, seqs.back());
    }
    seqs.push_back(*seq);
    if (i < 2) {
      ASSERT_TRUE(store_->AppendEvent(b, "log", absl::StrCat("b", i)).ok());
    }
  }
  absl::StatusOr<std::vector<JobEvent>> events = store_->Events(a, 0, 100);
  ASSERT_TRUE(events.ok()) << events.status();
  ASSERT_EQ(events->size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ((*events)[i].seq, seqs[i]);
    EXPECT_EQ((*events)[i].job_id, a);
    EXPECT_EQ((*events)[i].kind, "progress");
    EXPECT_EQ((*events)[i].json, absl::StrCat("a", i));
    EXPECT_GT((*events)[i].time_ms, 0);
  }
  events = store_->Events(a, seqs[1], 100);
  ASSERT_EQ(events->size(), 3u);
  EXPECT_EQ((*events)[0].seq, seqs[2]);
  EXPECT_EQ(store_->Events(a, seqs[1], 2)->size(), 2u);
  EXPECT_TRUE(store_->Events(a, seqs[4], 100)->empty());

  EXPECT_EQ(store_->AppendEvent("job-777777", "log", "x").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->Events("job-777777", 0, 10).status().code(), absl::StatusCode::kNotFound);

  // The cap keeps each job's newest events; other jobs' events are untouched.
  store_->SetMaxEventsPerJobForTest(3);
  for (int i = 5; i < 8; ++i) ASSERT_TRUE(store_->AppendEvent(a, "log", absl::StrCat("a", i)).ok());
  std::vector<std::string> kept;
  auto events_a = store_->Events(a, 0, 100);  // named: a temporary's value would dangle
  ASSERT_TRUE(events_a.ok()) << events_a.status();
  for (const JobEvent& e : *events_a) kept.push_back(e.json);
  EXPECT_THAT(kept, testing::ElementsAre("a5", "a6", "a7"));
  kept.clear();
  auto events_b = store_->Events(b, 0, 100);
  ASSERT_TRUE(events_b.ok()) << events_b.status();
  for (const JobEvent& e : *events_b) kept.push_back(e.json);
  EXPECT_THAT(kept, testing::ElementsAre("b0", "b1"));
}

TEST_F(JobStoreTest, ConcurrentInsertsAndUpdatesFromThreadsAndTwoConnections) {
  // Two stores on one file stand for two processes; two threads on each.
  absl::StatusOr<std::unique_ptr<JobStore>> other = JobStore::Open(path_);
  ASSERT_TRUE(other.ok()) << other.status();
  constexpr int kThreads = 4, kJobsPerThread = 200;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    JobStore* store = t % 2 == 0 ? store_.get() : other->get();
    threads.emplace_back([store, t, &ids, &errors] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        JobRecord r;
        r.name = absl::StrCat("t", t, "-", i);
        r.request_id = absl::StrCat("req-", t, "-", i);
        absl::StatusOr<JobRecord> job = store->Insert(r, nullptr);
        if (!job.ok()) {
          errors[t] = job.status().ToString();
          return;
        }
        job->state = tnmt::v1::JOB_STATE_RUNNING;
        job->step = i;
        if (absl::Status s = store->Update(*job); !s.ok()) {
          errors[t] = s.ToString();
          return;
        }
        if (absl::StatusOr<int64_t> e = store->AppendEvent(job->id, "state", "{}"); !e.ok()) {
          errors[t] = e.status().ToString();
          return;
        }
        ids[t].push_back(job->id);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::set<std::string> all;
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[t], "") << "thread " << t;
    all.insert(ids[t].begin(), ids[t].end());
  }
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kJobsPerThread));
  EXPECT_EQ(store_->CountInStates({tnmt::v1::JOB_STATE_RUNNING}), kThreads * kJobsPerThread);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < static_cast<int>(ids[t].size()); ++i) {
      absl::StatusOr<JobRecord> job = store_->Get(ids[t][i]);
      ASSERT_TRUE(job.ok()) << job.status();
      EXPECT_EQ(job->name, absl::StrCat("t", t, "-", i));
      EXPECT_EQ(job->step, i);
    }
  }
}

}  // namespace
}  // namespace tnmt::server::jobs
