// Local launch with /bin/sh workers: each gets TNMT_RANK, TNMT_WORLD_SIZE and a shared fresh
// TNMT_BOOTSTRAP_DIR plus its own extra arguments; rank 0 inherits the output, rank R > 0 logs
// to worker-R.log; the bootstrap directory is gone afterwards; a failing rank is named. And the
// worker side: WorkerEnvFromEnvironment's errors name the variable.
#include "trainer/launch/local_launch.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

namespace tnmt::train {
namespace {

std::string FreshDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr ? base : "/tmp") + "/launch-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  return tmpl;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

LocalLaunchOptions Options(const std::string& dir, const std::string& script, int n) {
  LocalLaunchOptions o;
  o.program = "/bin/sh";
  o.args = {"sh", "-c", script, "sh"};
  for (int r = 0; r < n; ++r) {
    o.extra.push_back({"device-" + std::to_string(r)});
    o.names.push_back("cpu");
  }
  o.work_dir = dir;
  return o;
}

TEST(LocalLaunchTest, EnvironmentLogsAndCleanup) {
  const std::string dir = FreshDir();
  const std::string script =
      "test -d \"$TNMT_BOOTSTRAP_DIR\" || exit 9; echo $TNMT_BOOTSTRAP_DIR > " + dir +
      "/bootstrap.$TNMT_RANK; echo rank $TNMT_RANK of $TNMT_WORLD_SIZE on $1 > " + dir + "/out.$TNMT_RANK; "
      "echo logged by $TNMT_RANK";
  absl::Status s = LaunchLocalWorkers(Options(dir, script, 3));
  ASSERT_TRUE(s.ok()) << s;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(Slurp(dir + "/out." + std::to_string(r)),
              "rank " + std::to_string(r) + " of 3 on device-" + std::to_string(r) + "\n");
  }
  EXPECT_EQ(Slurp(dir + "/bootstrap.0"), Slurp(dir + "/bootstrap.2"));
  std::string bootstrap = Slurp(dir + "/bootstrap.0");
  bootstrap.pop_back();
  EXPECT_EQ(bootstrap.rfind(dir + "/.bootstrap-", 0), 0u) << bootstrap;
  EXPECT_NE(::access(bootstrap.c_str(), F_OK), 0) << "bootstrap directory left behind";
  EXPECT_NE(::access((dir + "/worker-0.log").c_str(), F_OK), 0) << "rank 0 shares the launcher's output";
  EXPECT_NE(Slurp(dir + "/worker-2.log").find("logged by 2"), std::string::npos);
}

TEST(LocalLaunchTest, FailingRankIsNamed) {
  const std::string dir = FreshDir();
  absl::Status s = LaunchLocalWorkers(
      Options(dir, "if [ $TNMT_RANK = 1 ]; then echo out of memory >&2; exit 2; fi; exec sleep 60", 2));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("rank 1 (cpu) exited with status 2 (out of memory)"), std::string::npos) << s;
}

TEST(LocalLaunchTest, WorkerEnvironment) {
  ::unsetenv(kRankEnv);
  auto none = WorkerEnvFromEnvironment();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ::setenv(kRankEnv, "1", 1);
  ::setenv(kWorldSizeEnv, "2", 1);
  ::setenv(kBootstrapDirEnv, "/tmp/x", 1);
  ::unsetenv(kCollectiveTimeoutEnv);
  auto ok = WorkerEnvFromEnvironment();
  ASSERT_TRUE(ok.ok() && ok->has_value());
  EXPECT_EQ((*ok)->rank, 1);
  EXPECT_EQ((*ok)->world_size, 2);
  EXPECT_EQ((*ok)->bootstrap_dir, "/tmp/x");
  EXPECT_EQ((*ok)->collective_timeout, absl::Minutes(30));
  ::setenv(kCollectiveTimeoutEnv, "2.5", 1);
  EXPECT_EQ((*WorkerEnvFromEnvironment())->collective_timeout, absl::Milliseconds(2500));
  ::setenv(kCollectiveTimeoutEnv, "soon", 1);
  EXPECT_NE(WorkerEnvFromEnvironment().status().message().find("TNMT_COLLECTIVE_TIMEOUT_S=soon"), std::string::npos);
  ::unsetenv(kCollectiveTimeoutEnv);
  ::setenv(kRankEnv, "2", 1);
  EXPECT_NE(WorkerEnvFromEnvironment().status().message().find("TNMT_RANK=2 is out of range"), std::string::npos);
  ::unsetenv(kBootstrapDirEnv);
  ::setenv(kRankEnv, "0", 1);
  EXPECT_NE(WorkerEnvFromEnvironment().status().message().find("TNMT_BOOTSTRAP_DIR must be set"), std::string::npos);
  ::unsetenv(kRankEnv);
  ::unsetenv(kWorldSizeEnv);
}

}  // namespace
}  // namespace tnmt::train
