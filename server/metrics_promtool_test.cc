// ServerMetrics' exposition passes `promtool check metrics` (parse + Prometheus lint rules:
// _total on counters, base units, help text, ...). Skips if promtool is not installed
// (Debian package prometheus; deploy/install-deps.sh installs it).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "server/metrics.h"

namespace tnmt {
namespace {

// $PROMTOOL, else the first promtool on $PATH, /usr/bin or /usr/local/bin; "" if none.
std::string FindPromtool() {
  if (const char* env = std::getenv("PROMTOOL"); env != nullptr && *env != '\0') return env;
  std::string dirs = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  dirs += ":/usr/bin:/usr/local/bin";
  std::istringstream in(dirs);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) continue;
    const std::string path = dir + "/promtool";
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return "";
}

struct CheckResult {
  int exit_code;
  std::string output;
};

// Runs `promtool check metrics` on `text`; exit code 0 means no problems.
CheckResult Promtool(const std::string& promtool, const std::string& text) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string file = std::string(tmp != nullptr ? tmp : "/tmp") + "/metrics.txt";
  std::ofstream(file) << text;
  const std::string command = "'" + promtool + "' check metrics < '" + file + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  CheckResult result{0, ""};
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class PromtoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    promtool_ = FindPromtool();
    if (promtool_.empty()) {
      GTEST_SKIP() << "promtool not found (install Debian package prometheus, e.g. "
                      "deploy/install-deps.sh, or set PROMTOOL); not checking the exposition";
    }
  }
  std::string promtool_;
};

TEST_F(PromtoolTest, DetectsProblems) {
  // Guards the harness: a counter without _total must be reported.
  const CheckResult result =
      Promtool(promtool_, "# HELP bad_seconds x\n# TYPE bad_seconds counter\nbad_seconds 1\n");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("_total"), std::string::npos) << result.output;
}

TEST_F(PromtoolTest, FreshMetricsPass) {
  ServerMetrics metrics;
  const CheckResult result = Promtool(promtool_, metrics.Serialize());
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "");
}

TEST_F(PromtoolTest, EverySeriesPopulatedPasses) {
  ServerMetrics metrics;
  for (const char* model : {"en-de", "de-en", "we\"ird\\name\nx"}) {
    metrics.RequestStarted();
    metrics.RequestDone(model, "Translate", "OK", 0.02);
    metrics.RequestStarted();
    metrics.RequestDone(model, "TranslateStream", 4, 12.0);
    metrics.SetQueueLength(model, 3);
    metrics.ObserveQueueWait(model, 0.001);
    metrics.ObserveCompute(model, 0.3);
    metrics.BatchDone(model, 16, 512);
    metrics.SentenceDone(model, 20, 25);
    metrics.ModelLoaded(model, 1);
    metrics.ModelLoadFailed(model);
  }
  const std::string text = metrics.Serialize();
  const CheckResult result = Promtool(promtool_, text);
  EXPECT_EQ(result.exit_code, 0) << result.output << "\n" << text;
  EXPECT_EQ(result.output, "");
}

}  // namespace
}  // namespace tnmt
