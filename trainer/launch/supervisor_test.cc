// Supervisor with /bin/sh workers: all succeed (env, logs); one fails → the others are stopped
// quickly and the error names the rank, its status and its last log line; a worker ignoring
// SIGTERM gets SIGKILL after the grace period; a stop request reaches every worker as SIGTERM;
// a worker killed by a signal; a program that cannot run; workers die with a SIGKILLed launcher.
#include "trainer/launch/supervisor.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

namespace tnmt::train {
namespace {

using Clock = std::chrono::steady_clock;

std::string FreshDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/supervisor-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

// A /bin/sh worker running `script`, logging to dir/worker-R.log.
WorkerSpec Sh(const std::string& dir, int rank, const std::string& script) {
  WorkerSpec w;
  w.name = "rank " + std::to_string(rank);
  w.program = "/bin/sh";
  w.argv = {"sh", "-c", script};
  w.env = {{"R", std::to_string(rank)}, {"DIR", dir}};
  w.log_path = dir + "/worker-" + std::to_string(rank) + ".log";
  return w;
}

TEST(SupervisorTest, AllSucceed) {
  const std::string dir = FreshDir();
  std::vector<WorkerSpec> w;
  for (int r = 0; r < 3; ++r) w.push_back(Sh(dir, r, "echo hello from $R; echo err >&2; exit 0"));
  absl::Status s = RunWorkers(w, {});
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 3; ++r) {
    const std::string log = Slurp(w[r].log_path);
    EXPECT_NE(log.find("==== rank " + std::to_string(r) + " started"), std::string::npos) << log;
    EXPECT_NE(log.find("hello from " + std::to_string(r)), std::string::npos) << log;
    EXPECT_NE(log.find("err"), std::string::npos) << log;
  }
}

TEST(SupervisorTest, OneFailsTheOthersAreStoppedQuickly) {
  const std::string dir = FreshDir();
  std::vector<WorkerSpec> w = {Sh(dir, 0, "exec sleep 60"), Sh(dir, 1, "sleep 0.2; echo boom: bad data >&2; exit 3"),
                               Sh(dir, 2, "exec sleep 60")};
  SupervisorOptions o;
  o.grace = absl::Seconds(20);
  const auto start = Clock::now();
  absl::Status s = RunWorkers(w, o);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 exited with status 3 (boom: bad data); the other workers were stopped"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("last lines of " + w[1].log_path), std::string::npos) << s;
}

TEST(SupervisorTest, WorkerIgnoringSigtermGetsSigkillAfterGrace) {
  const std::string dir = FreshDir();
  std::vector<WorkerSpec> w = {Sh(dir, 0, "trap '' TERM; sleep 60"), Sh(dir, 1, "sleep 0.2; exit 1")};
  SupervisorOptions o;
  o.grace = absl::Milliseconds(300);
  const auto start = Clock::now();
  absl::Status s = RunWorkers(w, o);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  EXPECT_NE(s.message().find("rank 1 exited with status 1"), std::string::npos) << s;
}

TEST(SupervisorTest, StopIsForwardedAsSigterm) {
  const std::string dir = FreshDir();
  std::vector<WorkerSpec> w;
  for (int r = 0; r < 2; ++r) {
    w.push_back(Sh(dir, r, "trap 'echo stopping; exit 0' TERM; touch $DIR/ready.$R; while :; do sleep 0.05; done"));
  }
  std::atomic<bool> stop{false};
  std::thread signaller([&] {
    for (int i = 0; i < 500 && !(Exists(dir + "/ready.0") && Exists(dir + "/ready.1")); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    stop.store(true);
  });
  SupervisorOptions o;
  o.stop = &stop;
  absl::Status s = RunWorkers(w, o);
  signaller.join();
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 2; ++r) EXPECT_NE(Slurp(w[r].log_path).find("stopping"), std::string::npos);
}

TEST(SupervisorTest, WorkerKilledBySignal) {
  const std::string dir = FreshDir();
  std::vector<WorkerSpec> w = {Sh(dir, 0, "exec sleep 60"), Sh(dir, 1, "echo about to die; kill -9 $$")};
  absl::Status s = RunWorkers(w, {});
  EXPECT_NE(s.message().find("rank 1 was killed by signal 9"), std::string::npos) << s;
}

TEST(SupervisorTest, ProgramThatCannotRun) {
  const std::string dir = FreshDir();
  WorkerSpec w = Sh(dir, 0, "");
  w.program = dir + "/no-such-program";
  absl::Status s = RunWorkers({w}, {});
  EXPECT_NE(s.message().find("rank 0 exited with status 127"), std::string::npos) << s;
  EXPECT_NE(s.message().find("cannot execute"), std::string::npos) << s;
}

TEST(SupervisorTest, TailIsThisRunsOutputOnly) {
  const std::string dir = FreshDir();
  WorkerSpec w = Sh(dir, 1, "exit 5");
  std::ofstream(w.log_path) << "old run: something bad\n";
  absl::Status s = RunWorkers({w}, {});
  EXPECT_EQ(s.message(), "rank 1 exited with status 5 (no output in " + w.log_path + ")");
}

TEST(SupervisorTest, InheritedOutputSaysSo) {
  const std::string dir = FreshDir();
  WorkerSpec w = Sh(dir, 0, "exit 4");
  w.log_path.clear();
  absl::Status s = RunWorkers({w}, {});
  EXPECT_EQ(s.message(), "rank 0 exited with status 4 (its output is above)");
}

// Workers die with the launcher even when it is killed with SIGKILL (PR_SET_PDEATHSIG).
TEST(SupervisorTest, WorkersDieWithTheLauncher) {
  const std::string dir = FreshDir();
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    std::vector<WorkerSpec> w = {Sh(dir, 0, "echo $$ > $DIR/pid.tmp; mv $DIR/pid.tmp $DIR/pid; exec sleep 60")};
    (void)RunWorkers(w, {});
    ::_exit(0);
  }
  for (int i = 0; i < 500 && !Exists(dir + "/pid"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(Exists(dir + "/pid"));
  const pid_t worker = std::atoi(Slurp(dir + "/pid").c_str());
  ASSERT_GT(worker, 0);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    const std::string stat = Slurp("/proc/" + std::to_string(worker) + "/stat");
    const size_t paren = stat.rfind(')');
    gone = stat.empty() || (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << "worker " << worker << " outlived its launcher";
  if (!gone) ::kill(worker, SIGKILL);
}

}  // namespace
}  // namespace tnmt::train
