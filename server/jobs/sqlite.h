// A thin C++ layer over SQLite for the job store: statuses from result codes (busy or I/O:
// UNAVAILABLE, full: RESOURCE_EXHAUSTED, corrupt: DATA_LOSS, read-only: PERMISSION_DENIED,
// constraint: FAILED_PRECONDITION), parameterless SQL, prepared statements that keep their first
// error, and write transactions that roll back unless committed.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tnmt::server::jobs {

// The status code of an SQLite result code.
absl::StatusCode CodeFor(int rc);

// `what` failed with result code `rc` on `db` (whose last error message explains it).
absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what);

// Runs SQL with no parameters (pragmas, transaction control, migration scripts).
absl::Status Exec(sqlite3* db, const char* sql, absl::string_view what);

// A prepared statement, finalized when it goes out of scope. The Bind* calls bind parameters
// 1, 2, ... in order; the first failure (of prepare or a bind) is kept and returned by Step.
class Statement {
 public:
  Statement(sqlite3* db, absl::string_view sql, std::string what)
      : db_(db), what_(std::move(what)) {
    const int rc =
        sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) status_ = SqliteError(db, rc, what_);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void BindInt(int64_t v) {
    if (status_.ok()) Check(sqlite3_bind_int64(stmt_, ++param_, v));
  }
  void BindDouble(double v) {
    if (status_.ok()) Check(sqlite3_bind_double(stmt_, ++param_, v));
  }
  void BindText(absl::string_view v) {
    // An empty view may have a null data(), which would bind NULL instead of ''.
    if (status_.ok()) {
      Check(sqlite3_bind_text(stmt_, ++param_, v.empty() ? "" : v.data(),
                              static_cast<int>(v.size()), SQLITE_TRANSIENT));
    }
  }

  // Steps once: true when a row is ready, false when the statement has finished.
  absl::StatusOr<bool> Step() {
    if (!status_.ok()) return status_;
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    status_ = SqliteError(db_, rc, what_);
    return status_;
  }
  // Runs a statement that returns no rows.
  absl::Status Run() { return Step().status(); }

  int64_t Int(int col) const { return sqlite3_column_int64(stmt_, col); }
  double Double(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const {
    const unsigned char* p = sqlite3_column_text(stmt_, col);
    if (p == nullptr) return "";
    return std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col));
  }

 private:
  void Check(int rc) {
    if (rc != SQLITE_OK) status_ = SqliteError(db_, rc, absl::StrCat("binding for ", what_));
  }
  sqlite3* const db_;
  const std::string what_;
  sqlite3_stmt* stmt_ = nullptr;
  int param_ = 0;
  absl::Status status_;
};

// BEGIN IMMEDIATE .. COMMIT, rolled back if destroyed before Commit. IMMEDIATE takes the write
// lock up front (waiting up to the busy timeout), so a read-then-write cannot fail midway.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  absl::Status Begin() {
    absl::Status s = Exec(db_, "BEGIN IMMEDIATE", "beginning a transaction");
    open_ = s.ok();
    return s;
  }
  absl::Status Commit() {
    absl::Status s = Exec(db_, "COMMIT", "committing a transaction");
    if (s.ok()) open_ = false;
    return s;
  }

 private:
  sqlite3* const db_;
  bool open_ = false;
};

// PRAGMA user_version: the schema version the store's migrations have reached.
absl::StatusOr<int> ReadUserVersion(sqlite3* db);

}  // namespace tnmt::server::jobs
