// Every broken model directory gives one clear error naming the file and the problem:
// missing files, bad JSON, unknown format/version, truncated or corrupt safetensors, missing,
// misshapen or unexpected tensors, a vocabulary that disagrees with spm.model.
#include "engine/runtime/loaded_model.h"

#include <filesystem>
#include <fstream>
#include <cmath>
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
  Write("config.json", std::string(cfg).replace(cfg.find("\"format_version\": 1"), 19, "\"format_version\": 3"));
  ExpectError({"config.json", "format_version 3"});
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

// Version 2 keys: refused in a version 1 file, checked in a version 2 one.
TEST_F(BrokenModelTest, FormatVersion2Keys) {
  const std::string cfg = Read("config.json");
  const size_t at = cfg.find("\"d_model\"");
  ASSERT_NE(at, std::string::npos);
  auto with = [&](const std::string& keys, bool v2) {
    std::string c = std::string(cfg).insert(at, keys + ", ");
    if (v2) c.replace(c.find("\"format_version\": 1"), 19, "\"format_version\": 2");
    return c;
  };
  Write("config.json", with("\"final_logits_bias\": true", false));
  ExpectError({"config.json", "\"final_logits_bias\" needs \"format_version\": 2"});
  Write("config.json", std::string(cfg).replace(cfg.find("\"activation\": \"relu\""), 20, "\"activation\": \"swish\""));
  ExpectError({"config.json", "\"swish\" needs \"format_version\": 2"});
  Write("config.json", with("\"sinusoid_layout\": \"sideways\"", true));
  ExpectError({"config.json", "\"sinusoid_layout\" must be"});
  Write("config.json", with("\"decoder_start_id\": 9999", true));
  ExpectError({"config.json", "\"decoder_start_id\" 9999 is outside the vocabulary"});
  Write("config.json", with("\"vocabulary\": {\"source_spm\": \"../x\", \"target_spm\": \"t\", \"ids\": \"v\"}", true));
  ExpectError({"config.json", "\"vocabulary.source_spm\" must be a file name"});
  Write("config.json", with("\"final_logits_bias\": true", true));
  ExpectError({"model.safetensors", "missing tensor \"final_logits_bias\""});

  // A zero bias, Marian's positions, swish and a start token of its own: loads, and writes
  // itself back as version 2 with every key.
  std::string c2 = with("\"final_logits_bias\": true, \"sinusoid_layout\": \"halves\", \"decoder_start_id\": 0, "
                        "\"source_language\": \"en\", \"target_language\": \"de\", \"max_sinusoid_positions\": 40",
                        true);
  c2.replace(c2.find("\"activation\": \"relu\""), 20, "\"activation\": \"swish\"");
  Write("config.json", c2);
  EditTensors([](std::map<std::string, Tensor>* t) {
    (*t)["final_logits_bias"] = *Tensor::Zeros({256});
  });
  auto m = LoadModelDirectory(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = (*m)->config;
  EXPECT_TRUE(c.final_logits_bias);
  EXPECT_EQ(c.sinusoid_layout, SinusoidLayout::kHalves);
  EXPECT_EQ(c.activation, kernels::Activation::kSwish);
  EXPECT_EQ(c.start_id(), 0);
  EXPECT_EQ(MaxPositions(c), 40);
  auto back = ModelConfig::Parse(c.ToJson(), "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->ToJson(), c.ToJson());
  EXPECT_NE(c.ToJson().find("\"format_version\": 2"), std::string::npos);
  EXPECT_NE(c.ToJson().find("\"target_language\": \"de\""), std::string::npos);
  // Sines in the first half of the width, cosines in the second (position 1, i = 0).
  const int d = c.d_model;
  EXPECT_FLOAT_EQ((*m)->weights.encoder_positions.f32()[d], std::sin(1.0f));
  EXPECT_FLOAT_EQ((*m)->weights.encoder_positions.f32()[d + d / 2], std::cos(1.0f));
  // The CUDA engine refuses what it does not run, naming the key.
  EXPECT_NE(c.CheckCudaSupport().message().find("\"activation\": \"swish\""), std::string::npos);
}

// Separate vocabularies (OPUS-MT's layout): the same SentencePiece model as source and target
// and an id map equal to its ids tokenize exactly as the joint model does.
TEST_F(BrokenModelTest, SeparateVocabularies) {
  auto joint = Tokenizer::Load(Path("spm.model"));
  ASSERT_TRUE(joint.ok()) << joint.status();
  std::string ids = "{";
  for (int i = 0; i < (*joint)->vocab_size(); ++i) {
    std::string piece = (*joint)->Piece(i), quoted;
    for (char ch : piece) {
      if (ch == '"' || ch == '\\') quoted.push_back('\\');
      quoted.push_back(ch);
    }
    ids += (i ? ", \"" : "\"") + quoted + "\": " + std::to_string(i);
  }
  ids += "}";
  Write("vocab.json", ids);
  fs::copy_file(Path("spm.model"), Path("source.spm"));
  fs::copy_file(Path("spm.model"), Path("target.spm"));
  fs::remove(Path("spm.model"));
  std::string cfg = Read("config.json");
  cfg.replace(cfg.find("\"format_version\": 1"), 19, "\"format_version\": 2");
  cfg.insert(cfg.find("\"d_model\""),
             "\"vocabulary\": {\"source_spm\": \"source.spm\", \"target_spm\": \"target.spm\", \"ids\": \"vocab.json\"}, ");
  Write("config.json", cfg);
  auto m = LoadModelDirectory(dir_.string());
  ASSERT_TRUE(m.ok()) << m.status();
  const Tokenizer& t = *(*m)->tokenizer;
  EXPECT_TRUE(t.separate());
  for (const char* text : {"a man rides a bike .", "zebras", "", ">>de<< two dogs"}) {
    auto a = t.Encode(text);
    ASSERT_TRUE(a.ok()) << a.status();
    std::string rest = text;
    std::vector<int32_t> want;
    if (rest.rfind(">>", 0) == 0) {
      want.push_back(t.unk_id());  // a language code the vocabulary lacks is <unk>
      rest = rest.substr(rest.find("<<") + 2);
    }
    auto b = (*joint)->Encode(rest);
    ASSERT_TRUE(b.ok());
    want.insert(want.end(), b->begin(), b->end());
    EXPECT_EQ(*a, want) << text;
    if (rest == text) {
      auto back = t.Decode(*a);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, *(*joint)->Decode(*b));
    }
  }
  EXPECT_FALSE(t.Encode("\xff").ok());

  // A piece that the id map has and target.spm lacks (OPUS-MT's vocab.json also holds the
  // source side's pieces) reads as a word after a space, as MarianTokenizer.decode gives it,
  // not with a literal U+2581.
  Write("vocab.json", ids.substr(0, ids.size() - 1) + ", \"\xe2\x96\x81zqxstand\": " +
                          std::to_string((*joint)->vocab_size()) + "}");
  auto extra = Tokenizer::LoadSeparate(Path("source.spm"), Path("target.spm"), Path("vocab.json"));
  ASSERT_TRUE(extra.ok()) << extra.status();
  auto mit = (*joint)->Encode("a man");
  ASSERT_TRUE(mit.ok());
  std::vector<int32_t> with_extra = *mit;
  with_extra.push_back((*joint)->vocab_size());
  auto decoded = (*extra)->Decode(with_extra);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, *(*joint)->Decode(*mit) + " zqxstand");
  auto alone = (*extra)->Decode({(*joint)->vocab_size()});
  ASSERT_TRUE(alone.ok());
  EXPECT_EQ(*alone, "zqxstand");
  Write("vocab.json", ids);

  // Broken id maps: each error names vocab.json and the problem.
  Write("vocab.json", "{\"</s>\": 0, \"<unk>\": 0}");
  ExpectError({"vocab.json", "more than one piece"});
  Write("vocab.json", "{\"</s>\": 0, \"x\": 1}");
  ExpectError({"vocab.json", "has no \"<unk>\""});
  Write("vocab.json", "{\"</s>\": 0, \"<unk>\": 7}");
  ExpectError({"vocab.json", "outside [0, 2)"});
  Write("vocab.json", "[]");
  ExpectError({"vocab.json", "JSON object"});
  fs::remove(Path("vocab.json"));
  ExpectError({"vocab.json", "no such file"});
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
