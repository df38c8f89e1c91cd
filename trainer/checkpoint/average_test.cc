// Checkpoint averaging: equals the mean computed by hand (double accumulation, one rounding),
// writes a loadable model directory in the chosen dtype, and refuses inputs of different models.
#include "trainer/checkpoint/average.h"

#include <cmath>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model/safetensors.h"
#include "engine/runtime/loaded_model.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/checkpoint/test_util.h"

namespace tnmt {
namespace {

namespace fs = std::filesystem;
using testing::FreshTestDir;
using testing::RandomTinyCheckpoint;
using testing::ReadFileForTest;
using testing::WriteFileForTest;

class AverageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = FreshTestDir();
    root_ = work_ + "/ckpt";
    for (int i = 0; i < 3; ++i) {
      auto c = RandomTinyCheckpoint(100 * (i + 1), 11 + i);
      ASSERT_TRUE(c.ok()) << c.status();
      ASSERT_TRUE(SaveCheckpoint(root_, *c, 0).ok());
      saved_.push_back(*std::move(c));
    }
    auto dirs = ListCheckpoints(root_);
    ASSERT_TRUE(dirs.ok());
    dirs_ = *dirs;
  }
  // The output's tensors (as float32) and their stored dtypes.
  TensorMap ReadOut(const std::string& out) {
    auto t = ReadSafetensors(out + "/model.safetensors");
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : TensorMap{};
  }
  std::string work_, root_;
  std::vector<Checkpoint> saved_;
  std::vector<std::string> dirs_;
};

TEST_F(AverageTest, ThreeCheckpointsEqualTheHandComputedMean) {
  const std::string out = work_ + "/averaged";
  ASSERT_TRUE(AverageCheckpoints(dirs_, out).ok());
  const TensorMap got = ReadOut(out);
  ASSERT_EQ(got.size(), saved_[0].params.size());
  for (const auto& [name, p0] : saved_[0].params) {
    const Tensor& p1 = saved_[1].params.at(name);
    const Tensor& p2 = saved_[2].params.at(name);
    const StoredTensor& avg = got.at(name);
    EXPECT_EQ(avg.stored_dtype, DType::kFloat32);
    ASSERT_EQ(avg.value.shape(), p0.shape()) << name;
    for (int64_t i = 0; i < p0.numel(); ++i) {
      const double sum = static_cast<double>(p0.f32()[i]) + p1.f32()[i] + p2.f32()[i];
      ASSERT_EQ(avg.value.f32()[i], static_cast<float>(sum / 3.0)) << name << "[" << i << "]";
    }
  }
  EXPECT_EQ(ReadFileForTest(out + "/spm.model"), ReadFileForTest(saved_[0].spm_model_path));
  EXPECT_EQ(ReadFileForTest(out + "/config.json"), saved_[0].config.ToJson());
  auto model = LoadModelDirectory(out);
  ASSERT_TRUE(model.ok()) << model.status();
  // Only the model directory: no optimizer state, no debris beside it.
  EXPECT_FALSE(fs::exists(out + "/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/trainer_state.json"));
  for (const auto& e : fs::directory_iterator(work_)) {
    EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << e.path();
  }
}

TEST_F(AverageTest, AverageLastKPicksTheNewest) {
  const std::string out = work_ + "/last2";
  ASSERT_TRUE(AverageLastCheckpoints(root_, 2, out).ok());
  const TensorMap got = ReadOut(out);
  for (const auto& [name, p1] : saved_[1].params) {
    const Tensor& p2 = saved_[2].params.at(name);
    for (int64_t i = 0; i < p1.numel(); ++i) {
      const double sum = static_cast<double>(p1.f32()[i]) + p2.f32()[i];
      ASSERT_EQ(got.at(name).value.f32()[i], static_cast<float>(sum / 2.0)) << name;
    }
  }
  EXPECT_FALSE(AverageLastCheckpoints(root_, 4, work_ + "/x").ok());
  EXPECT_FALSE(AverageLastCheckpoints(root_, 0, work_ + "/x").ok());
  EXPECT_FALSE(AverageCheckpoints({}, work_ + "/x").ok());
  EXPECT_FALSE(fs::exists(work_ + "/x"));
}

