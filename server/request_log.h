// The request log of `tnmt serve --request-log FILE`: one JSON object per line for every
// finished TranslationService call (Translate, TranslateStream, ListModels), for operators who
// need to know who asked for what and how it went, next to the aggregated /metrics:
//   {"time":"2026-12-01T04:50:00.123Z","method":"Translate","model":"demo",
//    "peer":"ipv4:127.0.0.1:51234","texts":3,"code":"OK","seconds":0.0421}
// plus "message" (the error, at most 256 bytes) when code is not OK. No text is logged, only
// counts. Lines are written whole under a lock (O_APPEND), so concurrent calls never interleave
// and a log rotated by renaming is followed by a SIGHUP reopen (Reopen).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tnmt::server {

struct RequestRecord {
  absl::Time time;       // when the call finished
  std::string method;    // "Translate", "TranslateStream", "ListModels"
  std::string model;     // the served model it used ("" if none was resolved)
  std::string peer;      // grpc::ServerContext::peer()
  int texts = 0;         // texts received (for a stream: over all its messages)
  int code = 0;          // absl/gRPC status code
  std::string message;   // error message (empty when OK)
  double seconds = 0;    // from the call's start to its end
};

class RequestLog {
 public:
  // Opens `path` for appending ("-": standard error). An error names the path.
  static absl::StatusOr<std::unique_ptr<RequestLog>> Open(const std::string& path);
  ~RequestLog();

  // Appends one line; a failed write is counted (write_errors) and never fails the call.
  void Write(const RequestRecord& r);
  // Reopens the file by its path (after log rotation); keeps the old one on failure.
  absl::Status Reopen();
  int64_t write_errors() const;

  // The JSON line of a record (without the newline).
  static std::string Format(const RequestRecord& r);

 private:
  RequestLog(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  mutable std::mutex mu_;
  int fd_;
  int64_t write_errors_ = 0;
};

}  // namespace tnmt::server
