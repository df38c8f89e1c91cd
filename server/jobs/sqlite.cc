// SQLite helpers; see sqlite.h.
#include "server/jobs/sqlite.h"

#include "absl/strings/str_cat.h"

namespace tnmt::server::jobs {

absl::StatusCode CodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_NOTADB:
    case SQLITE_CORRUPT:
      return absl::StatusCode::kDataLoss;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CONSTRAINT:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view what) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return absl::Status(CodeFor(rc), absl::StrCat(what, ": ", msg, " (sqlite code ", rc, ")"));
}

absl::Status Exec(sqlite3* db, const char* sql, absl::string_view what) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_OK) return absl::OkStatus();
  const std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
  sqlite3_free(err);
  return absl::Status(CodeFor(rc), absl::StrCat(what, ": ", msg, " (sqlite code ", rc, ")"));
}

absl::StatusOr<int> ReadUserVersion(sqlite3* db) {
  Statement s(db, "PRAGMA user_version", "reading the schema version");
  absl::StatusOr<bool> row = s.Step();
  if (!row.ok()) return row.status();
  return *row ? static_cast<int>(s.Int(0)) : 0;
}

}  // namespace tnmt::server::jobs
