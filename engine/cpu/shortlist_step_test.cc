// Decoding with a vocabulary shortlist on the CPU (shortlist_projection.h) on the tiny fixture
// model: a table covering the whole vocabulary gives the full projection's outputs and scores
// bit for bit (greedy and beam, float32 and int8); a small table restricts every step's top-k to
// its candidate set, with logits equal to the full projection's at those ids, the normalizer
// over the set, and gathered logits outside the set computed apart; the option is off by default
// and refused for a model without a table; a table too small for the search is an error.
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <set>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_step_model.h"
#include "engine/decode/beam_search.h"
#include "engine/model/shortlist.h"
#include "engine/runtime/loaded_model.h"
#include "gtest/gtest.h"

namespace tnmt {
namespace {

class ShortlistStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModelDirectory("tests/golden/data/tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    const ModelConfig& c = model_->config;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> tok(4, c.vocab_size - 1);
    for (int len : {2, 7, 4, 12, 9, 5}) {
      std::vector<int32_t> s;
      for (int i = 0; i < len - 1; ++i) s.push_back(tok(rng));
      s.push_back(c.eos_id);
      sources_.push_back(s);
    }
  }

  // Every id but pad allowed always.
  std::shared_ptr<const Shortlist> WholeVocabulary() const {
    Shortlist s = Shortlist::Empty(model_->config.vocab_size);
    for (int i = 0; i < s.vocab_size; ++i) {
      if (i != model_->config.pad_id) s.frequent.push_back(i);
    }
    return std::make_shared<const Shortlist>(std::move(s));
  }

  // Frequent: 8 ids; each source piece p: targets (p * 7 + j) % V, j < 3.
  std::shared_ptr<const Shortlist> Small() const {
    const int V = model_->config.vocab_size;
    Shortlist s = Shortlist::Empty(V);
    s.frequent = {5, 6, 7, 8, 9, 10, 11, 12};
    for (int p = 0; p < V; ++p) {
      EXPECT_TRUE(s.SetTargets(p, {(p * 7) % V, (p * 7 + 1) % V, (p * 7 + 2) % V}).ok());
    }
    return std::make_shared<const Shortlist>(std::move(s));
  }

  std::vector<DecodeResult> Decode(const DecodeBackend& backend, const DecodeOptions& o) {
    auto step = backend.NewStepModel();
    EXPECT_TRUE(step.ok());
    BeamDecoder decoder = BeamDecoder::Create(model_->config, *std::move(step));
    auto r = tnmt::Decode(decoder, sources_, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<DecodeResult>();
  }

  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::vector<int32_t>> sources_;
};

void ExpectSame(const std::vector<DecodeResult>& a, const std::vector<DecodeResult>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].hypotheses.size(), b[i].hypotheses.size()) << i;
    for (size_t h = 0; h < a[i].hypotheses.size(); ++h) {
      EXPECT_EQ(a[i].hypotheses[h].ids, b[i].hypotheses[h].ids) << i << " " << h;
      EXPECT_EQ(a[i].hypotheses[h].score, b[i].hypotheses[h].score) << i << " " << h;
      EXPECT_EQ(a[i].hypotheses[h].token_scores, b[i].hypotheses[h].token_scores) << i << " " << h;
    }
  }
}

TEST_F(ShortlistStepTest, OffByDefault) { EXPECT_FALSE(DecodeOptions().use_shortlist); }

TEST_F(ShortlistStepTest, WholeVocabularyGivesTheFullProjectionExactly) {
  const auto plain = MakeCpuBackend(model_->config, model_->weights, "cpu");
  const auto listed = MakeCpuBackend(model_->config, model_->weights, "cpu", WholeVocabulary());
  for (int beam : {1, 4}) {
    DecodeOptions o;
    o.beam_size = beam;
    o.n_best = beam;
    o.max_length_offset = 10;
    o.return_token_scores = true;
    const std::vector<DecodeResult> want = Decode(*plain, o);
    ExpectSame(Decode(*listed, o), want);  // the table loaded, the option off
    o.use_shortlist = true;
    ExpectSame(Decode(*listed, o), want);
  }
}

