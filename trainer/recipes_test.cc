// Every shipped recipe (models/recipes/*.json) is a valid `tnmt train` config, and the paper
// recipes say what the paper says (model sizes, dropout, warmup, steps).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "trainer/train_config.h"

namespace tnmt::train {
namespace {

TrainConfig Load(const std::string& name) {
  const std::string path = "models/recipes/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream ss;
  ss << in.rdbuf();
  auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << path << " is not JSON";
  auto cfg = TrainConfig::FromJson(j, path);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  return cfg.ok() ? *cfg : TrainConfig{};
}

TEST(RecipesTest, PaperBase) {
  TrainConfig c = Load("transformer-base-wmt14.json");
  EXPECT_EQ(c.model.d_model, 512);
  EXPECT_EQ(c.model.d_ff, 2048);
  EXPECT_EQ(c.model.num_heads, 8);
  EXPECT_EQ(c.model.encoder_layers, 6);
  EXPECT_EQ(c.model.decoder_layers, 6);
  EXPECT_FALSE(c.model.normalize_before);
  EXPECT_FLOAT_EQ(c.dropout, 0.1f);
  EXPECT_FLOAT_EQ(c.model.label_smoothing, 0.1f);
  EXPECT_EQ(c.warmup_steps, 4000);
  EXPECT_EQ(c.max_steps, 100000);
}

TEST(RecipesTest, PaperBig) {
  TrainConfig c = Load("transformer-big-wmt14.json");
  EXPECT_EQ(c.model.d_model, 1024);
  EXPECT_EQ(c.model.d_ff, 4096);
  EXPECT_EQ(c.model.num_heads, 16);
  EXPECT_FLOAT_EQ(c.dropout, 0.3f);
  EXPECT_EQ(c.max_steps, 300000);
}

TEST(RecipesTest, Multi30kSmall) {
  TrainConfig c = Load("multi30k-small.json");
  EXPECT_EQ(c.model.d_model, 256);
  EXPECT_EQ(c.vocab_size, 8000);
}

TEST(RecipesTest, Multi30kContinueTrainsTheDemoModelFurther) {
  TrainConfig c = Load("multi30k-continue.json");
  TrainConfig wide = Load("multi30k-wide.json");
  EXPECT_EQ(c.init_model, "models/demo");
  EXPECT_TRUE(c.spm_model.empty());  // the init model's vocabulary
  EXPECT_TRUE(CheckResumable(wide.model, c.model).ok()) << CheckResumable(wide.model, c.model);
  EXPECT_NE(c.seed, wide.seed);  // another data order than the first stage
  EXPECT_LT(c.lr_scale, wide.lr_scale);
}

// The recipe that continues the bundled model starts from it as it is now: the same
// architecture and vocabulary (a new demo model of another shape needs its own recipe).
TEST(RecipesTest, ContinueRecipeMatchesTheBundledModel) {
  TrainConfig c = Load("multi30k-continue.json");
  auto demo = ModelConfig::Load(c.init_model + "/config.json");
  ASSERT_TRUE(demo.ok()) << demo.status();
  EXPECT_TRUE(CheckResumable(*demo, c.model).ok()) << CheckResumable(*demo, c.model);
}

TEST(RecipesTest, Multi30kSmallRegularizedIsTheSmallModelWithMoreRegularization) {
  TrainConfig c = Load("multi30k-small-regularized.json");
  TrainConfig base = Load("multi30k-small.json");
  EXPECT_TRUE(CheckResumable(base.model, c.model).ok()) << CheckResumable(base.model, c.model);
  EXPECT_GT(c.attention_dropout, 0.0f);
  EXPECT_GT(c.activation_dropout, 0.0f);
  EXPECT_GT(c.subword_nbest, 1);
  EXPECT_EQ(c.valid_max_sentences, 0);  // dev BLEU on the whole dev set
}

TEST(RecipesTest, Multi30kWideIsTheRegularizedRecipeWider) {
  TrainConfig c = Load("multi30k-wide.json");
  TrainConfig reg = Load("multi30k-small-regularized.json");
  EXPECT_EQ(c.model.d_model, 320);
  EXPECT_EQ(c.model.d_ff, 1280);
  EXPECT_EQ(c.model.num_heads, 5);
  EXPECT_EQ(c.model.encoder_layers, reg.model.encoder_layers);
  EXPECT_EQ(c.model.decoder_layers, reg.model.decoder_layers);
  EXPECT_FLOAT_EQ(c.dropout, reg.dropout);
  EXPECT_FLOAT_EQ(c.attention_dropout, reg.attention_dropout);
  EXPECT_FLOAT_EQ(c.activation_dropout, reg.activation_dropout);
  EXPECT_EQ(c.subword_nbest, reg.subword_nbest);
  EXPECT_EQ(c.spm_model, "models/demo/spm.model");  // the bundled model's vocabulary
  EXPECT_EQ(c.valid_max_sentences, 0);
}

TEST(RecipesTest, Multi30kTiny) {
  TrainConfig c = Load("multi30k-tiny.json");
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.d_ff, 256);
  EXPECT_EQ(c.model.encoder_layers, 4);
  EXPECT_EQ(c.model.decoder_layers, 4);
  EXPECT_EQ(c.valid_max_sentences, 0);  // dev BLEU on the whole dev set
}

// The distillation recipe fine-tunes the bundled model on an ensemble's translations of the
// training sources (docs/training.md): the bundled model's shape, references for dev.
TEST(RecipesTest, Multi30kDistillFineTunesTheBundledModelOnDistilledTargets) {
  TrainConfig c = Load("multi30k-distill.json");
  TrainConfig wide = Load("multi30k-wide.json");
  EXPECT_EQ(c.init_model, "models/demo");
  EXPECT_TRUE(c.spm_model.empty());
  auto demo = ModelConfig::Load(c.init_model + "/config.json");
  ASSERT_TRUE(demo.ok()) << demo.status();
  EXPECT_TRUE(CheckResumable(*demo, c.model).ok()) << CheckResumable(*demo, c.model);
  EXPECT_EQ(c.train_source, wide.train_source);
  EXPECT_EQ(c.train_target, "data/multi30k/train.distilled.de.gz");
  EXPECT_EQ(c.valid_target, wide.valid_target);
  EXPECT_LT(c.lr_scale, wide.lr_scale);
}

TEST(RecipesTest, Multi30kRecipesReadDataFromTheRepository) {
  // No machine paths: data under data/multi30k (tools/get-multi30k.sh), runs under runs/.
  for (const char* name : {"multi30k-small.json", "multi30k-continue.json", "multi30k-distill.json",
                           "multi30k-small-regularized.json", "multi30k-wide.json", "multi30k-tiny.json"}) {
    TrainConfig c = Load(name);
    EXPECT_EQ(c.train_source.rfind("data/multi30k/", 0), 0u) << name << ": " << c.train_source;
    EXPECT_EQ(c.valid_target.rfind("data/multi30k/", 0), 0u) << name << ": " << c.valid_target;
    EXPECT_EQ(c.save_dir.rfind("runs/", 0), 0u) << name << ": " << c.save_dir;
  }
}

}  // namespace
}  // namespace tnmt::train
