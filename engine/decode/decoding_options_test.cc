// The decoding options (target prefix, min_length, no_repeat_ngram_size, repetition_penalty,
// disable_unk, sampling, token scores, alignments) against a brute-force reference: a beam
// search written from the option definitions in options.h over every token of the vocabulary
// at every step (a StepModel asked for all vocab - 1 candidates), one sentence at a time.
// The decoder under test works from a short candidate list per row, gathered logits and a
// batch of sentences with different lengths; both must give the same hypotheses.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "engine/core/status_macros.h"
#include "engine/decode/beam_search.h"
#include "engine/cpu/cpu_step_model.h"
#include "engine/layers/decoder.h"
#include "engine/layers/encoder.h"
#include "engine/runtime/loaded_model.h"
#include "kernels/counter_uniform.h"

namespace tnmt {
namespace {

struct RefHyp {
  int row = 0;
  double score = 0;
  std::vector<int32_t> ids;
  std::vector<float> token_scores;
  std::vector<int32_t> alignments;
};

struct RefCand {
  double score;
  int hyp;
  int32_t token;
  double lp;
};

bool RefBetter(const RefCand& a, const RefCand& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.hyp != b.hyp) return a.hyp < b.hyp;
  return a.token < b.token;
}

// True when appending `tok` to `ids` repeats an n-gram of ids (checked against every earlier
// n-gram, by brute force).
bool RepeatsNgram(const std::vector<int32_t>& ids, int32_t tok, int n) {
  if (n <= 0) return false;
  std::vector<int32_t> seq = ids;
  seq.push_back(tok);
  const int len = static_cast<int>(seq.size());
  if (len < n) return false;
  for (int i = 0; i + n <= len - 1; ++i) {
    if (std::equal(seq.begin() + i, seq.begin() + i + n, seq.end() - n)) return true;
  }
  return false;
}

// The reference: one sentence, every token considered at every step.
absl::StatusOr<DecodeResult> Reference(const LoadedModel& m, const DecodeInput& in, const DecodeOptions& o) {
  const ModelConfig& c = m.config;
  const int V = c.vocab_size;
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<CpuStepModel> model, CpuStepModel::Create(c, m.weights));
  const int32_t len = static_cast<int32_t>(in.source.size());
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> src, model->AddSources(in.source.data(), &len, 1, len));
  TNMT_RETURN_IF_ERROR(model->Reorder({}, src));
  const int max_len = o.max_length > 0 ? o.max_length : len + o.max_length_offset;
  const int K = o.beam_size;
  const int layer = o.alignment_layer >= 0 ? o.alignment_layer : c.decoder_layers - 1;
  std::vector<RefHyp> live(1);
  std::vector<RefHyp> finished;  // score holds the normalized score
  std::vector<double> finished_raw;
  std::vector<int32_t> step_ids = {c.start_id()};
  StepScores s;
  for (int t = 1;; ++t) {
    if (o.return_alignments) s.alignment_layers = {layer};
    TNMT_RETURN_IF_ERROR(model->Step(step_ids.data(), V - 1, &s));
    std::vector<RefCand> cands;
    for (int h = 0; h < static_cast<int>(live.size()); ++h) {
      const RefHyp& l = live[h];
      std::vector<double> logit(V, -INFINITY);
      for (int i = 0; i < s.k; ++i) logit[s.top_id[l.row * s.k + i]] = s.top_logit[l.row * s.k + i];
      const double lse = s.lse[l.row];
      if (t <= static_cast<int>(in.prefix.size())) {
        const int32_t tok = in.prefix[t - 1];
        cands.push_back({l.score + logit[tok] - lse, h, tok, logit[tok] - lse});
        continue;
      }
      for (int32_t v = 0; v < V; ++v) {
        if (v == c.pad_id) continue;
        if (t >= max_len && v != c.eos_id) continue;
        if (t < o.min_length && v == c.eos_id) continue;
        if (o.disable_unk && v == c.unk_id) continue;
        if (v != c.eos_id && RepeatsNgram(l.ids, v, o.no_repeat_ngram_size)) continue;
        double lp = logit[v] - lse;
        if (std::find(l.ids.begin(), l.ids.end(), v) != l.ids.end()) lp *= o.repetition_penalty;
        cands.push_back({l.score + lp, h, v, lp});
      }
    }
    std::sort(cands.begin(), cands.end(), RefBetter);
    if (o.sampling() && t > static_cast<int>(in.prefix.size())) {
      if (o.sampling_topk > 0 && static_cast<int>(cands.size()) > o.sampling_topk) cands.resize(o.sampling_topk);
      std::vector<double> w;
      for (const RefCand& cd : cands) w.push_back(std::exp((cd.lp - cands[0].lp) / o.sampling_temperature));
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      size_t keep = cands.size();
      double mass = 0;
      for (size_t i = 0; i < w.size() && o.sampling_topp < 1.0f; ++i) {
        mass += w[i];
        if (mass >= o.sampling_topp * total) {
          keep = i + 1;
          break;
        }
      }
      const double kept = std::accumulate(w.begin(), w.begin() + keep, 0.0);
      const double u = kernels::CounterUniform(o.seed, in.stream, static_cast<uint64_t>(t)) * kept;
      size_t pick = keep - 1;
      double cum = 0;
      for (size_t i = 0; i < keep; ++i) {
        cum += w[i];
        if (cum > u) {
          pick = i;
          break;
        }
      }
      cands = {cands[pick]};
    }
    if (K > 1 && static_cast<int>(cands.size()) > 2 * K) cands.resize(2 * K);
    std::vector<RefHyp> next;
    std::vector<int32_t> parents;
    for (const RefCand& cd : cands) {
      const RefHyp& p = live[cd.hyp];
      RefHyp hyp = p;
      hyp.score = cd.score;
      hyp.token_scores.push_back(static_cast<float>(cd.lp));
      if (cd.token == c.eos_id) {
        const double lp = K == 1 ? 1.0 : LengthPenalty(t, o.length_penalty, o.length_penalty_style);
        hyp.score = cd.score / lp;
        finished.push_back(hyp);
        finished_raw.push_back(cd.score);
      } else {
        hyp.ids.push_back(cd.token);
        if (o.return_alignments) hyp.alignments.push_back(s.aligned[p.row]);
        hyp.row = static_cast<int>(next.size());
        parents.push_back(p.row);
        next.push_back(hyp);
      }
      if (K == 1 || static_cast<int>(next.size()) == K) break;
    }
    bool stop = next.empty();
    if (!stop && K > 1 && static_cast<int>(finished.size()) >= K) {
      std::vector<double> norms;
      for (const RefHyp& f : finished) norms.push_back(f.score);
      std::sort(norms.begin(), norms.end(), std::greater<>());
      const int bound = o.length_penalty >= 0 ? max_len : t;
      stop = norms[K - 1] >= next[0].score / LengthPenalty(bound, o.length_penalty, o.length_penalty_style);
    }
    if (stop) break;
    TNMT_RETURN_IF_ERROR(model->Reorder(parents, {}));
    step_ids.clear();
    for (const RefHyp& h : next) step_ids.push_back(h.ids.back());
    live = std::move(next);
  }
  std::stable_sort(finished.begin(), finished.end(), [](const RefHyp& a, const RefHyp& b) { return a.score > b.score; });
  DecodeResult r;
  for (int i = 0; i < static_cast<int>(finished.size()) && i < o.n_best; ++i) {
    r.hypotheses.push_back({finished[i].ids, static_cast<float>(finished[i].score), finished[i].token_scores,
                            finished[i].alignments});
  }
  TNMT_RETURN_IF_ERROR(model->Reorder({}, {}));
  TNMT_RETURN_IF_ERROR(model->ReleaseSource(src[0]));
  return r;
}

