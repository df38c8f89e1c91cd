// EnsembleStepModel: every step against the members' own distributions combined by a naive
// loop (same float operations, so the candidates are compared exactly), through joins,
// reorders and releases; decoding with an ensemble is batch invariant; members are checked
// for a shared vocabulary, and the ensemble's limits are the smallest member's.
#include "engine/decode/ensemble_step_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <gtest/gtest.h>

#include "engine/core/status_macros.h"
#include "engine/decode/beam_search.h"
#include "engine/runtime/loaded_model.h"
#include "engine/runtime/translator.h"

namespace tnmt {
namespace {

class EnsembleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto a = LoadModelDirectory("tests/golden/data/tiny");
    auto b = LoadModelDirectory("tests/golden/data/tiny_prenorm");
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = *a;
    b_ = *b;
    ASSERT_TRUE(CheckEnsembleMembers(*a_, *b_).ok());
    std::mt19937 rng(5);
    std::uniform_int_distribution<int> tok(4, a_->config.vocab_size - 1);
    for (int len : {6, 1, 13, 4, 9}) {
      std::vector<int32_t> s;
      for (int i = 0; i < len; ++i) s.push_back(tok(rng));
      s.push_back(a_->config.eos_id);
      sources_.push_back(s);
    }
  }

  absl::StatusOr<std::unique_ptr<StepModel>> Member(const LoadedModel& m) {
    return m.backend->NewStepModel();
  }

  absl::StatusOr<std::unique_ptr<EnsembleStepModel>> Ensemble() {
    std::vector<std::unique_ptr<StepModel>> members;
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> a, Member(*a_));
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> b, Member(*b_));
    members.push_back(std::move(a));
    members.push_back(std::move(b));
    const ModelConfig& c = a_->config;
    return EnsembleStepModel::Create(std::move(members), c.vocab_size, c.pad_id, c.eos_id);
  }

  // Pads `sources` into one [batch, longest] block and adds it to `m`.
  static absl::StatusOr<std::vector<int32_t>> Add(StepModel* m, const std::vector<std::vector<int32_t>>& sources,
                                                  int pad) {
    size_t longest = 0;
    for (const auto& s : sources) longest = std::max(longest, s.size());
    std::vector<int32_t> ids(sources.size() * longest, pad), lengths;
    for (size_t b = 0; b < sources.size(); ++b) {
      std::copy(sources[b].begin(), sources[b].end(), ids.begin() + b * longest);
      lengths.push_back(static_cast<int32_t>(sources[b].size()));
    }
    return m->AddSources(ids.data(), lengths.data(), static_cast<int>(sources.size()), static_cast<int>(longest));
  }

  std::shared_ptr<const LoadedModel> a_, b_;
  std::vector<std::vector<int32_t>> sources_;
};

TEST_F(EnsembleTest, EachStepIsTheMembersGeometricMean) {
  auto e = Ensemble();
  ASSERT_TRUE(e.ok()) << e.status();
  auto ra = Member(*a_);
  auto rb = Member(*b_);
  ASSERT_TRUE(ra.ok() && rb.ok());
  StepModel* models[3] = {e->get(), ra->get(), rb->get()};
  const ModelConfig& c = a_->config;
  const int V = c.vocab_size;
  // Three sources now, two more joining after two steps; rows follow beam-like reorders.
  std::vector<std::vector<int32_t>> first(sources_.begin(), sources_.begin() + 3);
  std::vector<std::vector<int32_t>> later(sources_.begin() + 3, sources_.end());
  std::vector<int32_t> src[3], src_later[3];
  for (int m = 0; m < 3; ++m) {
    auto s = Add(models[m], first, c.pad_id);
    ASSERT_TRUE(s.ok()) << s.status();
    src[m] = *s;
    ASSERT_TRUE(models[m]->Reorder({}, src[m]).ok());
  }
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> tok(4, V - 1);
  const int k = 7;
  for (int step = 0; step < 6; ++step) {
    const int rows = models[0]->rows();
    for (int m = 1; m < 3; ++m) ASSERT_EQ(models[m]->rows(), rows);
    std::vector<int32_t> ids(rows);
    for (int32_t& id : ids) id = step == 0 ? c.start_id() : tok(rng);
    StepScores s;
    s.gather_offsets.assign(rows + 1, 0);
    for (int r = 0; r < rows; ++r) {  // two gathered tokens per row, one of them </s>
      s.gather_ids.push_back(c.eos_id);
      s.gather_ids.push_back(ids[r]);
      s.gather_offsets[r + 1] = 2 * (r + 1);
    }
    s.want_logprobs = true;
    ASSERT_TRUE(models[0]->Step(ids.data(), k, &s).ok());
    StepScores ma, mb;
    ma.want_logprobs = mb.want_logprobs = true;
    ASSERT_TRUE(models[1]->Step(ids.data(), 1, &ma).ok());
    ASSERT_TRUE(models[2]->Step(ids.data(), 1, &mb).ok());
    for (int r = 0; r < rows; ++r) {
      std::vector<float> mean(V);
      double sum = 0;
      for (int v = 0; v < V; ++v) {
        mean[v] = (ma.logprobs[r * V + v] + mb.logprobs[r * V + v]) * 0.5f;
        sum += std::exp(static_cast<double>(mean[v]));
      }
      EXPECT_NEAR(s.lse[r], std::log(sum), 1e-5) << "row " << r;
      EXPECT_EQ(s.eos_logit[r], mean[c.eos_id]);
      EXPECT_EQ(s.gather_logit[2 * r], mean[c.eos_id]);
      EXPECT_EQ(s.gather_logit[2 * r + 1], mean[ids[r]]);
      std::vector<int32_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      order.erase(order.begin() + c.pad_id);
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return mean[x] > mean[y]; });
      for (int i = 0; i < k; ++i) {
        EXPECT_EQ(s.top_id[r * k + i], order[i]) << "row " << r << " candidate " << i;
        EXPECT_EQ(s.top_logit[r * k + i], mean[order[i]]);
      }
      // The ensemble's own distribution, as an outer ensemble would read it.
      double total = 0;
      for (int v = 0; v < V; ++v) total += std::exp(static_cast<double>(s.logprobs[r * V + v]));
      EXPECT_NEAR(total, 1.0, 1e-4);
    }
    // Beam-like reorder: row r follows row (r * 7 + step) % rows, from step 3 without the
    // rows that would follow row 0; new sources join at step 2.
    std::vector<int32_t> parents;
    for (int r = 0; r < rows; ++r) {
      const int p = (r * 7 + step) % rows;
      if (step >= 3 && p == 0) continue;
      parents.push_back(p);
    }
    for (int m = 0; m < 3; ++m) {
      std::vector<int32_t> joining;
      if (step == 2) {
        auto s2 = Add(models[m], later, c.pad_id);
        ASSERT_TRUE(s2.ok()) << s2.status();
        src_later[m] = *s2;
        joining = src_later[m];
      }
      ASSERT_TRUE(models[m]->Reorder(parents, joining).ok());
    }
  }
  for (int m = 0; m < 3; ++m) {
    ASSERT_TRUE(models[m]->Reorder({}, {}).ok());
    for (int32_t id : src[m]) EXPECT_TRUE(models[m]->ReleaseSource(id).ok());
    for (int32_t id : src_later[m]) EXPECT_TRUE(models[m]->ReleaseSource(id).ok());
  }
  EXPECT_FALSE((*e)->ReleaseSource(src_later[0][0]).ok()) << "released twice";
}

