// ServerMetrics: every call shows up in the text exposition under the documented name, labels
// and value; the model-label cap holds; concurrent updates are not lost.
#include "server/metrics.h"

#include <gtest/gtest.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <vector>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tnmt {
namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Canonical series key: name{k="v",...} with labels sorted by name (values unescaped).
std::string Key(const std::string& name, Labels labels) {
  if (labels.empty()) return name;
  std::sort(labels.begin(), labels.end());
  std::string key = name + "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) key += ",";
    key += labels[i].first + "=\"" + labels[i].second + "\"";
  }
  return key + "}";
}

// Parses sample lines of the text format into canonical key -> value. Fails the test on a
// line it cannot parse.
std::map<std::string, double> Parse(const std::string& text) {
  std::map<std::string, double> samples;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t i = line.find_first_of("{ ");
    if (i == std::string::npos) {
      ADD_FAILURE() << "unparsable line: " << line;
      continue;
    }
    const std::string name = line.substr(0, i);
    Labels labels;
    if (line[i] == '{') {
      ++i;
      while (line[i] != '}') {
        const size_t eq = line.find('=', i);
        std::string label = line.substr(i, eq - i);
        std::string value;
        for (i = eq + 2; line[i] != '"'; ++i) {
          if (line[i] == '\\') {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        labels.emplace_back(std::move(label), std::move(value));
        ++i;
        if (line[i] == ',') ++i;
      }
      ++i;
    }
    samples[Key(name, labels)] = std::strtod(line.c_str() + i, nullptr);
  }
  return samples;
}

// The value of one series, or NaN-like sentinel -1e300 if it is missing.
double Value(const std::map<std::string, double>& samples, const std::string& name,
             const Labels& labels = {}) {
  auto it = samples.find(Key(name, labels));
  return it == samples.end() ? -1e300 : it->second;
}

bool Has(const std::map<std::string, double>& samples, const std::string& name,
         const Labels& labels = {}) {
  return samples.count(Key(name, labels)) > 0;
}

TEST(ServerMetrics, RequestsCountedByModelMethodAndCode) {
  ServerMetrics metrics;
  for (int i = 0; i < 3; ++i) metrics.RequestStarted();
  metrics.RequestDone("en-de", "Translate", "OK", 0.003);
  metrics.RequestDone("en-de", "Translate", "OK", 0.2);
  metrics.RequestDone("en-de", "Translate", 3, 0.0001);  // INVALID_ARGUMENT
  auto s = Parse(metrics.Serialize());

  const Labels ok = {{"model", "en-de"}, {"method", "Translate"}, {"code", "OK"}};
  const Labels invalid = {{"model", "en-de"}, {"method", "Translate"},
                          {"code", "INVALID_ARGUMENT"}};
  EXPECT_EQ(Value(s, "tnmt_requests_total", ok), 2);
  EXPECT_EQ(Value(s, "tnmt_requests_total", invalid), 1);
  EXPECT_EQ(Value(s, "tnmt_inflight_requests"), 0);

  const Labels rpc = {{"model", "en-de"}, {"method", "Translate"}};
  auto bucket = [&](const std::string& le) {
    Labels labels = rpc;
    labels.emplace_back("le", le);
    return Value(s, "tnmt_request_duration_seconds_bucket", labels);
  };
  EXPECT_EQ(Value(s, "tnmt_request_duration_seconds_count", rpc), 3);
  EXPECT_NEAR(Value(s, "tnmt_request_duration_seconds_sum", rpc), 0.2031, 1e-9);
  EXPECT_EQ(bucket("0.001"), 1);
  EXPECT_EQ(bucket("0.0025"), 1);
  EXPECT_EQ(bucket("0.005"), 2);
  EXPECT_EQ(bucket("0.25"), 3);
  EXPECT_EQ(bucket("60"), 3);
  EXPECT_EQ(bucket("+Inf"), 3);

  metrics.RequestStarted();
  metrics.RequestDone("en-de", "ListModels", 99, 0.01);  // not a status code
  metrics.RequestStarted();
  s = Parse(metrics.Serialize());
  EXPECT_EQ(Value(s, "tnmt_requests_total",
                  {{"model", "en-de"}, {"method", "ListModels"}, {"code", "UNKNOWN"}}),
            1);
  EXPECT_EQ(Value(s, "tnmt_inflight_requests"), 1);
}

TEST(ServerMetrics, CallsWithoutAModelCreateNoModelSeries) {
  // ListModels (and a call naming no known model) is counted under model="" but must not add
  // tnmt_model_loaded{model=""} 0, which would fire min(tnmt_model_loaded) == 0 for good.
  ServerMetrics metrics;
  metrics.ModelLoaded("en-de", 1);
  metrics.RequestStarted();
  metrics.RequestDone("", "ListModels", "OK", 0.001);
  const std::string text = metrics.Serialize();
  auto s = Parse(text);
  EXPECT_EQ(Value(s, "tnmt_requests_total", {{"model", ""}, {"method", "ListModels"}, {"code", "OK"}}), 1);
  EXPECT_EQ(Value(s, "tnmt_model_loaded", {{"model", "en-de"}}), 1);
  EXPECT_EQ(text.find("tnmt_model_loaded{model=\"\"}"), std::string::npos) << text;
  EXPECT_EQ(text.find("tnmt_queue_length{model=\"\"}"), std::string::npos);
}

TEST(ServerMetrics, SchedulerAndModelSeries) {
  ServerMetrics metrics;
  const Labels m = {{"model", "en-de"}};
  auto with_le = [&](const std::string& le) {
    Labels labels = m;
    labels.emplace_back("le", le);
    return labels;
  };
  metrics.SetQueueLength("en-de", 7);
  metrics.ObserveQueueWait("en-de", 0.002);
  metrics.ObserveCompute("en-de", 1.5);
  metrics.ObserveCompute("en-de", 0.04);
  metrics.ObserveEncode("en-de", 0.003);
  metrics.BatchDone("en-de", 8, 200);
  metrics.SentenceDone("en-de", 10, 12);
  metrics.SentenceDone("en-de", 5, 4);
  metrics.ModelLoaded("en-de", 2);
  metrics.ModelLoadFailed("en-de");
  auto s = Parse(metrics.Serialize());

  EXPECT_EQ(Value(s, "tnmt_queue_length", m), 7);
  EXPECT_EQ(Value(s, "tnmt_queue_duration_seconds_count", m), 1);
  EXPECT_EQ(Value(s, "tnmt_queue_duration_seconds_bucket", with_le("0.001")), 0);
  EXPECT_EQ(Value(s, "tnmt_queue_duration_seconds_bucket", with_le("0.0025")), 1);
  EXPECT_EQ(Value(s, "tnmt_compute_duration_seconds_count", m), 2);
  EXPECT_NEAR(Value(s, "tnmt_compute_duration_seconds_sum", m), 1.54, 1e-9);
  EXPECT_EQ(Value(s, "tnmt_compute_duration_seconds_bucket", with_le("1")), 1);
  EXPECT_EQ(Value(s, "tnmt_compute_duration_seconds_bucket", with_le("2.5")), 2);
  EXPECT_EQ(Value(s, "tnmt_encode_duration_seconds_count", m), 1);
  EXPECT_NEAR(Value(s, "tnmt_encode_duration_seconds_sum", m), 0.003, 1e-12);
  EXPECT_EQ(Value(s, "tnmt_encode_duration_seconds_bucket", with_le("0.0025")), 0);
  EXPECT_EQ(Value(s, "tnmt_encode_duration_seconds_bucket", with_le("0.005")), 1);
  EXPECT_EQ(Value(s, "tnmt_batch_sentences_bucket", with_le("4")), 0);
  EXPECT_EQ(Value(s, "tnmt_batch_sentences_bucket", with_le("8")), 1);
  EXPECT_EQ(Value(s, "tnmt_batch_tokens_bucket", with_le("128")), 0);
  EXPECT_EQ(Value(s, "tnmt_batch_tokens_bucket", with_le("256")), 1);
  EXPECT_EQ(Value(s, "tnmt_batch_tokens_sum", m), 200);
  EXPECT_EQ(Value(s, "tnmt_sentences_total", m), 2);
  EXPECT_EQ(Value(s, "tnmt_source_tokens_total", m), 15);
  EXPECT_EQ(Value(s, "tnmt_generated_tokens_total", m), 16);
  EXPECT_EQ(Value(s, "tnmt_model_loaded", m), 1) << "a failed reload keeps the old generation";
  EXPECT_EQ(Value(s, "tnmt_model_generation", m), 2);
  EXPECT_EQ(Value(s, "tnmt_model_load_failures_total", m), 1);

  metrics.ModelUnloaded("en-de");
  s = Parse(metrics.Serialize());
  EXPECT_EQ(Value(s, "tnmt_model_loaded", m), 0);
  EXPECT_EQ(Value(s, "tnmt_model_generation", m), 0);
}

TEST(ServerMetrics, EveryFamilyHasHelpAndType) {
  ServerMetrics metrics;
  metrics.RequestDone("m", "Translate", "OK", 0.1);
  const std::string text = metrics.Serialize();
  const std::vector<std::pair<std::string, std::string>> families = {
      {"tnmt_requests_total", "counter"},
      {"tnmt_request_duration_seconds", "histogram"},
      {"tnmt_queue_duration_seconds", "histogram"},
      {"tnmt_compute_duration_seconds", "histogram"},
      {"tnmt_encode_duration_seconds", "histogram"},
      {"tnmt_batch_sentences", "histogram"},
      {"tnmt_batch_tokens", "histogram"},
      {"tnmt_generated_tokens_total", "counter"},
      {"tnmt_source_tokens_total", "counter"},
      {"tnmt_sentences_total", "counter"},
      {"tnmt_queue_length", "gauge"},
      {"tnmt_inflight_requests", "gauge"},
      {"tnmt_model_loaded", "gauge"},
      {"tnmt_model_generation", "gauge"},
      {"tnmt_model_load_failures_total", "counter"},
      {"tnmt_build_info", "gauge"},
      {"process_start_time_seconds", "gauge"},
      {"process_cpu_seconds_total", "counter"},
      {"process_resident_memory_bytes", "gauge"},
      {"process_open_fds", "gauge"},
  };
  for (const auto& [name, type] : families) {
    EXPECT_NE(text.find("\n# TYPE " + name + " " + type + "\n"), std::string::npos) << name;
    EXPECT_NE(text.find("# HELP " + name + " "), std::string::npos) << name;
  }
}

TEST(ServerMetrics, BuildInfoAndStartTime) {
  const double before = std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  ServerMetricsOptions options;
  options.version = "1.2.3";
  ServerMetrics metrics(options);
  const std::string text = metrics.Serialize();
  EXPECT_NE(text.find("tnmt_build_info{compiler=\""), std::string::npos) << text;
  EXPECT_NE(text.find("\",version=\"1.2.3\"} 1\n"), std::string::npos) << text;
  const double start = Value(Parse(text), "process_start_time_seconds");
  EXPECT_GE(start, before - 1);
  EXPECT_LE(start, before + 60);
}

// The CPU time used by the whole process so far (all threads), by its CPU clock.
double ProcessCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

TEST(ServerMetrics, ProcessCpuMemoryAndFiles) {
  ServerMetrics metrics;
  const double clock0 = ProcessCpuSeconds();
  const double cpu0 = Value(Parse(metrics.Serialize()), "process_cpu_seconds_total");
  // Busy until the process has used 0.2 s of CPU by its own CPU clock, however long that takes
  // on a loaded machine (at most 30 s of wall time, half the small test's timeout).
  volatile double sink = 0;
  const auto cap = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (ProcessCpuSeconds() < clock0 + 0.2 && std::chrono::steady_clock::now() < cap) {
    for (int i = 0; i < 10000; ++i) sink = sink + 1;
  }
  ASSERT_GE(ProcessCpuSeconds(), clock0 + 0.2) << "the process got under 0.2 s of CPU in 30 s";
  std::vector<std::ifstream> files;
  for (int i = 0; i < 5; ++i) files.emplace_back("/proc/self/status");
  std::vector<char> memory(64 << 20, 1);  // 64 MiB, touched
  const auto s = Parse(metrics.Serialize());
  const double clock1 = ProcessCpuSeconds();
  // /proc/self/stat counts whole clock ticks (1/100 s), utime and stime each rounded down:
  // each reading is under two ticks short of the CPU clock.
  const double cpu = Value(s, "process_cpu_seconds_total") - cpu0;
  EXPECT_GE(cpu, 0.2 - 0.05) << "CPU clock: " << clock1 - clock0 << " s";
  EXPECT_LE(cpu, clock1 - clock0 + 0.05);
  EXPECT_GE(Value(s, "process_resident_memory_bytes"), 64.0 * (1 << 20));
  EXPECT_GE(Value(s, "process_open_fds"), 5 + 3);  // the files above and stdin/out/err
  EXPECT_EQ(memory[12345], 1);
}

TEST(ServerMetrics, ModelLabelsPastTheCapBecomeOther) {
  ServerMetricsOptions options;
  options.max_models = 2;
  ServerMetrics metrics(options);
  for (const char* model : {"a", "b", "c", "d", "a"}) metrics.SentenceDone(model, 1, 1);
  metrics.RequestDone("e", "Translate", "NOT_FOUND", 0.001);
  auto s = Parse(metrics.Serialize());
  EXPECT_EQ(Value(s, "tnmt_sentences_total", {{"model", "a"}}), 2);
  EXPECT_EQ(Value(s, "tnmt_sentences_total", {{"model", "b"}}), 1);
  EXPECT_EQ(Value(s, "tnmt_sentences_total", {{"model", "other"}}), 2);
  EXPECT_FALSE(Has(s, "tnmt_sentences_total", {{"model", "c"}}));
  EXPECT_EQ(Value(s, "tnmt_requests_total",
                  {{"model", "other"}, {"method", "Translate"}, {"code", "NOT_FOUND"}}),
            1);
}

TEST(ServerMetrics, ConcurrentUpdatesAreNotLost) {
  ServerMetrics metrics;
  constexpr int kThreads = 4;
  constexpr int kIterations = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&metrics, t] {
      const std::string own = "m" + std::to_string(t);
      for (int i = 0; i < kIterations; ++i) {
        metrics.RequestStarted();
        metrics.SentenceDone("shared", 2, 3);
        metrics.SentenceDone(own, 1, 1);
        metrics.RequestDone(i % 2 ? "shared" : own, "Translate", "OK", 0.001);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto s = Parse(metrics.Serialize());
  EXPECT_EQ(Value(s, "tnmt_sentences_total", {{"model", "shared"}}), kThreads * kIterations);
  EXPECT_EQ(Value(s, "tnmt_source_tokens_total", {{"model", "shared"}}),
            2 * kThreads * kIterations);
  EXPECT_EQ(Value(s, "tnmt_requests_total",
                  {{"model", "shared"}, {"method", "Translate"}, {"code", "OK"}}),
            kThreads * kIterations / 2);
  for (int t = 0; t < kThreads; ++t) {
    const std::string own = "m" + std::to_string(t);
    EXPECT_EQ(Value(s, "tnmt_sentences_total", {{"model", own}}), kIterations);
  }
  EXPECT_EQ(Value(s, "tnmt_inflight_requests"), 0);
}

}  // namespace
}  // namespace tnmt
