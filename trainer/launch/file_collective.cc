// File-based collective; see file_collective.h.
#include "trainer/launch/file_collective.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tnmt::train {

namespace {

enum class OpKind : int32_t { kSumDouble = 2, kBroadcast = 3 };

const char* KindName(int32_t kind) {
  switch (static_cast<OpKind>(kind)) {
    case OpKind::kSumDouble: return "AllReduceSum(double)";
    case OpKind::kBroadcast: return "Broadcast(float)";
  }
  return "an unknown operation";
}

constexpr char kMagic[8] = {'T', 'N', 'M', 'T', 'C', 'O', 'L', '1'};

// The fixed-size header at the start of every operation file (native byte order: one node).
struct Header {
  char magic[8];
  int64_t op;       // operation number, from 1
  int32_t rank;     // the writer
  int32_t kind;     // OpKind
  int64_t count;    // elements the caller passed
  int32_t root;     // Broadcast's root; -1 for sums
  int32_t unused;
  int64_t payload;  // bytes after the header
};

std::string ErrnoText() { return std::strerror(errno); }

absl::Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return absl::InternalError(absl::StrCat(path, ": write failed: ", ErrnoText()));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status ReadAll(int fd, void* data, size_t n, const std::string& path) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return absl::InternalError(absl::StrCat(path, ": read failed: ", ErrnoText()));
    if (r == 0) return absl::DataLossError(absl::StrCat(path, ": file is shorter than its header says"));
    p += r;
    n -= static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

class FileCollective : public Collective {
 public:
  FileCollective(std::string dir, int rank, int size, absl::Duration timeout)
      : dir_(std::move(dir)), rank_(rank), size_(size), timeout_(timeout), fds_(size, -1) {}
  ~FileCollective() override { CloseAll(); }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  absl::Status AllReduceSum(float*, int64_t) override {
    return absl::FailedPreconditionError(
        "file collective: no float sums (it bootstraps GPU workers, whose gradients go over NCCL)");
  }
  absl::Status AllReduceSum(double* data, int64_t count) override {
    if (count < 0) return absl::InvalidArgumentError("negative count");
    absl::Status s = Exchange(OpKind::kSumDouble, count, -1, data);
    if (!s.ok()) return Finish(s);
    std::vector<double> sum(count, 0.0), peer;  // sum, peer: [count]
    for (int r = 0; r < size_; ++r) {
      const double* src = data;
      if (r != rank_) {
        peer.resize(count);
        s = ReadPayload(r, peer.data(), sizeof(double) * count);
        if (!s.ok()) return Finish(s);
        src = peer.data();
      }
      for (int64_t i = 0; i < count; ++i) sum[i] += src[i];
    }
    std::copy(sum.begin(), sum.end(), data);
    return Finish(s);
  }

  absl::Status Broadcast(float* data, int64_t count, int root) override {
    if (root < 0 || root >= size_) return absl::InvalidArgumentError("broadcast root out of range");
    if (count < 0) return absl::InvalidArgumentError("negative count");
    absl::Status s = Exchange(OpKind::kBroadcast, count, root, data);
    if (s.ok() && rank_ != root) s = ReadPayload(root, data, sizeof(float) * count);
    return Finish(s);
  }

 private:
  std::string PathOf(int64_t op, int rank) const { return absl::StrCat(dir_, "/op-", op, ".rank-", rank); }

  // Payload bytes of rank r's file: everyone's data for sums, only the root's for a broadcast.
  static int64_t PayloadBytes(OpKind kind, int64_t count, int root, int r) {
    const int64_t elem = kind == OpKind::kSumDouble ? sizeof(double) : sizeof(float);
    return root < 0 || r == root ? elem * count : 0;
  }

  // Writes this rank's file of the next operation (header + `payload`), waits for every peer's,
  // opens them (fds_) and checks their headers against ours.
  absl::Status Exchange(OpKind kind, int64_t count, int root, const void* payload) {
    ++op_;
    const int64_t bytes = PayloadBytes(kind, count, root, rank_);
    Header h;
    std::memset(&h, 0, sizeof(h));
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.op = op_;
    h.rank = rank_;
    h.kind = static_cast<int32_t>(kind);
    h.count = count;
    h.root = root;
    h.payload = bytes;
    const std::string path = PathOf(op_, rank_);
    const std::string tmp = absl::StrCat(dir_, "/.tmp.op-", op_, ".rank-", rank_);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return absl::InternalError(absl::StrCat(tmp, ": cannot create: ", ErrnoText()));
    absl::Status s = WriteAll(fd, &h, sizeof(h), tmp);
    if (s.ok() && bytes > 0) s = WriteAll(fd, payload, static_cast<size_t>(bytes), tmp);
    ::close(fd);
    if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
      s = absl::InternalError(absl::StrCat(path, ": rename failed: ", ErrnoText()));
    }
    if (!s.ok()) return s;