TEST_F(AverageTest, AMissingOrEmptyRootSaysSo) {
  absl::Status s = AverageLastCheckpoints(work_ + "/nonexistent", 5, work_ + "/x");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(std::string(s.message()).find("/nonexistent: no such directory"), std::string::npos) << s;
  fs::create_directories(work_ + "/empty");
  s = AverageLastCheckpoints(work_ + "/empty", 5, work_ + "/x");
  EXPECT_NE(std::string(s.message()).find("no checkpoints"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(work_ + "/x"));
}

TEST_F(AverageTest, OneInputIsACopy) {
  const std::string out = work_ + "/copy";
  ASSERT_TRUE(AverageCheckpoints({testing::kTinyModelDir}, out).ok());
  auto original = ReadSafetensors(std::string(testing::kTinyModelDir) + "/model.safetensors");
  ASSERT_TRUE(original.ok());
  const TensorMap got = ReadOut(out);
  ASSERT_EQ(got.size(), original->size());
  for (const auto& [name, t] : *original) {
    EXPECT_TRUE(testing::BitEqual(t.value, got.at(name).value)) << name;
  }
}

TEST_F(AverageTest, HalfPrecisionOutput) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const std::string out = work_ + "/half-" + DTypeName(dtype);
    AverageOptions options;
    options.stored_dtype = dtype;
    ASSERT_TRUE(AverageCheckpoints(dirs_, out, options).ok());
    const TensorMap got = ReadOut(out);
    const double rel = dtype == DType::kFloat16 ? 1.0 / 1024 : 1.0 / 128;
    for (const auto& [name, p0] : saved_[0].params) {
      EXPECT_EQ(got.at(name).stored_dtype, dtype) << name;
      for (int64_t i = 0; i < p0.numel(); ++i) {
        const double mean = (static_cast<double>(p0.f32()[i]) + saved_[1].params.at(name).f32()[i] +
                             saved_[2].params.at(name).f32()[i]) / 3.0;
        ASSERT_NEAR(got.at(name).value.f32()[i], mean, std::abs(mean) * rel + 1e-4) << name;
      }
    }
    EXPECT_TRUE(LoadModelDirectory(out).ok());
  }
  AverageOptions bad;
  bad.stored_dtype = DType::kInt32;
  EXPECT_FALSE(AverageCheckpoints(dirs_, work_ + "/int", bad).ok());
}

