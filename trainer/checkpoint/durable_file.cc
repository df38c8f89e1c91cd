// POSIX implementation of the crash-safe file steps; see durable_file.h.
#include "trainer/checkpoint/durable_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace tnmt {

namespace {

namespace fs = std::filesystem;

absl::Status Errno(const std::string& path, const char* call) {
  const int e = errno;
  const std::string what = absl::StrCat(path, ": ", call, " failed: ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(what);
  if (e == EACCES || e == EPERM || e == EROFS) return absl::PermissionDeniedError(what);
  if (e == EEXIST || e == ENOTEMPTY) return absl::AlreadyExistsError(what);
  return absl::InternalError(what);
}

// Closes `fd` on every path out of a scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the result (close can report a delayed write error).
  bool Close() {
    const int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool IsNonEmptyDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && !fs::is_empty(path, ec);
}

}  // namespace

std::string ParentDirectory(const std::string& path) {
  const std::string parent = fs::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

absl::Status WriteFileSynced(const std::string& path, std::string_view contents) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) return Errno(path, "open");
  if (!WriteAll(fd.get(), contents.data(), contents.size())) return Errno(path, "write");
  if (::fsync(fd.get()) != 0) return Errno(path, "fsync");
  if (!fd.Close()) return Errno(path, "close");
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view contents,
                                 const std::string& tmp_path) {
  absl::Status s = WriteFileSynced(tmp_path, contents);
  if (s.ok() && std::rename(tmp_path.c_str(), path.c_str()) != 0) s = Errno(path, "rename");
  if (!s.ok()) {
    std::remove(tmp_path.c_str());
    return s;
  }
  return SyncPath(ParentDirectory(path));
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open (missing or unreadable)"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return ss.str();
}

absl::Status CopyFileSynced(const std::string& from, const std::string& to) {
  TNMT_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(from));
  return WriteFileSynced(to, bytes);
}

absl::Status SyncPath(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Errno(path, "open");
  if (::fsync(fd.get()) != 0) return Errno(path, "fsync");
  return absl::OkStatus();
}

absl::Status InstallDirectory(const std::string& tmp_dir, const std::string& final_dir,
                              bool replace) {
  const std::string parent = ParentDirectory(final_dir);
  TNMT_RETURN_IF_ERROR(SyncPath(tmp_dir));
  if (!IsNonEmptyDirectory(final_dir)) {
    // Absent, or an empty directory (which rename replaces).
    if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) return Errno(final_dir, "rename");
    return SyncPath(parent);
  }
  if (!replace) {
    return absl::AlreadyExistsError(
        absl::StrCat(final_dir, ": already exists and is not empty (not replaced)"));
  }
  // Swap atomically: afterwards tmp_dir holds the old content.
  if (::renameat2(AT_FDCWD, tmp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) != 0) {
    if (errno != EINVAL && errno != ENOSYS) return Errno(final_dir, "renameat2(RENAME_EXCHANGE)");
    // No exchange on this file system: move the old one aside, then publish. A crash between
    // the two renames leaves neither under the final name, never a mixture.
    const std::string aside = tmp_dir + ".old";
    if (std::rename(final_dir.c_str(), aside.c_str()) != 0) return Errno(final_dir, "rename");
    if (std::rename(tmp_dir.c_str(), final_dir.c_str()) != 0) return Errno(final_dir, "rename");
    TNMT_RETURN_IF_ERROR(SyncPath(parent));
    std::error_code ec;
    fs::remove_all(aside, ec);
    return absl::OkStatus();
  }
  TNMT_RETURN_IF_ERROR(SyncPath(parent));
  std::error_code ec;
  fs::remove_all(tmp_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp_dir, ": cannot remove: ", ec.message()));
  return absl::OkStatus();
}

absl::Status RemoveTreeVia(const std::string& path, const std::string& aside) {
  if (std::rename(path.c_str(), aside.c_str()) != 0) return Errno(path, "rename");
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (ec) return absl::InternalError(absl::StrCat(aside, ": cannot remove: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace tnmt
