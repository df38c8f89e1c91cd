// Local multi-process launch; see local_launch.h.
#include "trainer/launch/local_launch.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainer/launch/supervisor.h"

namespace tnmt::train {

absl::StatusOr<std::optional<WorkerEnv>> WorkerEnvFromEnvironment() {
  const char* rank = std::getenv(kRankEnv);
  if (rank == nullptr) return std::optional<WorkerEnv>();
  WorkerEnv w;
  const char* size = std::getenv(kWorldSizeEnv);
  const char* dir = std::getenv(kBootstrapDirEnv);
  if (!absl::SimpleAtoi(rank, &w.rank)) {
    return absl::InvalidArgumentError(absl::StrCat(kRankEnv, "=", rank, ": expected an integer"));
  }
  if (size == nullptr || !absl::SimpleAtoi(size, &w.world_size) || w.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(kWorldSizeEnv, " must be a positive integer when ", kRankEnv,
                                                   " is set (got ", size == nullptr ? "nothing" : size, ")"));
  }
  if (w.rank < 0 || w.rank >= w.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(kRankEnv, "=", w.rank, " is out of range for ", kWorldSizeEnv,
                                                   "=", w.world_size));
  }
  if (dir == nullptr || *dir == '\0') {
    return absl::InvalidArgumentError(absl::StrCat(kBootstrapDirEnv, " must be set when ", kRankEnv, " is set"));
  }
  w.bootstrap_dir = dir;
  if (const char* t = std::getenv(kCollectiveTimeoutEnv)) {
    double seconds = 0;
    if (!absl::SimpleAtod(t, &seconds) || !(seconds > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(kCollectiveTimeoutEnv, "=", t, ": expected seconds > 0"));
    }
    w.collective_timeout = absl::Seconds(seconds);
  }
  return std::optional<WorkerEnv>(w);
}

absl::Status LaunchLocalWorkers(const LocalLaunchOptions& o) {
  const size_t n = o.extra.size();
  if (n == 0 || o.names.size() != n) {
    return absl::InvalidArgumentError("LaunchLocalWorkers: one name and one argument list per worker");
  }
  std::string tmpl = o.work_dir + "/.bootstrap-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat(tmpl, ": cannot create the bootstrap directory: ", std::strerror(errno)));
  }
  const std::string bootstrap = tmpl;
  std::vector<WorkerSpec> specs(n);
  for (size_t r = 0; r < n; ++r) {
    WorkerSpec& w = specs[r];
    w.name = absl::StrCat("rank ", r, " (", o.names[r], ")");
    w.program = o.program;
    w.argv = o.args;
    w.argv.insert(w.argv.end(), o.extra[r].begin(), o.extra[r].end());
    w.env = {{kRankEnv, std::to_string(r)}, {kWorldSizeEnv, std::to_string(n)}, {kBootstrapDirEnv, bootstrap}};
    if (r > 0) w.log_path = absl::StrCat(o.work_dir, "/worker-", r, ".log");
  }
  SupervisorOptions so;
  so.stop = o.stop;
  so.grace = o.grace;
  absl::Status s = RunWorkers(specs, so);
  std::error_code ec;
  std::filesystem::remove_all(bootstrap, ec);
  return s;
}

}  // namespace tnmt::train
