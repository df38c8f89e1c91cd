// TrainConfig: the device and dtype keys (defaults, accepted forms, errors that name the key,
// half precision refused on the CPU), and that ToJson round-trips them.
#include "trainer/train_config.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace tnmt::train {
namespace {

using nlohmann::json;

json Minimal() {
  return json{{"train_source", "a.en"}, {"train_target", "a.de"}, {"save_dir", "/tmp/x"}, {"preset", "tiny"}};
}

TEST(TrainConfigTest, DeviceAndDtypeDefaults) {
  auto c = TrainConfig::FromJson(Minimal(), "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device, "cpu");
  EXPECT_EQ(c->dtype, "float32");
}

TEST(TrainConfigTest, AcceptsCudaDevicesAndHalfPrecisionOnCuda) {
  for (const char* device : {"cuda", "cuda:0", "cuda:7", "cuda:12"}) {
    for (const char* dtype : {"float32", "float16", "bfloat16"}) {
      json j = Minimal();
      j["device"] = device;
      j["dtype"] = dtype;
      auto c = TrainConfig::FromJson(j, "test.json");
      ASSERT_TRUE(c.ok()) << device << " " << dtype << ": " << c.status();
      EXPECT_EQ(c->device, device);
      EXPECT_EQ(c->dtype, dtype);
      auto again = TrainConfig::FromJson(c->ToJson(), "round trip");
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(again->device, device);
      EXPECT_EQ(again->dtype, dtype);
    }
  }
  auto d = ParseTrainDevice("cuda:3");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->cuda);
  EXPECT_EQ(d->index, 3);
  d = ParseTrainDevice("cuda");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->index, -1);
  d = ParseTrainDevice("cpu");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->cuda);
}

TEST(TrainConfigTest, BadDeviceNamesTheKey) {
  for (const char* device : {"tpu", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1:2", "CUDA", "cuda:00000", ""}) {
    json j = Minimal();
    j["device"] = device;
    auto c = TrainConfig::FromJson(j, "test.json");
    ASSERT_FALSE(c.ok()) << device;
    const std::string msg(c.status().message());
    EXPECT_NE(msg.find("test.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"device\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:N"), std::string::npos) << msg;
  }
  json j = Minimal();
  j["device"] = 0;
  auto c = TrainConfig::FromJson(j, "test.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("\"device\" must be a string"), std::string::npos);
}

TEST(TrainConfigTest, BadDtypeNamesTheKey) {
  for (const char* dtype : {"float64", "fp16", "half", "int8", ""}) {
    json j = Minimal();
    j["device"] = "cuda";
    j["dtype"] = dtype;
    auto c = TrainConfig::FromJson(j, "test.json");
    ASSERT_FALSE(c.ok()) << dtype;
    const std::string msg(c.status().message());
    EXPECT_NE(msg.find("\"dtype\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("bfloat16"), std::string::npos) << msg;
  }
}

TEST(TrainConfigTest, HalfPrecisionOnCpuIsRefused) {
  for (const char* dtype : {"float16", "bfloat16"}) {
    json j = Minimal();
    j["dtype"] = dtype;  // device defaults to cpu
    auto c = TrainConfig::FromJson(j, "flags");
    ASSERT_FALSE(c.ok()) << dtype;
    const std::string msg(c.status().message());
    EXPECT_NE(msg.find("\"dtype\""), std::string::npos) << msg;
    EXPECT_NE(msg.find(dtype), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace tnmt::train
