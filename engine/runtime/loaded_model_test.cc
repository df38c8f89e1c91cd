// Every broken model directory gives one clear error naming the file and the problem:
// missing files, bad JSON, unknown format/version, truncated or corrupt safetensors, missing,
// misshapen or unexpected tensors, a vocabulary that disagrees with spm.model.
#include "engine/runtime/loaded_model.h"

#include <filesystem>
#include <fstream>
#include <functional>

#include <gtest/gtest.h>

#include "engine/model/safetensors.h"

namespace tnmt {
namespace {

namespace fs = std::filesystem;
const char* kTiny = "tests/golden/data/tiny";

class BrokenModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors", "spm.model"}) {
      fs::copy_file(fs::path(kTiny) / f, dir_ / f);
    }
  }
  std::string Path(const char* f) const { return (dir_ / f).string(); }
  void Write(const char* f, const std::string& content) {
    std::ofstream(Path(f), std::ios::binary | std::ios::trunc) << content;
  }
  std::string Read(const char* f) {
    std::ifstream in(Path(f), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Expects loading to fail with a message containing every fragment.
  void ExpectError(std::initializer_list<std::string> fragments) {
    auto m = LoadModelDirectory(dir_.string());
    ASSERT_FALSE(m.ok());
    const std::string msg(m.status().message());
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
  void EditTensors(const std::function<void(std::map<std::string, Tensor>*)>& edit) {
    auto tensors = ReadSafetensors(Path("model.safetensors"));
    ASSERT_TRUE(tensors.ok());
    std::map<std::string, Tensor> plain;
    for (auto& [k, v] : *tensors) plain[k] = v.value;
    edit(&plain);
    ASSERT_TRUE(WriteSafetensors(Path("model.safetensors"), plain).ok());
  }
  fs::path dir_;
};

TEST_F(BrokenModelTest, IntactCopyLoads) {
  auto m = LoadModelDirectory(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  // The parameter count is every stored scalar: the unfused tensors the weights write back.
  int64_t want = 0;
  for (const auto& [name, t] : (*m)->weights.ToTensors((*m)->config)) want += t.numel();
  EXPECT_EQ((*m)->parameter_count, want);
}

TEST_F(BrokenModelTest, MissingDirectoryAndFiles) {
  EXPECT_NE(LoadModelDirectory(Path("nope")).status().message().find("does not exist"), std::string::npos);
  for (const char* f : {"config.json", "model.safetensors", "spm.model"}) {
    SetUp();
    fs::remove(Path(f));
    ExpectError({f, "no such file"});
  }
}

TEST_F(BrokenModelTest, BadJson) {
  Write("config.json", "{\"format\": \"tnmt-transformer\", ");
  ExpectError({"config.json", "not valid JSON"});
  Write("config.json", "[1, 2]");
  ExpectError({"config.json", "object"});
}

TEST_F(BrokenModelTest, WrongFormatVersionAndValues) {
  std::string cfg = Read("config.json");
  Write("config.json", std::string(cfg).replace(cfg.find("\"format_version\": 1"), 19, "\"format_version\": 2"));
  ExpectError({"config.json", "format_version 2"});
  Write("config.json", std::string(cfg).replace(cfg.find("tnmt-transformer"), 16, "marian"));
  ExpectError({"config.json", "\"format\""});
  Write("config.json", std::string(cfg).replace(cfg.find("\"num_heads\": 4"), 14, "\"num_heads\": 5"));
  ExpectError({"config.json", "divisible"});
  Write("config.json", std::string(cfg).replace(cfg.find("\"activation\": \"relu\""), 20, "\"activation\": \"tanh\""));
  ExpectError({"config.json", "activation"});
  Write("config.json", std::string(cfg).replace(cfg.find("\"d_ff\": 64"), 10, "\"d_ff\": \"64\""));
  ExpectError({"config.json", "\"d_ff\" must be an integer"});
  const size_t lp = cfg.find("\"length_penalty\"");
  ASSERT_NE(lp, std::string::npos);
  Write("config.json", std::string(cfg).insert(lp, "\"length_penalty_style\": \"wu\", "));
  ExpectError({"config.json", "\"decoding.length_penalty_style\": expected \"gnmt\""});
  Write("config.json", std::string(cfg).insert(lp, "\"length_penalty_style\": \"length\", "));
  auto m = LoadModelDirectory(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->config.decoding.length_penalty_style, LengthPenaltyStyle::kLength);
  EXPECT_NE((*m)->config.ToJson().find("\"length_penalty_style\": \"length\""), std::string::npos);
}

TEST_F(BrokenModelTest, VocabSizeMismatchWithSentencePiece) {
  std::string cfg = Read("config.json");
  Write("config.json", cfg.replace(cfg.find("\"vocab_size\": 256"), 17, "\"vocab_size\": 300"));
  ExpectError({"spm.model", "256", "300"});
}

TEST_F(BrokenModelTest, TruncatedSafetensors) {
  const std::string data = Read("model.safetensors");
  for (size_t keep : {size_t{0}, size_t{5}, size_t{100}, data.size() / 2, data.size() - 1}) {
    Write("model.safetensors", data.substr(0, keep));
    ExpectError({"model.safetensors"});
  }
}

TEST_F(BrokenModelTest, GarbageHeader) {
  std::string data = Read("model.safetensors");
  for (size_t i = 8; i < 40; ++i) data[i] = '#';
  Write("model.safetensors", data);
  ExpectError({"model.safetensors", "header"});
}

TEST_F(BrokenModelTest, MissingTensor) {
  EditTensors([](auto* t) { t->erase("decoder.layers.1.fc2.bias"); });
  ExpectError({"model.safetensors", "missing tensor \"decoder.layers.1.fc2.bias\""});
}

TEST_F(BrokenModelTest, WrongShape) {
  EditTensors([](auto* t) { (*t)["encoder.layers.0.fc1.weight"] = *Tensor::Zeros({64, 31}); });
  ExpectError({"model.safetensors", "encoder.layers.0.fc1.weight", "[64, 31]", "[64, 32]"});
}

TEST_F(BrokenModelTest, UnexpectedTensor) {
  EditTensors([](auto* t) { (*t)["decoder.layers.7.fc1.weight"] = *Tensor::Zeros({2}); });
  ExpectError({"model.safetensors", "unexpected", "decoder.layers.7.fc1.weight"});
}

TEST_F(BrokenModelTest, CorruptSentencePiece) {
  Write("spm.model", "this is not a sentencepiece model");
  ExpectError({"spm.model"});
}

TEST(SafetensorsTest, HalfPrecisionRoundTrip) {
  auto t = Tensor::FromVector({2, 3}, {0.0f, 1.0f, -2.5f, 65504.0f, 1e-3f, 3.14159f});
  ASSERT_TRUE(t.ok());
  for (DType d : {DType::kFloat16, DType::kBFloat16}) {
    const std::string path = ::testing::TempDir() + "/half.safetensors";
    ASSERT_TRUE(WriteSafetensors(path, {{"x", *t}}, d).ok());
    auto back = ReadSafetensors(path);
    ASSERT_TRUE(back.ok());
    const StoredTensor& x = back->at("x");
    EXPECT_EQ(x.stored_dtype, d);
    EXPECT_EQ(x.value.shape(), t->shape());
    const double rel = d == DType::kFloat16 ? 1e-3 : 8e-3;
    for (int i = 0; i < 6; ++i) {
      EXPECT_NEAR(x.value.f32()[i], t->f32()[i], rel * std::fabs(t->f32()[i]) + 1e-6) << i;
    }
  }
}

}  // namespace
}  // namespace tnmt
