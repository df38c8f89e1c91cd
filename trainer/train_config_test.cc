// TrainConfig: the device and dtype keys (defaults, accepted forms, errors that name the key,
// half precision refused on the CPU), that ToJson round-trips them; errors name a setting as
// the user wrote it (the flag, or the file and key); CheckResumable names each differing key.
#include "trainer/train_config.h"

#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

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

TEST(TrainConfigTest, AttentionAndActivationDropoutDefaultOffAndRoundTrip) {
  auto c = TrainConfig::FromJson(Minimal(), "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attention_dropout, 0.0f);
  EXPECT_EQ(c->activation_dropout, 0.0f);
  json j = Minimal();
  j["attention_dropout"] = 0.1;
  j["activation_dropout"] = 0.25;
  c = TrainConfig::FromJson(j, "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->attention_dropout, 0.1f);
  EXPECT_FLOAT_EQ(c->activation_dropout, 0.25f);
  auto again = TrainConfig::FromJson(c->ToJson(), "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->attention_dropout, c->attention_dropout);
  EXPECT_EQ(again->activation_dropout, c->activation_dropout);
}

TEST(TrainConfigTest, RDropDefaultsOffAndRoundTrips) {
  auto c = TrainConfig::FromJson(Minimal(), "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rdrop_alpha, 0.0f);
  json j = Minimal();
  j["rdrop_alpha"] = 5;
  c = TrainConfig::FromJson(j, "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FLOAT_EQ(c->rdrop_alpha, 5.0f);
  auto again = TrainConfig::FromJson(c->ToJson(), "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rdrop_alpha, 5.0f);
  j["rdrop_alpha"] = 1e9;
  EXPECT_FALSE(TrainConfig::FromJson(j, "test.json").ok());
}

TEST(TrainConfigTest, SubwordSamplingDefaultsOffAndRoundTrips) {
  auto c = TrainConfig::FromJson(Minimal(), "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->subword_nbest, 1);
  json j = Minimal();
  j["subword_nbest"] = 32;
  j["subword_alpha"] = 0.2;
  c = TrainConfig::FromJson(j, "test.json");
  ASSERT_TRUE(c.ok()) << c.status();
  auto again = TrainConfig::FromJson(c->ToJson(), "round trip");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->subword_nbest, 32);
  EXPECT_FLOAT_EQ(again->subword_alpha, 0.2f);
  j["subword_nbest"] = 65;
  c = TrainConfig::FromJson(j, "test.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(std::string(c.status().message()).find("subword_nbest"), std::string::npos) << c.status();
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

TEST(TrainConfigTest, Float16OnCpuIsRefused) {
  json j = Minimal();
  j["dtype"] = "float16";  // device defaults to cpu
  auto c = TrainConfig::FromJson(j, "flags");
  ASSERT_FALSE(c.ok());
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find("\"dtype\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("float16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda"), std::string::npos) << msg;
}

// bfloat16 on the CPU is a valid config everywhere; whether this CPU can run it is the CPU
// engine's check (cpu_train_engine_test).
TEST(TrainConfigTest, Bfloat16OnCpuIsAConfig) {
  json j = Minimal();
  j["dtype"] = "bfloat16";
  auto c = TrainConfig::FromJson(j, "flags");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->dtype, "bfloat16");
}

// `tnmt train --config run.json --preset huge`: the flag is wrong, not the file.
TEST(TrainConfigTest, ABadFlagIsBlamedOnTheFlag) {
  struct Case {
    const char* key;
    json value;
    const char* flag;
  };
  for (const Case& c : {Case{"preset", "huge", "--preset"}, Case{"dropout", 2.0, "--dropout"},
                        Case{"attention_dropout", 1.0, "--attention-dropout"},
                        Case{"activation_dropout", -0.5, "--activation-dropout"},
                        Case{"rdrop_alpha", -1.0, "--rdrop-alpha"},
                        Case{"subword_nbest", 0, "--subword-nbest"}, Case{"subword_alpha", -1.0, "--subword-alpha"},
                        Case{"max_steps", 0, "--max-steps"}, Case{"log_every_steps", 0, "--log-every-steps"},
                        Case{"device", "tpu", "--device"}, Case{"vocab_size", "many", "--vocab-size"}}) {
    json j = Minimal();
    j[c.key] = c.value;
    ConfigOrigin origin;
    origin.file = "run.json";
    origin.flag_keys = {c.key};
    auto cfg = TrainConfig::FromJson(j, origin);
    ASSERT_FALSE(cfg.ok()) << c.key;
    const std::string msg(cfg.status().message());
    EXPECT_EQ(msg.rfind(c.flag, 0), 0u) << msg;
    EXPECT_EQ(msg.find("run.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.value.dump()), std::string::npos) << "the message shows the value: " << msg;
    // The same value from the file names the file and its key.
    origin.flag_keys.clear();
    cfg = TrainConfig::FromJson(j, origin);
    ASSERT_FALSE(cfg.ok()) << c.key;
    const std::string file_msg(cfg.status().message());
    EXPECT_EQ(file_msg.rfind(absl::StrCat("run.json: \"", c.key, "\""), 0), 0u) << file_msg;
  }
}

TEST(TrainConfigTest, ABadModelFlagIsNamedAsTheFlag) {
  json j = Minimal();
  j["d_model"] = 30;
  j["num_heads"] = 4;
  ConfigOrigin origin;
  origin.file = "run.json";
  origin.flag_keys = {"d_model", "num_heads"};
  auto cfg = TrainConfig::FromJson(j, origin);
  ASSERT_FALSE(cfg.ok());
  const std::string msg(cfg.status().message());
  EXPECT_NE(msg.find("--d-model 30"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--num-heads 4"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("run.json"), std::string::npos) << msg;
}

TEST(TrainConfigTest, RequiredSettingsNameTheFlagsAndKeys) {
  ConfigOrigin origin;  // no --config file
  auto cfg = TrainConfig::FromJson(json{{"save_dir", "/tmp/x"}}, origin);
  ASSERT_FALSE(cfg.ok());
  const std::string msg(cfg.status().message());
  EXPECT_NE(msg.find("--train-source and --train-target"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"train_source\""), std::string::npos) << msg;
}

TEST(TrainConfigTest, ResumableWhenTheModelIsTheSame) {
  auto a = PresetModel("small", 100);
  ASSERT_TRUE(a.ok());
  ModelConfig b = *a;
  b.label_smoothing = 0.2f;  // a loss setting, not the model
  EXPECT_TRUE(CheckResumable(*a, b).ok());
}

TEST(TrainConfigTest, NotResumableNamesEachDifferingKey) {
  auto saved = PresetModel("small", 100);
  auto requested = PresetModel("base", 100);
  ASSERT_TRUE(saved.ok() && requested.ok());
  absl::Status s = CheckResumable(*saved, *requested);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_NE(msg.find("d_model: checkpoint 256, config 512"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_heads: checkpoint 4, config 8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("encoder_layers: checkpoint 3, config 6"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("vocab_size"), std::string::npos) << msg;
  requested->vocab_size = 120;
  s = CheckResumable(*saved, *requested);
  EXPECT_NE(std::string(s.message()).find("vocab_size: checkpoint 100, config 120"), std::string::npos) << s;
}

}  // namespace
}  // namespace tnmt::train