TEST_F(EnsembleTest, DecodingIsBatchInvariant) {
  DecodeOptions o;
  o.beam_size = 4;
  o.n_best = 2;
  o.max_length_offset = 12;
  auto run = [&](const std::vector<std::vector<int32_t>>& s) -> absl::StatusOr<std::vector<DecodeResult>> {
    TNMT_ASSIGN_OR_RETURN(std::unique_ptr<EnsembleStepModel> e, Ensemble());
    BeamDecoder d = BeamDecoder::Create(a_->config, std::move(e));
    return Decode(d, s, o);
  };
  auto all = run(sources_);
  ASSERT_TRUE(all.ok()) << all.status();
  for (size_t i = 0; i < sources_.size(); ++i) {
    auto one = run({sources_[i]});
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_EQ((*one)[0].hypotheses.size(), (*all)[i].hypotheses.size());
    for (size_t h = 0; h < (*one)[0].hypotheses.size(); ++h) {
      EXPECT_EQ((*one)[0].hypotheses[h].ids, (*all)[i].hypotheses[h].ids) << "sentence " << i;
      EXPECT_EQ((*one)[0].hypotheses[h].score, (*all)[i].hypotheses[h].score) << "sentence " << i;
    }
  }
}

TEST_F(EnsembleTest, MembersMustShareTheVocabulary) {
  auto demo = LoadModelDirectory("models/demo");
  ASSERT_TRUE(demo.ok()) << demo.status();
  const absl::Status s = CheckEnsembleMembers(*a_, **demo);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("8000 and 256 tokens"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("models/demo"), std::string::npos) << s.message();
  auto loaded = LoadEnsembleMembers(*a_, {"tests/golden/data/tiny_prenorm", "models/demo"}, Placement{});
  EXPECT_FALSE(loaded.ok());
  auto missing = LoadEnsembleMembers(*a_, {"no/such/model"}, Placement{});
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no/such/model"), std::string::npos) << missing.status().message();
}

TEST_F(EnsembleTest, TranslatorUsesTheSmallestMembersLimits) {
  // tiny reads 1024 positions, tiny_prenorm (learned positions) 128.
  Translator t(a_, {b_});
  TranslationOptions o;
  o.decode.beam_size = 2;
  o.decode.max_length_offset = 10;
  std::string long_line;
  for (int i = 0; i < 300; ++i) long_line += "a b ";
  auto out = t.Translate({"hello world", long_line}, o);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE((*out)[0].ok()) << (*out)[0].status();
  EXPECT_FALSE((*out)[0]->hypotheses.empty());
  ASSERT_FALSE((*out)[1].ok());
  EXPECT_NE((*out)[1].status().message().find("maximum input length 128"), std::string::npos)
      << (*out)[1].status().message();
  // Forced decoding through the ensemble: a pair's score is the sum of its token scores.
  auto scored = t.Score({"hello world"}, {"hallo welt"}, o);
  ASSERT_TRUE(scored.ok()) << scored.status();
  ASSERT_TRUE((*scored)[0].ok()) << (*scored)[0].status();
  EXPECT_LT((*scored)[0]->score, 0.0f);
}

}  // namespace
}  // namespace tnmt
