// RequestLog: one valid JSON line per record with the documented fields, bounded error
// messages, invalid UTF-8 replaced, whole lines under concurrent writers, reopen after rotation.
#include "server/request_log.h"

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "gtest/gtest.h"

namespace tnmt::server {
namespace {

std::vector<std::string> Lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

RequestRecord Record() {
  RequestRecord r;
  r.time = absl::FromUnixMillis(1764564600123);
  r.method = "Translate";
  r.model = "demo";
  r.peer = "ipv4:127.0.0.1:5555";
  r.texts = 3;
  r.seconds = 0.0421;
  return r;
}

TEST(RequestLog, FormatsOneJsonObject) {
  const nlohmann::json j = nlohmann::json::parse(RequestLog::Format(Record()));
  EXPECT_EQ(j["time"], "2025-12-01T04:50:00.123Z");
  EXPECT_EQ(j["method"], "Translate");
  EXPECT_EQ(j["model"], "demo");
  EXPECT_EQ(j["peer"], "ipv4:127.0.0.1:5555");
  EXPECT_EQ(j["texts"], 3);
  EXPECT_EQ(j["code"], "OK");
  EXPECT_FALSE(j.contains("message"));
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 0.0421);
}

TEST(RequestLog, ErrorsAreBoundedAndGarbageIsReplaced) {
  RequestRecord r = Record();
  r.code = 5;  // NOT_FOUND
  r.message = "no model named " + std::string(100000, 'x');
  r.model = std::string("bad\xff\xfe", 5);
  const std::string line = RequestLog::Format(r);
  EXPECT_LT(line.size(), 600u);
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["code"], "NOT_FOUND");
  EXPECT_NE(j["message"].get<std::string>().find("(100015 bytes)"), std::string::npos);
}

TEST(RequestLog, ConcurrentWritersNeverInterleave) {
  const std::string path = ::testing::TempDir() + "/requests.jsonl";
  std::remove(path.c_str());
  auto log = RequestLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      RequestRecord r = Record();
      r.texts = t;
      for (int i = 0; i < 500; ++i) (*log)->Write(r);
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<std::string> lines = Lines(path);
  ASSERT_EQ(lines.size(), 2000u);
  for (const std::string& l : lines) EXPECT_TRUE(nlohmann::json::accept(l)) << l;
  EXPECT_EQ((*log)->write_errors(), 0);
}

TEST(RequestLog, ReopensAfterRotation) {
  const std::string path = ::testing::TempDir() + "/rotated.jsonl";
  std::remove(path.c_str());
  std::remove((path + ".1").c_str());
  auto log = RequestLog::Open(path);
  ASSERT_TRUE(log.ok());
  (*log)->Write(Record());
  ASSERT_EQ(std::rename(path.c_str(), (path + ".1").c_str()), 0);
  ASSERT_TRUE((*log)->Reopen().ok());
  (*log)->Write(Record());
  EXPECT_EQ(Lines(path + ".1").size(), 1u);
  EXPECT_EQ(Lines(path).size(), 1u);
}

TEST(RequestLog, AnUnwritablePathIsNamed) {
  auto log = RequestLog::Open("/nonexistent-dir/requests.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_NE(std::string(log.status().message()).find("--request-log /nonexistent-dir/requests.jsonl"),
            std::string::npos);
}

}  // namespace
}  // namespace tnmt::server
