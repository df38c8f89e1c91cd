// Forced decoding (score.h) against the decoder's own scores: scoring the greedy output gives
// the greedy score, scoring a beam hypothesis gives its normalized score times the length
// penalty; a pair's score does not depend on what else is in its batch; bad input is refused.
#include "engine/decode/score.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "engine/decode/beam_search.h"
#include "engine/cpu/cpu_step_model.h"
#include "engine/runtime/loaded_model.h"

namespace tnmt {
namespace {

class ScoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModelDirectory("tests/golden/data/tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> tok(4, model_->config.vocab_size - 1);
    for (int len : {1, 6, 3, 14, 9}) {
      std::vector<int32_t> s;
      for (int i = 0; i < len - 1; ++i) s.push_back(tok(rng));
      s.push_back(model_->config.eos_id);
      sources_.push_back(s);
    }
  }
  std::vector<DecodeResult> Decode(const DecodeOptions& o) {
    auto decoder = NewBeamDecoder(*model_);
    EXPECT_TRUE(decoder.ok());
    auto r = tnmt::Decode(*decoder, sources_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }
  std::vector<PairScore> Score(const std::vector<std::vector<int32_t>>& s,
                               const std::vector<std::vector<int32_t>>& t) {
    auto step = CpuStepModel::Create(model_->config, model_->weights);
    EXPECT_TRUE(step.ok());
    auto r = ScoreBatch(model_->config, step->get(), s, t);
    EXPECT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*step)->rows(), 0);
    return r.ok() ? *r : std::vector<PairScore>();
  }
  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::vector<int32_t>> sources_;
};

TEST_F(ScoreTest, GreedyOutputScoresAsDecoded) {
  DecodeOptions o;
  o.beam_size = 1;
  o.max_length_offset = 8;  // some outputs stop at the limit with </s> forced: scored the same
  const std::vector<DecodeResult> greedy = Decode(o);
  std::vector<std::vector<int32_t>> targets;
  for (const DecodeResult& r : greedy) targets.push_back(r.hypotheses[0].ids);
  const std::vector<PairScore> scores = Score(sources_, targets);
  ASSERT_EQ(scores.size(), sources_.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    EXPECT_NEAR(scores[i].score, greedy[i].hypotheses[0].score, 1e-4) << i;
    ASSERT_EQ(scores[i].token_scores.size(), targets[i].size() + 1) << i;
    double sum = 0;
    for (float s : scores[i].token_scores) {
      EXPECT_LE(s, 0.0f);
      sum += s;
    }
    EXPECT_NEAR(sum, scores[i].score, 1e-4);
  }
}

TEST_F(ScoreTest, BeamHypothesesScoreAsNormalizedTimesPenalty) {
  DecodeOptions o;
  o.beam_size = 4;
  o.n_best = 4;
  o.length_penalty = 0.6f;
  const std::vector<DecodeResult> beams = Decode(o);
  std::vector<std::vector<int32_t>> s, t;
  std::vector<float> want;
  for (size_t i = 0; i < beams.size(); ++i) {
    for (const Hypothesis& h : beams[i].hypotheses) {
      s.push_back(sources_[i]);
      t.push_back(h.ids);
      const double n = h.ids.size() + 1;
      want.push_back(static_cast<float>(h.score * std::pow((5.0 + n) / 6.0, 0.6)));
    }
  }
  const std::vector<PairScore> scores = Score(s, t);
  ASSERT_EQ(scores.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(scores[i].score, want[i], 2e-4 * (1 + std::fabs(want[i]))) << i;
}

TEST_F(ScoreTest, PairScoreDoesNotDependOnItsBatch) {
  std::vector<std::vector<int32_t>> t = {{5, 6, 7}, {}, {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, {4}, {30, 31}};
  const std::vector<PairScore> all = Score(sources_, t);
  for (size_t i = 0; i < sources_.size(); ++i) {
    const std::vector<PairScore> one = Score({sources_[i]}, {t[i]});
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].score, all[i].score) << i;
    EXPECT_EQ(one[0].token_scores, all[i].token_scores) << i;
  }
}

TEST_F(ScoreTest, BadInputIsRefused) {
  auto step = CpuStepModel::Create(model_->config, model_->weights);
  ASSERT_TRUE(step.ok());
  const ModelConfig& c = model_->config;
  auto msg = [&](const std::vector<std::vector<int32_t>>& s, const std::vector<std::vector<int32_t>>& t) {
    auto r = ScoreBatch(c, step->get(), s, t);
    EXPECT_EQ((*step)->rows(), 0);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_NE(msg({{5, 6}}, {{7}}).find("does not end with eos_id"), std::string::npos);
  EXPECT_NE(msg({{5, c.eos_id}}, {{c.vocab_size}}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(msg({{5, c.eos_id}}, {}).find("1 sources but 0 targets"), std::string::npos);
  EXPECT_EQ(msg({{5, c.eos_id}}, {{7}}), "ok");  // the model is usable after the refusals
}

}  // namespace
}  // namespace tnmt