// Beam size (and n-best) `beam`, outputs up to the source length + `offset`.
DecodeOptions Beam(int beam, int offset) {
  DecodeOptions o;
  o.beam_size = o.n_best = beam;
  o.max_length_offset = offset;
  return o;
}

class DecodingOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = LoadModelDirectory("tests/golden/data/tiny");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    std::mt19937 rng(23);
    std::uniform_int_distribution<int> tok(4, model_->config.vocab_size - 1);
    for (int len : {1, 7, 3, 18, 12, 2, 25, 9}) {
      DecodeInput in;
      for (int i = 0; i < len - 1; ++i) in.source.push_back(tok(rng));
      in.source.push_back(model_->config.eos_id);
      in.stream = inputs_.size() * 7 + 3;
      inputs_.push_back(in);
    }
  }

  absl::StatusOr<std::vector<DecodeResult>> Run(const std::vector<DecodeInput>& in, const DecodeOptions& o) {
    TNMT_ASSIGN_OR_RETURN(BeamDecoder decoder, NewBeamDecoder(*model_));
    return Decode(decoder, in, o);
  }

  // Decodes inputs_ in one batch and each alone with the reference; returns the batch results.
  std::vector<DecodeResult> ExpectAsReference(const DecodeOptions& o, const std::string& what) {
    auto got = Run(inputs_, o);
    EXPECT_TRUE(got.ok()) << what << ": " << got.status();
    if (!got.ok()) return {};
    for (size_t i = 0; i < inputs_.size(); ++i) {
      auto want = Reference(*model_, inputs_[i], o);
      EXPECT_TRUE(want.ok()) << want.status();
      if (!want.ok()) continue;
      const auto& a = (*got)[i].hypotheses;
      const auto& b = want->hypotheses;
      EXPECT_EQ(a.size(), b.size()) << what << " sentence " << i;
      for (size_t h = 0; h < std::min(a.size(), b.size()); ++h) {
        const std::string where = what + " sentence " + std::to_string(i) + " hypothesis " + std::to_string(h);
        EXPECT_EQ(a[h].ids, b[h].ids) << where;
        EXPECT_NEAR(a[h].score, b[h].score, 1e-5 * (1 + std::fabs(b[h].score))) << where;
        if (o.return_token_scores) {
          EXPECT_EQ(a[h].token_scores.size(), a[h].ids.size() + 1) << where;
          EXPECT_EQ(b[h].token_scores.size(), a[h].token_scores.size()) << where;
          for (size_t j = 0; j < std::min(a[h].token_scores.size(), b[h].token_scores.size()); ++j) {
            EXPECT_NEAR(a[h].token_scores[j], b[h].token_scores[j], 1e-5) << where << " token " << j;
          }
        } else {
          EXPECT_TRUE(a[h].token_scores.empty()) << where;
        }
        if (o.return_alignments) {
          EXPECT_EQ(a[h].alignments, b[h].alignments) << where;
          EXPECT_EQ(a[h].alignments.size(), a[h].ids.size()) << where;
        } else {
          EXPECT_TRUE(a[h].alignments.empty()) << where;
        }
      }
    }
    return *got;
  }

  std::shared_ptr<const LoadedModel> model_;
  std::vector<DecodeInput> inputs_;
  Workspace ws_;
};