TEST_F(AverageTest, MismatchedConfigsAreAnErrorNamingTheDirectory) {
  const std::string config_path = dirs_[2] + "/config.json";
  std::string config = ReadFileForTest(config_path);
  config.replace(config.find("\"label_smoothing\": 0.1"), 22, "\"label_smoothing\": 0.2");
  WriteFileForTest(config_path, config);
  const std::string out = work_ + "/averaged";
  absl::Status s = AverageCheckpoints(dirs_, out);
  ASSERT_FALSE(s.ok());
  const std::string msg(s.message());
  EXPECT_NE(msg.find(config_path), std::string::npos) << msg;
  EXPECT_NE(msg.find("label_smoothing"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(AverageTest, MismatchedVocabulariesAndTensorsAreErrors) {
  const std::string out = work_ + "/averaged";
  WriteFileForTest(dirs_[1] + "/spm.model", "another vocabulary");
  absl::Status s = AverageCheckpoints(dirs_, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(dirs_[1] + "/spm.model"), std::string::npos) << s;

  const std::string model_path = dirs_[2] + "/model.safetensors";
  auto tensors = ReadSafetensors(model_path);
  ASSERT_TRUE(tensors.ok());
  std::map<std::string, Tensor> plain;
  for (auto& [k, v] : *tensors) plain[k] = v.value;
  plain.erase("decoder.layers.1.fc2.weight");
  ASSERT_TRUE(WriteSafetensors(model_path, plain).ok());
  s = AverageCheckpoints({dirs_[0], dirs_[2]}, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(model_path), std::string::npos) << s;
  EXPECT_NE(std::string(s.message()).find("decoder.layers.1.fc2.weight"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(AverageTest, ExistingOutputNeedsOverwrite) {
  const std::string out = work_ + "/averaged";
  ASSERT_TRUE(AverageCheckpoints({dirs_[0]}, out).ok());
  absl::Status s = AverageCheckpoints(dirs_, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists) << s;
  AverageOptions options;
  options.overwrite = true;
  ASSERT_TRUE(AverageCheckpoints(dirs_, out, options).ok());
  const Tensor& p0 = saved_[0].params.begin()->second;
  const std::string& name = saved_[0].params.begin()->first;
  const double sum = static_cast<double>(p0.f32()[5]) + saved_[1].params.at(name).f32()[5] +
                     saved_[2].params.at(name).f32()[5];
  EXPECT_EQ(ReadOut(out).at(name).value.f32()[5], static_cast<float>(sum / 3.0));
}

// A model directory with separate vocabularies, as `tnmt import --from hf-marian` writes it
// (source.spm, target.spm, vocab.json; no spm.model): averaged, in float16, into a directory
// that has them too and loads; the languages given in the options reach its config.json.
TEST_F(AverageTest, SeparateVocabulariesAsImportedAndLanguages) {
  const std::string tiny = "tests/golden/data/tiny";
  auto joint = Tokenizer::Load(tiny + "/spm.model");
  ASSERT_TRUE(joint.ok()) << joint.status();
  nlohmann::json ids = nlohmann::json::object();
  for (int i = 0; i < (*joint)->vocab_size(); ++i) ids[(*joint)->Piece(i)] = i;
  std::vector<std::string> dirs;
  for (int k = 0; k < 2; ++k) {
    const std::string dir = work_ + "/imported-" + std::to_string(k);
    fs::create_directories(dir);
    fs::copy_file(dirs_[k] + "/model.safetensors", dir + "/model.safetensors");
    fs::copy_file(tiny + "/spm.model", dir + "/source.spm");
    fs::copy_file(tiny + "/spm.model", dir + "/target.spm");
    WriteFileForTest(dir + "/vocab.json", ids.dump());
    std::string config = ReadFileForTest(dirs_[k] + "/config.json");
    config.replace(config.find("\"format_version\": 1"), 19, "\"format_version\": 2");
    config.insert(config.find("\"d_model\""),
                  "\"vocabulary\": {\"source_spm\": \"source.spm\", \"target_spm\": \"target.spm\", \"ids\": \"vocab.json\"}, ");
    WriteFileForTest(dir + "/config.json", config);
    dirs.push_back(dir);
  }
  ASSERT_TRUE(LoadModelDirectory(dirs[0]).ok());
  const std::string out = work_ + "/averaged-imported";
  AverageOptions options;
  options.stored_dtype = DType::kFloat16;
  options.source_language = "en";
  options.target_language = "de";
  absl::Status s = AverageCheckpoints(dirs, out, options);
  ASSERT_TRUE(s.ok()) << s;
  for (const char* f : {"source.spm", "target.spm", "vocab.json"}) {
    EXPECT_EQ(ReadFileForTest(out + "/" + f), ReadFileForTest(dirs[0] + "/" + f)) << f;
  }
  EXPECT_FALSE(fs::exists(out + "/spm.model"));
  auto loaded = LoadModelDirectory(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE((*loaded)->tokenizer->separate());
  EXPECT_EQ((*loaded)->config.source_language, "en");
  EXPECT_EQ((*loaded)->config.target_language, "de");

  WriteFileForTest(dirs[1] + "/vocab.json", "{}");
  s = AverageCheckpoints(dirs, work_ + "/mismatch");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find(dirs[1] + "/vocab.json"), std::string::npos) << s;
}

}  // namespace
}  // namespace tnmt