TEST_F(ShortlistStepTest, WholeVocabularyInt8) {
  auto m = LoadModelDirectory("tests/golden/data/tiny", *Placement::Parse("cpu", "", "int8"));
  ASSERT_TRUE(m.ok()) << m.status();
  const auto plain = MakeCpuBackend((*m)->config, (*m)->weights, "cpu int8");
  const auto listed = MakeCpuBackend((*m)->config, (*m)->weights, "cpu int8", WholeVocabulary());
  DecodeOptions o;
  o.max_length_offset = 10;
  const std::vector<DecodeResult> want = Decode(*plain, o);
  o.use_shortlist = true;
  ExpectSame(Decode(*listed, o), want);
}

TEST_F(ShortlistStepTest, SmallTableRestrictsEveryStep) {
  const ModelConfig& c = model_->config;
  const int V = c.vocab_size;
  const std::shared_ptr<const Shortlist> table = Small();
  auto full = CpuStepModel::Create(c, model_->weights);
  auto listed = CpuStepModel::Create(c, model_->weights, table.get());
  ASSERT_TRUE(full.ok() && listed.ok());
  const int batch = static_cast<int>(sources_.size());
  int src_max = 0;
  for (const auto& s : sources_) src_max = std::max<int>(src_max, s.size());
  std::vector<int32_t> ids(static_cast<size_t>(batch) * src_max, c.pad_id), lengths;
  std::vector<int32_t> all_pieces;
  for (int b = 0; b < batch; ++b) {
    std::copy(sources_[b].begin(), sources_[b].end(), ids.begin() + static_cast<size_t>(b) * src_max);
    lengths.push_back(static_cast<int32_t>(sources_[b].size()));
    all_pieces.insert(all_pieces.end(), sources_[b].begin(), sources_[b].end());
  }
  std::vector<uint8_t> mark;
  const std::vector<int32_t> cands = table->Candidates(all_pieces, c.eos_id, c.unk_id, c.pad_id, &mark);
  const std::set<int32_t> allowed(cands.begin(), cands.end());
  ASSERT_LT(cands.size(), static_cast<size_t>(V / 2));
  for (CpuStepModel* m : {full->get(), listed->get()}) {
    auto handles = m->AddSources(ids.data(), lengths.data(), batch, src_max);
    ASSERT_TRUE(handles.ok());
    ASSERT_TRUE(m->Reorder({}, *handles).ok());
  }
  const int k = 6;
  std::vector<int32_t> step_ids(batch, c.start_id());
  for (int t = 0; t < 4; ++t) {
    StepScores whole, part;
    whole.want_logprobs = true;  // every logit, as logprob + lse
    part.use_shortlist = true;
    part.want_logprobs = true;
    // Gather one candidate and one token outside the set per row.
    int32_t outside = 0;
    while (allowed.count(outside) || outside == c.pad_id) ++outside;
    for (StepScores* s : {&whole, &part}) {
      s->gather_offsets.push_back(0);
      for (int r = 0; r < batch; ++r) {
        s->gather_ids.push_back(cands[r % cands.size()]);
        s->gather_ids.push_back(outside);
        s->gather_offsets.push_back(static_cast<int32_t>(s->gather_ids.size()));
      }
    }
    ASSERT_TRUE((*full)->Step(step_ids.data(), k, &whole).ok());
    ASSERT_TRUE((*listed)->Step(step_ids.data(), k, &part).ok());
    for (int r = 0; r < batch; ++r) {
      auto logit = [&](int32_t id) { return whole.logprobs[static_cast<size_t>(r) * V + id] + whole.lse[r]; };
      double sum = std::exp(static_cast<double>(logit(c.pad_id)) - part.lse[r]);
      for (int32_t id : cands) sum += std::exp(static_cast<double>(logit(id)) - part.lse[r]);
      EXPECT_NEAR(sum, 1.0, 1e-4) << "lse over the candidates and pad, row " << r;
      EXPECT_NEAR(part.eos_logit[r], whole.eos_logit[r], 1e-4);
      for (int i = 0; i < k; ++i) {
        const int32_t id = part.top_id[r * k + i];
        EXPECT_TRUE(allowed.count(id)) << "step " << t << " row " << r << " id " << id;
        EXPECT_NEAR(part.top_logit[r * k + i], logit(id), 1e-4);
        if (i > 0) EXPECT_GE(part.top_logit[r * k + i - 1], part.top_logit[r * k + i]);
      }
      for (int g = 2 * r; g < 2 * r + 2; ++g) EXPECT_NEAR(part.gather_logit[g], whole.gather_logit[g], 1e-4);
      EXPECT_EQ(part.logprobs[static_cast<size_t>(r) * V + outside], -std::numeric_limits<float>::infinity());
      step_ids[r] = part.top_id[r * k];
    }
  }
}