    s = WaitForPeers();
    if (!s.ok()) return s;
    for (int r = 0; r < size_; ++r) {
      Header p;
      const std::string ppath = PathOf(op_, r);
      s = ReadAll(fds_[r], &p, sizeof(p), ppath);
      if (!s.ok()) return s;
      if (std::memcmp(p.magic, kMagic, sizeof(kMagic)) != 0 || p.op != op_ || p.rank != r) {
        return absl::DataLossError(absl::StrCat(ppath, ": not a file of operation ", op_, " by rank ", r));
      }
      if (p.kind != h.kind || p.count != h.count || p.root != h.root) {
        return absl::FailedPreconditionError(absl::StrCat(
            "file collective: at operation ", op_, " rank ", r, " called ", KindName(p.kind), " of ", p.count,
            " elements", p.root >= 0 ? absl::StrCat(" from root ", p.root) : "", " but rank ", rank_, " called ",
            KindName(h.kind), " of ", h.count, " elements", h.root >= 0 ? absl::StrCat(" from root ", h.root) : "",
            ": every rank must call the same collectives in the same order"));
      }
      const int64_t want = PayloadBytes(kind, count, root, r);
      if (p.payload != want) {
        return absl::DataLossError(absl::StrCat(ppath, ": payload of ", p.payload, " bytes, expected ", want));
      }
    }
    return absl::OkStatus();
  }

  // Polls until every rank's file of op_ can be opened, with backoff from 20 us to 2 ms.
  absl::Status WaitForPeers() {
    const bool forever = timeout_ >= absl::Hours(24 * 365);
    const auto deadline =
        std::chrono::steady_clock::now() + absl::ToChronoNanoseconds(forever ? absl::Hours(1) : timeout_);
    auto pause = std::chrono::microseconds(20);
    while (true) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r) {
        if (fds_[r] >= 0) continue;
        fds_[r] = ::open(PathOf(op_, r).c_str(), O_RDONLY | O_CLOEXEC);
        if (fds_[r] >= 0) continue;
        if (errno != ENOENT) {
          return absl::InternalError(absl::StrCat(PathOf(op_, r), ": cannot open: ", ErrnoText()));
        }
        missing.push_back(r);
      }
      if (missing.empty()) return absl::OkStatus();
      if (!forever && std::chrono::steady_clock::now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "file collective in ", dir_, ": rank", missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
            " did not arrive at operation ", op_, " within ", absl::FormatDuration(timeout_),
            " (rank ", rank_, " waiting)"));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(2000));
    }
  }

  // Reads the payload of rank r's file (its header already consumed).
  absl::Status ReadPayload(int r, void* out, size_t bytes) {
    return ReadAll(fds_[r], out, bytes, PathOf(op_, r));
  }

  // Closes the peers' files and deletes this rank's file of the previous operation (safe: see
  // the header comment).
  absl::Status Finish(absl::Status s) {
    CloseAll();
    if (op_ > 1) ::unlink(PathOf(op_ - 1, rank_).c_str());
    return s;
  }

  void CloseAll() {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }

  const std::string dir_;
  const int rank_, size_;
  const absl::Duration timeout_;
  int64_t op_ = 0;
  std::vector<int> fds_;  // peers' files of the current operation, by rank
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> MakeFileCollective(const std::string& dir, int rank, int world_size,
                                                               absl::Duration timeout) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("file collective: rank ", rank, " of world size ", world_size,
                                                   " is out of range"));
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return absl::NotFoundError(absl::StrCat(dir, ": cannot open the collective's directory: ", ErrnoText()));
  }
  const std::string mine = absl::StrCat(".rank-", rank);
  bool stale = false;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() >= mine.size() && name.compare(name.size() - mine.size(), mine.size(), mine) == 0) stale = true;
  }
  ::closedir(d);
  if (stale) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": already holds files of rank ", rank,
                                                      " (another run?); use a fresh directory"));
  }
  return std::unique_ptr<Collective>(new FileCollective(dir, rank, world_size, timeout));
}

}  // namespace tnmt::train
