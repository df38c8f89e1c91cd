// RequestLog; see request_log.h.
#include "server/request_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tnmt::server {

namespace {

constexpr size_t kMaxMessageBytes = 256;

int OpenForAppend(const std::string& path) {
  if (path == "-") return STDERR_FILENO;
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

// Cuts at a UTF-8 character boundary so the JSON stays valid.
std::string Bounded(const std::string& s) {
  if (s.size() <= kMaxMessageBytes) return s;
  size_t end = kMaxMessageBytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return absl::StrCat(s.substr(0, end), "... (", s.size(), " bytes)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<RequestLog>> RequestLog::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("--request-log: empty path");
  const int fd = OpenForAppend(path);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--request-log ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<RequestLog>(new RequestLog(path, fd));
}

RequestLog::~RequestLog() {
  if (fd_ != STDERR_FILENO) ::close(fd_);
}

std::string RequestLog::Format(const RequestRecord& r) {
  nlohmann::json j;
  j["time"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", r.time, absl::UTCTimeZone());
  j["method"] = r.method;
  j["model"] = r.model;
  j["peer"] = r.peer;
  j["texts"] = r.texts;
  j["code"] = absl::StatusCodeToString(static_cast<absl::StatusCode>(r.code));
  if (r.code != 0) j["message"] = Bounded(r.message);
  j["seconds"] = std::round(r.seconds * 1e6) / 1e6;
  // Invalid UTF-8 from a client (a model name) is replaced, never a reason to drop the line.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void RequestLog::Write(const RequestRecord& r) {
  const std::string line = Format(r) + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) ++write_errors_;
}

absl::Status RequestLog::Reopen() {
  if (path_ == "-") return absl::OkStatus();
  const int fd = OpenForAppend(path_);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("--request-log ", path_, ": ", std::strerror(errno)));
  std::lock_guard<std::mutex> lock(mu_);
  ::close(fd_);
  fd_ = fd;
  return absl::OkStatus();
}

int64_t RequestLog::write_errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return write_errors_;
}

}  // namespace tnmt::server