TEST_F(ShortlistStepTest, DecodesWithinTheSet) {
  const ModelConfig& c = model_->config;
  const std::shared_ptr<const Shortlist> table = Small();
  const auto listed = MakeCpuBackend(c, model_->weights, "cpu", table);
  DecodeOptions o;
  o.max_length_offset = 10;
  o.use_shortlist = true;
  const std::vector<DecodeResult> r = Decode(*listed, o);
  std::vector<uint8_t> mark;
  std::vector<int32_t> pieces;
  for (const auto& s : sources_) pieces.insert(pieces.end(), s.begin(), s.end());
  const std::vector<int32_t> cands = table->Candidates(pieces, c.eos_id, c.unk_id, c.pad_id, &mark);
  const std::set<int32_t> allowed(cands.begin(), cands.end());
  for (const DecodeResult& d : r) {
    for (int32_t id : d.hypotheses[0].ids) EXPECT_TRUE(allowed.count(id)) << id;
  }
}

TEST_F(ShortlistStepTest, Refusals) {
  const ModelConfig& c = model_->config;
  DecodeOptions o;
  o.use_shortlist = true;
  const auto plain = MakeCpuBackend(c, model_->weights, "cpu");
  auto step = plain->NewStepModel();
  ASSERT_TRUE(step.ok());
  BeamDecoder decoder = BeamDecoder::Create(c, *std::move(step));
  absl::StatusOr<std::vector<int64_t>> added = decoder.Add(sources_, o);
  ASSERT_FALSE(added.ok());
  EXPECT_NE(std::string(added.status().message()).find("use_shortlist: the model has no vocabulary shortlist"),
            std::string::npos)
      << added.status();
  // Two candidate tokens (</s>, <unk>) cannot feed beam 4's 9 candidates per row.
  const auto tiny = MakeCpuBackend(c, model_->weights, "cpu", std::make_shared<const Shortlist>(Shortlist::Empty(c.vocab_size)));
  auto step2 = tiny->NewStepModel();
  ASSERT_TRUE(step2.ok());
  BeamDecoder small = BeamDecoder::Create(c, *std::move(step2));
  absl::StatusOr<std::vector<DecodeResult>> r = tnmt::Decode(small, sources_, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("candidate tokens for this batch"), std::string::npos) << r.status();
}

TEST_F(ShortlistStepTest, LoadRefusesAWrongVocabulary) {
  const std::string path = ::testing::TempDir() + "/wrong.txt";
  ASSERT_TRUE(WriteShortlist(path, Shortlist::Empty(model_->config.vocab_size + 1)).ok());
  auto m = LoadModelDirectory("tests/golden/data/tiny", {}, path);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(std::string(m.status().message()).find("but the model has"), std::string::npos) << m.status();
  ASSERT_TRUE(WriteShortlist(path, *WholeVocabulary()).ok());
  m = LoadModelDirectory("tests/golden/data/tiny", {}, path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_NE((*m)->shortlist, nullptr);
}

}  // namespace
}  // namespace tnmt
