// Worker supervision; see supervisor.h.
#include "trainer/launch/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace tnmt::train {

namespace {

// Everything a child needs between fork and exec, prepared before fork (only async-signal-safe
// calls are allowed in the child of a multi-threaded process).
struct Prepared {
  std::vector<std::string> argv_storage, env_storage;
  std::vector<char*> argv, envp;
};

Prepared Prepare(const WorkerSpec& w) {
  Prepared p;
  p.argv_storage = w.argv;
  std::set<std::string> overridden;
  for (const auto& [k, v] : w.env) overridden.insert(k);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    if (overridden.count(entry.substr(0, entry.find('='))) == 0) p.env_storage.push_back(entry);
  }
  for (const auto& [k, v] : w.env) p.env_storage.push_back(k + "=" + v);
  for (auto& a : p.argv_storage) p.argv.push_back(a.data());
  p.argv.push_back(nullptr);
  for (auto& e : p.env_storage) p.envp.push_back(e.data());
  p.envp.push_back(nullptr);
  return p;
}

std::string Describe(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exited with status ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    return absl::StrCat("was killed by signal ", sig, " (", ::strsignal(sig), ")",
                        sig == SIGKILL ? "; out of memory?" : "");
  }
  return "ended";
}

// The last `n` non-empty lines written to a log file after byte `from` (at most its last 64 KiB),
// each cut to 300 characters.
std::vector<std::string> Tail(const std::string& path, int64_t from, int n) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  const std::streamoff start = std::max<std::streamoff>(from, size - 65536);
  in.seekg(start);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, absl::ByAnyChar("\n\r"))) {
    line = absl::StripAsciiWhitespace(line);
    if (!line.empty()) lines.emplace_back(line.substr(0, 300));
  }
  if (start > from && !lines.empty()) lines.erase(lines.begin());  // probably cut mid-line
  if (static_cast<int>(lines.size()) > n) lines.erase(lines.begin(), lines.end() - n);
  return lines;
}

struct Running {
  int64_t log_start = 0;  // size of the log when the worker started: its output follows
  pid_t pid = -1;
  bool done = false;
  int status = 0;
};

class Supervisor {
 public:
  Supervisor(const std::vector<WorkerSpec>& workers, const SupervisorOptions& o)
      : workers_(workers), o_(o), running_(workers.size()) {}

  absl::Status Run() {
    absl::Status started = StartAll();
    if (!started.ok()) {
      Teardown();
      WaitAll();
      return started;
    }
    WaitAll();
    if (failed_ < 0) return absl::OkStatus();
    return Failure();
  }

 private:
  absl::Status StartAll() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      absl::Status s = Start(i);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Start(size_t i) {
    const WorkerSpec& w = workers_[i];
    if (w.argv.empty()) return absl::InvalidArgumentError(absl::StrCat(w.name, ": empty argv"));
    Prepared p = Prepare(w);
    int log = -1;
    if (!w.log_path.empty()) {
      log = ::open(w.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log < 0) return absl::InternalError(absl::StrCat(w.log_path, ": cannot open: ", std::strerror(errno)));
      const std::string header = absl::StrCat("==== ", w.name, " started at ", absl::FormatTime(absl::Now()), ": ",
                                              absl::StrJoin(w.argv, " "), "\n");
      (void)!::write(log, header.data(), header.size());
      running_[i].log_start = ::lseek(log, 0, SEEK_END);
    }
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
      if (log >= 0) ::close(log);
      return absl::InternalError(absl::StrCat("/dev/null: ", std::strerror(errno)));
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(devnull, 0);
      if (log >= 0) {
        ::dup2(log, 1);
        ::dup2(log, 2);
      }
      ::execve(w.program.c_str(), p.argv.data(), p.envp.data());
      static const char kMsg[] = "tnmt: cannot execute the worker program\n";
      (void)!::write(2, kMsg, sizeof(kMsg) - 1);
      ::_exit(127);
    }
    const int fork_errno = errno;
    if (log >= 0) ::close(log);
    ::close(devnull);
    if (pid < 0) return absl::InternalError(absl::StrCat("fork for ", w.name, ": ", std::strerror(fork_errno)));
    ::setpgid(pid, pid);  // also here, so kill(-pid) works before the child gets to run
    running_[i].pid = pid;
    return absl::OkStatus();
  }

  void SignalAll(int sig) {
    for (const Running& r : running_) {
      if (r.pid > 0 && !r.done) ::kill(-r.pid, sig);
    }
  }

  void Teardown() {
    if (tearing_down_) return;
    tearing_down_ = true;
    SignalAll(SIGTERM);
    kill_at_ = absl::Now() + o_.grace;
  }

  void WaitAll() {
    bool stop_forwarded = false;
    while (true) {
      if (!stop_forwarded && o_.stop != nullptr && o_.stop->load()) {
        stop_forwarded = true;
        SignalAll(SIGTERM);
      }
      int alive = 0;
      for (size_t i = 0; i < running_.size(); ++i) {
        Running& r = running_[i];
        if (r.pid <= 0 || r.done) continue;
        int status = 0;
        const pid_t got = ::waitpid(r.pid, &status, WNOHANG);
        if (got == r.pid || (got < 0 && errno == ECHILD)) {
          r.done = true;
          r.status = got == r.pid ? status : 0;
          const bool ok = WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
          if (!ok && failed_ < 0 && !tearing_down_) {
            failed_ = static_cast<int>(i);
            others_running_ = std::count_if(running_.begin(), running_.end(),
                                            [](const Running& x) { return x.pid > 0 && !x.done; });
            Teardown();
          }
          continue;
        }
        ++alive;
      }
      if (alive == 0) return;
      if (tearing_down_ && absl::Now() >= kill_at_) {
        SignalAll(SIGKILL);
        kill_at_ = absl::InfiniteFuture();
      }
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(o_.poll_interval));
    }
  }

  absl::Status Failure() const {
    const WorkerSpec& w = workers_[failed_];
    const std::string how = absl::StrCat(w.name, " ", Describe(running_[failed_].status));
    const std::string stopped = others_running_ > 0 ? "; the other workers were stopped" : "";
    if (w.log_path.empty()) return absl::AbortedError(absl::StrCat(how, " (its output is above)", stopped));
    const std::vector<std::string> tail = Tail(w.log_path, running_[failed_].log_start, o_.tail_lines);
    if (tail.empty()) return absl::AbortedError(absl::StrCat(how, " (no output in ", w.log_path, ")", stopped));
    return absl::AbortedError(absl::StrCat("last lines of ", w.log_path, ":\n    ", absl::StrJoin(tail, "\n    "),
                                           "\n", how, " (", tail.back(), ")", stopped));
  }

  const std::vector<WorkerSpec>& workers_;
  const SupervisorOptions o_;
  std::vector<Running> running_;
  int failed_ = -1;
  int64_t others_running_ = 0;
  bool tearing_down_ = false;  // the others were sent SIGTERM after a failure (or a failed start)
  absl::Time kill_at_ = absl::InfiniteFuture();  // then SIGKILL at this time
};

}  // namespace

absl::Status RunWorkers(const std::vector<WorkerSpec>& workers, const SupervisorOptions& options) {
  if (workers.empty()) return absl::InvalidArgumentError("no workers to run");
  Supervisor s(workers, options);
  return s.Run();
}

}  // namespace tnmt::train