// want_lse = false: the step leaves the normalizer at 0 and everything else as it was (the k
// best logits and their tokens, </s>'s logit, gathered logits), bit for bit; asked for the
// whole distributions as well, it computes the normalizer anyway.
TEST_F(DecodingOptionsTest, AStepWithoutTheNormalizerKeepsEveryOtherScore) {
  const ModelConfig& c = model_->config;
  std::vector<int32_t> ids, lengths;
  int src_max = 0;
  for (const DecodeInput& in : inputs_) src_max = std::max(src_max, static_cast<int>(in.source.size()));
  for (const DecodeInput& in : inputs_) {
    std::vector<int32_t> row = in.source;
    row.resize(src_max, c.pad_id);
    ids.insert(ids.end(), row.begin(), row.end());
    lengths.push_back(static_cast<int32_t>(in.source.size()));
  }
  const int batch = static_cast<int>(inputs_.size());
  std::vector<StepScores> got(3);
  for (int variant = 0; variant < 3; ++variant) {
    auto model = CpuStepModel::Create(c, model_->weights);
    ASSERT_TRUE(model.ok()) << model.status();
    auto src = (*model)->AddSources(ids.data(), lengths.data(), batch, src_max);
    ASSERT_TRUE(src.ok()) << src.status();
    ASSERT_TRUE((*model)->Reorder({}, *src).ok());
    std::vector<int32_t> step_ids(batch, c.start_id());
    StepScores& s = got[variant];
    s.want_lse = variant == 0;
    s.want_logprobs = variant == 2;
    s.gather_offsets.resize(batch + 1);
    for (int r = 0; r < batch; ++r) {
      s.gather_ids.push_back(5 + r);
      s.gather_offsets[r + 1] = r + 1;
    }
    for (int t = 0; t < 3; ++t) {
      ASSERT_TRUE((*model)->Step(step_ids.data(), 4, &s).ok());
      for (int r = 0; r < batch; ++r) step_ids[r] = s.top_id[r * 4];
      std::vector<int32_t> parents(batch);
      std::iota(parents.begin(), parents.end(), 0);
      ASSERT_TRUE((*model)->Reorder(parents, {}).ok());
    }
  }
  const StepScores &with = got[0], &without = got[1], &logprobs = got[2];
  ASSERT_EQ(without.top_id, with.top_id);
  EXPECT_EQ(0, std::memcmp(without.top_logit.data(), with.top_logit.data(), with.top_logit.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(without.eos_logit.data(), with.eos_logit.data(), with.eos_logit.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(without.gather_logit.data(), with.gather_logit.data(), with.gather_logit.size() * sizeof(float)));
  for (int r = 0; r < batch; ++r) {
    EXPECT_EQ(without.lse[r], 0.0f) << "row " << r;
    EXPECT_NE(with.lse[r], 0.0f) << "row " << r;
    EXPECT_EQ(logprobs.lse[r], with.lse[r]) << "row " << r;
  }
}

TEST_F(DecodingOptionsTest, DefaultsMatchTheReference) {
  for (int beam : {1, 4}) {
    DecodeOptions o = Beam(beam, 12);
    ExpectAsReference(o, "beam " + std::to_string(beam));
  }
}

TEST_F(DecodingOptionsTest, TargetPrefixIsForcedThenSearched) {
  const std::vector<int32_t> prefix = {17, 200, 17};
  for (DecodeInput& in : inputs_) in.prefix = prefix;
  inputs_[2].prefix.clear();  // sentences with and without a prefix in one batch
  for (int beam : {1, 4}) {
    DecodeOptions o = Beam(beam, 12);
    o.return_token_scores = true;
    const auto got = ExpectAsReference(o, "prefix beam " + std::to_string(beam));
    for (size_t i = 0; i < got.size(); ++i) {
      for (const Hypothesis& h : got[i].hypotheses) {
        ASSERT_GE(h.ids.size(), inputs_[i].prefix.size());
        EXPECT_TRUE(std::equal(inputs_[i].prefix.begin(), inputs_[i].prefix.end(), h.ids.begin())) << i;
      }
    }
  }
}

TEST_F(DecodingOptionsTest, MinLength) {
  DecodeOptions o;
  o.n_best = 4;
  o.min_length = 9;
  o.max_length_offset = 14;
  const auto got = ExpectAsReference(o, "min_length 9");
  for (const DecodeResult& r : got) {
    for (const Hypothesis& h : r.hypotheses) EXPECT_GE(h.ids.size() + 1, 9u);
  }
}

TEST_F(DecodingOptionsTest, NoRepeatNgram) {
  DecodeOptions base;
  base.max_length_offset = 20;
  base.min_length = 20;  // long outputs, so that a random model repeats itself
  auto plain = Run(inputs_, base);
  ASSERT_TRUE(plain.ok());
  auto repeats = [](const std::vector<int32_t>& ids, int n) {
    std::set<std::vector<int32_t>> seen;
    for (size_t i = 0; i + n <= ids.size(); ++i) {
      if (!seen.insert(std::vector<int32_t>(ids.begin() + i, ids.begin() + i + n)).second) return true;
    }
    return false;
  };
  for (int n : {1, 2, 3}) {
    bool any = false;
    for (const DecodeResult& r : *plain) any = any || repeats(r.hypotheses[0].ids, n);
    ASSERT_TRUE(any) << "the test needs outputs that repeat a " << n << "-gram without the option";
    for (int beam : {1, 4}) {
      DecodeOptions o = base;
      o.beam_size = o.n_best = beam;
      o.no_repeat_ngram_size = n;
      const auto got = ExpectAsReference(o, "no_repeat_ngram_size " + std::to_string(n) + " beam " + std::to_string(beam));
      for (const DecodeResult& r : got) {
        for (const Hypothesis& h : r.hypotheses) EXPECT_FALSE(repeats(h.ids, n)) << n;
      }
    }
  }
}

TEST_F(DecodingOptionsTest, RepetitionPenalty) {
  for (float penalty : {1.8f, 0.6f}) {
    for (int beam : {1, 4}) {
      DecodeOptions o = Beam(beam, 15);
      o.repetition_penalty = penalty;
      o.return_token_scores = true;
      ExpectAsReference(o, "repetition_penalty " + std::to_string(penalty) + " beam " + std::to_string(beam));
    }
  }
}

TEST_F(DecodingOptionsTest, DisableUnk) {
  // The tiny model rarely ranks <unk> high by itself: a prefix holding <unk> and a repetition
  // penalty below 1 (which raises the log-probability of tokens already in the output) make it
  // generate <unk> after the prefix, unless disable_unk forbids it.
  const ModelConfig& c = model_->config;
  for (DecodeInput& in : inputs_) in.prefix = {c.unk_id};
  auto unks_after_prefix = [&](const std::vector<DecodeResult>& results) {
    int n = 0;
    for (const DecodeResult& r : results) {
      for (const Hypothesis& h : r.hypotheses) n += std::count(h.ids.begin() + 1, h.ids.end(), c.unk_id);
    }
    return n;
  };
  for (int beam : {1, 4}) {
    DecodeOptions o = Beam(beam, 12);
    o.repetition_penalty = 0.05f;
    const auto plain = ExpectAsReference(o, "unk encouraged beam " + std::to_string(beam));
    ASSERT_GT(unks_after_prefix(plain), 0) << "the test needs outputs with <unk> without the option";
    o.disable_unk = true;
    const auto got = ExpectAsReference(o, "disable_unk beam " + std::to_string(beam));
    EXPECT_EQ(unks_after_prefix(got), 0);
  }
}

TEST_F(DecodingOptionsTest, SamplingIsReproducibleAndMatchesTheReference) {
  struct Case {
    int topk;
    float topp, temperature;
  };
  for (const Case& k : {Case{0, 1.0f, 1.0f}, Case{5, 1.0f, 0.7f}, Case{0, 0.9f, 1.5f}, Case{20, 0.5f, 1.0f}}) {
    DecodeOptions o;
    o.beam_size = 1;
    o.max_length_offset = 12;
    o.sampling_topk = k.topk;
    o.sampling_topp = k.topp;
    o.sampling_temperature = k.temperature;
    o.seed = 1234;
    o.return_token_scores = true;
    const std::string what = "sampling topk " + std::to_string(k.topk) + " topp " + std::to_string(k.topp) +
                             " temperature " + std::to_string(k.temperature);
    const auto first = ExpectAsReference(o, what);
    // Same seed and streams: the same outputs, alone or in a batch.
    auto again = Run(inputs_, o);
    ASSERT_TRUE(again.ok());
    auto alone = Run({inputs_[3]}, o);
    ASSERT_TRUE(alone.ok());
    for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ((*again)[i].hypotheses[0].ids, first[i].hypotheses[0].ids);
    EXPECT_EQ((*alone)[0].hypotheses[0].ids, first[3].hypotheses[0].ids);
    // Another seed draws other outputs (at least one of the sentences).
    o.seed = 99;
    auto other = Run(inputs_, o);
    ASSERT_TRUE(other.ok());
    int differ = 0;
    for (size_t i = 0; i < first.size(); ++i) differ += (*other)[i].hypotheses[0].ids != first[i].hypotheses[0].ids;
    EXPECT_GT(differ, 0) << what;
  }
  // Sampling differs from greedy search somewhere.
  DecodeOptions greedy;
  greedy.beam_size = 1;
  greedy.max_length_offset = 12;
  DecodeOptions sampled = greedy;
  sampled.sampling_topk = 0;
  sampled.seed = 7;
  auto g = Run(inputs_, greedy), s = Run(inputs_, sampled);
  ASSERT_TRUE(g.ok() && s.ok());
  int differ = 0;
  for (size_t i = 0; i < g->size(); ++i) differ += (*g)[i].hypotheses[0].ids != (*s)[i].hypotheses[0].ids;
  EXPECT_GT(differ, 0);
}

TEST_F(DecodingOptionsTest, TokenScoresSumToTheScore) {
  for (int beam : {1, 4}) {
    DecodeOptions o = Beam(beam, 10);
    o.return_token_scores = true;
    const auto got = ExpectAsReference(o, "token scores beam " + std::to_string(beam));
    for (const DecodeResult& r : got) {
      for (const Hypothesis& h : r.hypotheses) {
        double sum = 0;
        for (float x : h.token_scores) sum += x;
        const double lp = beam == 1 ? 1.0 : LengthPenalty(static_cast<int>(h.ids.size()) + 1, o.length_penalty);
        EXPECT_NEAR(sum / lp, h.score, 1e-4 * (1 + std::fabs(h.score)));
        for (float x : h.token_scores) EXPECT_LE(x, 0.0f);
      }
    }
  }
}

// Alignments: the decoder's equal the reference's (the same kernels on the same rows: batch
// invariance makes them bit-identical), and agree with a full recompute of each output in one
// decoder pass (all positions at once, causal mask), where the attention is computed in
// another order: near-equal attention weights may tip the other way there, so the agreement
// is counted rather than required token by token.
TEST_F(DecodingOptionsTest, AlignmentsMatchAFullRecompute) {
  const ModelConfig& c = model_->config;
  int agree = 0, total = 0;
  for (int layer : {-1, 0}) {
    DecodeOptions o;
    o.n_best = 2;
    o.max_length_offset = 10;
    o.return_alignments = true;
    o.alignment_layer = layer;
    const auto got = ExpectAsReference(o, "alignments layer " + std::to_string(layer));
    for (size_t i = 0; i < got.size(); ++i) {
      const std::vector<int32_t>& src = inputs_[i].source;
      const int32_t len = static_cast<int32_t>(src.size());
      auto enc = Encode(c, model_->weights, src.data(), &len, 1, len, &ws_);
      ASSERT_TRUE(enc.ok());
      for (const Hypothesis& h : got[i].hypotheses) {
        if (h.ids.empty()) continue;
        auto state = DecoderState::Create(c, model_->weights, *enc, &len, 1, MaxPositions(c));
        ASSERT_TRUE(state.ok()) << state.status();
        ASSERT_TRUE(state->Start({0}).ok());
        state->set_alignment_layers({layer >= 0 ? layer : c.decoder_layers - 1});
        std::vector<int32_t> in = {c.start_id()};
        in.insert(in.end(), h.ids.begin(), h.ids.end() - 1);
        ASSERT_TRUE(DecoderForward(c, model_->weights, &*state, in.data(), static_cast<int>(in.size()), nullptr, &ws_).ok());
        const std::vector<int32_t>& full = state->alignments()[0];
        ASSERT_EQ(full.size(), h.alignments.size());
        for (size_t j = 0; j < full.size(); ++j) {
          agree += full[j] == h.alignments[j];
          ++total;
          EXPECT_TRUE(h.alignments[j] >= 0 && h.alignments[j] < len);
        }
      }
    }
  }
  EXPECT_GE(agree, 0.9 * total) << agree << " of " << total << " alignments agree with the full recompute";
  EXPECT_GT(total, 50);
  // Two requests asking for different layers in one decode.
  auto decoder = NewBeamDecoder(*model_);
  ASSERT_TRUE(decoder.ok());
  DecodeOptions a, b;
  a.return_alignments = b.return_alignments = true;
  a.alignment_layer = 0;
  b.alignment_layer = 1;
  a.max_length_offset = b.max_length_offset = 10;
  ASSERT_TRUE(decoder->Add({inputs_[1]}, a).ok());
  ASSERT_TRUE(decoder->Add({inputs_[1]}, b).ok());
  std::vector<BeamDecoder::Done> done, all;
  while (!decoder->empty()) {
    done.clear();
    ASSERT_TRUE(decoder->Step(&done).ok());
    for (auto& d : done) all.push_back(std::move(d));
  }
  ASSERT_EQ(all.size(), 2u);
  for (int which = 0; which < 2; ++which) {
    DecodeOptions o = which == 0 ? a : b;
    auto want = Reference(*model_, inputs_[1], o);
    ASSERT_TRUE(want.ok());
    const DecodeResult& r = all[0].handle == which ? all[0].result : all[1].result;
    EXPECT_EQ(r.hypotheses[0].alignments, want->hypotheses[0].alignments) << "layer " << which;
  }
}

TEST_F(DecodingOptionsTest, Combined) {
  for (DecodeInput& in : inputs_) in.prefix = {40};
  DecodeOptions o;
  o.n_best = 3;
  o.max_length_offset = 14;
  o.min_length = 4;
  o.no_repeat_ngram_size = 2;
  o.repetition_penalty = 1.3f;
  o.disable_unk = true;
  o.return_token_scores = true;
  o.return_alignments = true;
  ExpectAsReference(o, "combined");
  o.beam_size = o.n_best = 1;
  o.sampling_topk = 10;
  o.sampling_temperature = 0.8f;
  o.seed = 5;
  ExpectAsReference(o, "combined sampling");
}

TEST_F(DecodingOptionsTest, Refusals) {
  const ModelConfig& c = model_->config;
  auto refused = [&](DecodeOptions o, const std::vector<DecodeInput>& in, const std::string& needle) {
    auto r = Run(in, o);
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status();
  };
  DecodeOptions o;
  o.sampling_topk = 5;  // beam 4
  refused(o, inputs_, "sampling needs beam_size 1");
  o = DecodeOptions();
  o.beam_size = 1;
  o.sampling_temperature = 0.5f;
  refused(o, inputs_, "apply to sampling only");
  o = DecodeOptions();
  o.repetition_penalty = 0;
  refused(o, inputs_, "repetition_penalty must be in (0, 100]");
  o = DecodeOptions();
  o.no_repeat_ngram_size = -1;
  refused(o, inputs_, "no_repeat_ngram_size");
  o = DecodeOptions();
  o.sampling_topk = 0;
  o.beam_size = 1;
  o.sampling_topp = 0;
  refused(o, inputs_, "sampling_topp must be in (0, 1]");
  o = DecodeOptions();
  o.return_alignments = true;
  o.alignment_layer = c.decoder_layers;
  refused(o, inputs_, "alignment_layer 2 is outside [0, 2) (the model's decoder layers)");
  std::vector<DecodeInput> bad = {inputs_[0]};
  bad[0].prefix = {5, c.eos_id};
  refused(DecodeOptions(), bad, "is </s> or <pad>");
  bad[0].prefix = {c.vocab_size};
  refused(DecodeOptions(), bad, "outside the vocabulary");
  bad[0].prefix.assign(60, 9);
  refused(DecodeOptions(), bad, "leaves no room for </s>");
}

}  // namespace
}  // namespace tnmt
