// Decoding properties that do not need a reference: batch invariance (a sentence alone vs.
// inside a mixed-length batch), continuous batching, n-best ordering, length limits, min/max
// length, and the errors for bad options and bad sources. One body for every device: the CPU
// engine, and the CUDA engine in float32 and float16 (skipped with "SKIPPED: no CUDA device"
// where there is none; //engine/decode:beam_search_cuda_test is the CUDA-only build of this
// file that tests/gpu/check.sh runs).
#include "engine/decode/beam_search.h"

#include <cmath>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "engine/core/status_macros.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/runtime/loaded_model.h"
#include "kernels/cpu/cpu_features.h"

namespace tnmt {
namespace {

struct Backend {
  const char* name;
  const char* device;
  const char* dtype;
  // Score agreement between decodes of different batch compositions where exact agreement is
  // not promised (CUDA: GEMMs of different row counts round differently; half precision more
  // so); 0 on the CPU, which promises exact agreement.
  double score_tolerance;
  // CPU only: the kernel path to run (capped with SetIsaForTesting; skipped where the CPU lacks
  // it); kAvx512 means the best this CPU has.
  kernels::cpu::CpuIsa isa = kernels::cpu::CpuIsa::kAvx512;
  const char* compute_type = "";  // CPU: "" (float32) or "int8"
};

class DecodeTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam().isa > kernels::cpu::DetectedIsa()) {
      GTEST_SKIP() << "SKIPPED: this CPU has no " << kernels::cpu::IsaName(GetParam().isa) << " path";
    }
    kernels::cpu::SetIsaForTesting(GetParam().isa);
    if (std::string(GetParam().device) != "cpu" && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "SKIPPED: no CUDA device ("
                   << (CudaBuild() ? "none visible" : "this build has no CUDA support") << ")";
    }
    auto placement = Placement::Parse(GetParam().device, GetParam().dtype, GetParam().compute_type);
    ASSERT_TRUE(placement.ok()) << placement.status();
    auto m = LoadModelDirectory("tests/golden/data/tiny", *placement);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> tok(4, model_->config.vocab_size - 1);
    for (int len : {1, 7, 3, 18, 12, 2, 25}) {
      std::vector<int32_t> s;
      for (int i = 0; i < len - 1; ++i) s.push_back(tok(rng));
      s.push_back(model_->config.eos_id);
      sources_.push_back(s);
    }
  }
  void TearDown() override { kernels::cpu::SetIsaForTesting(kernels::cpu::CpuIsa::kAvx512); }
  absl::StatusOr<std::vector<DecodeResult>> Run(const std::vector<std::vector<int32_t>>& s,
                                                const DecodeOptions& o) {
    TNMT_ASSIGN_OR_RETURN(BeamDecoder decoder, NewBeamDecoder(*model_));
    return Decode(decoder, s, o);
  }
  double Tolerance(float score) const {
    return GetParam().score_tolerance * (5.0 + std::fabs(score));
  }
  // A score of the same hypothesis from decodes whose batches differ (other sentences, fewer
  // live rows after hopeless ones are dropped, another n_best): bit for bit on the CPU, within
  // the backend's tolerance on a GPU.
  ::testing::AssertionResult SameScore(float got, float want) const {
    if (GetParam().score_tolerance == 0 ? got == want : std::fabs(got - want) <= Tolerance(want)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "score " << got << " vs " << want << " (difference "
                                         << got - want << ", tolerance " << Tolerance(want) << ")";
  }

  // Decodes `sources` as one batch, then each alone, greedy and beam 4 (n_best 4): the same
  // hypotheses, and on the CPU the same scores bit for bit (on a GPU within the backend's
  // tolerance: GEMMs of different row counts round differently there).
  void ExpectEachAsDecodedAlone(const std::vector<std::vector<int32_t>>& sources) {
    for (int beam : {1, 4}) {
      DecodeOptions o;
      o.beam_size = beam;
      o.n_best = beam;
      auto batched = Run(sources, o);
      ASSERT_TRUE(batched.ok()) << batched.status();
      for (size_t i = 0; i < sources.size(); ++i) {
        auto alone = Run({sources[i]}, o);
        ASSERT_TRUE(alone.ok());
        const auto& a = (*alone)[0].hypotheses;
        const auto& b = (*batched)[i].hypotheses;
        ASSERT_EQ(a.size(), b.size()) << "beam " << beam << " sentence " << i;
        for (size_t h = 0; h < a.size(); ++h) {
          EXPECT_EQ(a[h].ids, b[h].ids) << "beam " << beam << " sentence " << i << " hyp " << h;
          EXPECT_TRUE(SameScore(a[h].score, b[h].score)) << "beam " << beam << " sentence " << i << " hyp " << h;
        }
      }
    }
  }

  // Decodes `s` with one decoder, dropping hopeless hypotheses or not; adds the rows decoded
  // to *rows and the steps taken to *steps. Results in input order.
  std::vector<DecodeResult> StepAll(const std::vector<std::vector<int32_t>>& s, const DecodeOptions& o,
                                    bool prune, int64_t* rows, int* steps) {
    std::vector<DecodeResult> out(s.size());
    auto decoder = NewBeamDecoder(*model_);
    EXPECT_TRUE(decoder.ok()) << decoder.status();
    if (!decoder.ok()) return out;
    decoder->set_prune_for_testing(prune);
    auto handles = decoder->Add(s, o);
    EXPECT_TRUE(handles.ok()) << handles.status();
    if (!handles.ok()) return out;
    std::vector<BeamDecoder::Done> done;
    while (!decoder->empty()) {
      *rows += decoder->live_rows();
      ++*steps;
      const absl::Status st = decoder->Step(&done);
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) return out;
    }
    EXPECT_EQ(done.size(), s.size());
    for (auto& d : done) out[d.handle - (*handles)[0]] = std::move(d.result);
    return out;
  }

  std::shared_ptr<const LoadedModel> model_;
  std::vector<std::vector<int32_t>> sources_;
};

TEST_P(DecodeTest, BatchInvariance) { ExpectEachAsDecodedAlone(sources_); }

// Batches of more rows than the CPU engine projects to logits at once (it scores a step's rows
// in parts of 64): 48 sentences with beam 4 put up to 192 rows in a step, and a sentence's rows
// fall in different parts than when it is decoded alone. On the CPU its hypotheses and scores
// must still be exactly those of decoding it alone.
TEST_P(DecodeTest, ManyRowsGiveTheResultsOfEachSentenceAlone) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int> tok(4, model_->config.vocab_size - 1), len(2, 20);
  std::vector<std::vector<int32_t>> many;
  for (int i = 0; i < 48; ++i) {
    std::vector<int32_t> s(len(rng));
    for (int32_t& t : s) t = tok(rng);
    s.back() = model_->config.eos_id;
    many.push_back(s);
  }
  ExpectEachAsDecodedAlone(many);
}

// Continuous batching: sentences added while others are mid-decode, each with its own options,
// and a cancelled sentence, give exactly the results of decoding each sentence alone.
TEST_P(DecodeTest, SentencesJoiningARunningDecodeMatchDecodingAlone) {
  DecodeOptions beam4, greedy, beam2;
  beam4.n_best = 3;
  greedy.beam_size = 1;
  beam2.beam_size = 2;
  beam2.length_penalty = 1.0f;
  beam2.max_length = 6;
  const std::vector<DecodeOptions> opts = {beam4, greedy, beam2};
  auto decoder = NewBeamDecoder(*model_);
  ASSERT_TRUE(decoder.ok());
  std::map<int64_t, std::pair<size_t, int>> sentence_of;  // handle -> (source, options)
  std::map<int64_t, DecodeResult> got;
  int64_t cancelled = -1;
  std::vector<BeamDecoder::Done> done;
  for (int step = 0; step < 200 && (step < 8 || !decoder->empty()); ++step) {
    if (step < 7) {  // one new sentence per step, options cycling
      auto h = decoder->Add({sources_[step]}, opts[step % 3]);
      ASSERT_TRUE(h.ok()) << h.status();
      sentence_of[(*h)[0]] = {static_cast<size_t>(step), step % 3};
    }
    if (step == 3) {
      cancelled = sentence_of.begin()->first + 1;
      EXPECT_TRUE(decoder->Cancel(cancelled));
      EXPECT_FALSE(decoder->Cancel(cancelled));
    }
    done.clear();
    ASSERT_TRUE(decoder->Step(&done).ok());
    for (auto& d : done) got[d.handle] = d.result;
  }
  ASSERT_TRUE(decoder->empty());
  EXPECT_EQ(got.size(), 6u);
  EXPECT_EQ(got.count(cancelled), 0u);
  for (const auto& [handle, result] : got) {
    const auto [src, o] = sentence_of[handle];
    auto alone = Run({sources_[src]}, opts[o]);
    ASSERT_TRUE(alone.ok());
    const auto& a = (*alone)[0].hypotheses;
    ASSERT_EQ(a.size(), result.hypotheses.size()) << "sentence " << src;
    for (size_t h = 0; h < a.size(); ++h) {
      EXPECT_EQ(a[h].ids, result.hypotheses[h].ids) << "sentence " << src << " hyp " << h;
      EXPECT_TRUE(SameScore(result.hypotheses[h].score, a[h].score)) << "sentence " << src << " hyp " << h;
    }
  }
}

// Greedy decoding whose scores are not returned skips the log-softmax normalizer: the same
// tokens as with scores (alone, batched, beside a beam search that needs the normalizer, and
// with options that filter tokens), and a score of 0. A repetition penalty still gets it.
TEST_P(DecodeTest, GreedyWithoutScoresGivesTheSameTokens) {
  DecodeOptions plain;
  plain.beam_size = 1;
  DecodeOptions filtered = plain;
  filtered.disable_unk = true;
  filtered.min_length = 3;
  filtered.no_repeat_ngram_size = 2;
  DecodeOptions penalized = plain;
  penalized.repetition_penalty = 1.3f;
  for (const DecodeOptions& with : {plain, filtered, penalized}) {
    DecodeOptions without = with;
    without.return_scores = false;
    auto want = Run(sources_, with);
    auto got = Run(sources_, without);
    ASSERT_TRUE(want.ok() && got.ok());
    for (size_t i = 0; i < sources_.size(); ++i) {
      ASSERT_EQ((*got)[i].hypotheses.size(), 1u);
      EXPECT_EQ((*got)[i].hypotheses[0].ids, (*want)[i].hypotheses[0].ids) << "sentence " << i;
      EXPECT_EQ((*got)[i].hypotheses[0].score, 0.0f) << "sentence " << i;
      EXPECT_NE((*want)[i].hypotheses[0].score, 0.0f) << "sentence " << i;
    }
  }
  // Beside beam search in one running decode (the step computes the normalizer for it).
  DecodeOptions without = plain, beam4;
  without.return_scores = false;
  auto decoder = NewBeamDecoder(*model_);
  ASSERT_TRUE(decoder.ok());
  auto greedy_handles = decoder->Add({sources_[0], sources_[3]}, without);
  auto beam_handles = decoder->Add({sources_[4]}, beam4);
  ASSERT_TRUE(greedy_handles.ok() && beam_handles.ok());
  std::map<int64_t, DecodeResult> got;
  std::vector<BeamDecoder::Done> done;
  while (!decoder->empty()) {
    done.clear();
    ASSERT_TRUE(decoder->Step(&done).ok());
    for (auto& d : done) got[d.handle] = d.result;
  }
  auto alone = Run({sources_[0], sources_[3]}, plain);
  auto beam_alone = Run({sources_[4]}, beam4);
  ASSERT_TRUE(alone.ok() && beam_alone.ok());
  EXPECT_EQ(got[(*greedy_handles)[0]].hypotheses[0].ids, (*alone)[0].hypotheses[0].ids);
  EXPECT_EQ(got[(*greedy_handles)[1]].hypotheses[0].ids, (*alone)[1].hypotheses[0].ids);
  EXPECT_EQ(got[(*beam_handles)[0]].hypotheses[0].ids, (*beam_alone)[0].hypotheses[0].ids);
  EXPECT_TRUE(SameScore(got[(*beam_handles)[0]].hypotheses[0].score, (*beam_alone)[0].hypotheses[0].score));
}

// A sentence stops once no live hypothesis can enter its top n_best finished ones, so fewer
// hypotheses asked for may take fewer steps but never change them: n_best = n gives exactly
// the first n hypotheses (ids and scores) of n_best = K.
TEST_P(DecodeTest, FewerNBestStopsNoLaterWithTheSameHypotheses) {
  int steps_all = 0, steps_one = 0;
  for (const auto& src : sources_) {
    std::vector<DecodeResult> by_n;
    std::vector<int> steps;
    for (int n = 1; n <= 4; ++n) {
      DecodeOptions o;
      o.beam_size = 4;
      o.n_best = n;
      int64_t rows = 0;
      int count = 0;
      by_n.push_back(StepAll({src}, o, /*prune=*/true, &rows, &count)[0]);
      steps.push_back(count);
    }
    const auto& all = by_n.back().hypotheses;
    ASSERT_EQ(all.size(), 4u);
    for (int n = 1; n <= 4; ++n) {
      const auto& got = by_n[n - 1].hypotheses;
      ASSERT_EQ(got.size(), static_cast<size_t>(n));
      for (int h = 0; h < n; ++h) {
        EXPECT_EQ(got[h].ids, all[h].ids) << "n_best " << n << " hyp " << h;
        EXPECT_TRUE(SameScore(got[h].score, all[h].score)) << "n_best " << n << " hyp " << h;
      }
      if (n > 1) {
        EXPECT_LE(steps[n - 2], steps[n - 1]) << "n_best " << n;
      }
    }
    steps_one += steps.front();
    steps_all += steps.back();
  }
  EXPECT_LT(steps_one, steps_all) << "n_best 1 should stop earlier on some sentence";
}

// Live hypotheses that can no longer enter the n_best are dropped; decoding with them kept
// (set_prune_for_testing(false)) gives the same hypotheses and scores, over every n_best,
// length penalties (also negative and the "length" style), beam sizes and max lengths, while
// the dropping decodes fewer rows.
TEST_P(DecodeTest, DroppingHopelessHypothesesChangesNoOutput) {
  int64_t rows_pruned = 0, rows_kept = 0;
  for (int beam : {2, 4, 6}) {
    for (float alpha : {0.6f, 1.0f, 0.0f, -0.5f}) {
      for (int n_best : {1, 2}) {
        for (auto style : {LengthPenaltyStyle::kGnmt, LengthPenaltyStyle::kLength}) {
          DecodeOptions o;
          o.beam_size = beam;
          o.n_best = n_best;
          o.length_penalty = alpha;
          o.length_penalty_style = style;
          o.max_length_offset = beam == 6 ? 4 : 50;
          std::vector<DecodeResult> got[2];
          int steps = 0;
          got[1] = StepAll(sources_, o, /*prune=*/true, &rows_pruned, &steps);
          got[0] = StepAll(sources_, o, /*prune=*/false, &rows_kept, &steps);
          for (size_t i = 0; i < sources_.size(); ++i) {
            const auto& a = got[1][i].hypotheses;
            const auto& b = got[0][i].hypotheses;
            ASSERT_EQ(a.size(), b.size());
            for (size_t h = 0; h < a.size(); ++h) {
              EXPECT_EQ(a[h].ids, b[h].ids) << "beam " << beam << " alpha " << alpha << " sentence " << i;
              EXPECT_TRUE(SameScore(a[h].score, b[h].score)) << "beam " << beam << " alpha " << alpha << " sentence " << i;
            }
          }
        }
      }
    }
  }
  EXPECT_LT(rows_pruned, rows_kept);
}

TEST_P(DecodeTest, NBestIsSortedAndLengthsRespectLimits) {
  DecodeOptions o;
  o.beam_size = 5;
  o.n_best = 5;
  o.max_length_offset = 6;
  auto r = Run(sources_, o);
  ASSERT_TRUE(r.ok());
  for (size_t i = 0; i < sources_.size(); ++i) {
    const auto& hyps = (*r)[i].hypotheses;
    ASSERT_EQ(hyps.size(), 5u);
    for (size_t h = 0; h < hyps.size(); ++h) {
      // Output length counts </s>, which is not in ids.
      EXPECT_LE(hyps[h].ids.size() + 1, sources_[i].size() + 6);
      if (h > 0) {
        EXPECT_GE(hyps[h - 1].score, hyps[h].score);
      }
      for (int32_t id : hyps[h].ids) {
        EXPECT_NE(id, model_->config.pad_id);
        EXPECT_NE(id, model_->config.eos_id);
      }
    }
  }
}

TEST_P(DecodeTest, FixedOutputLength) {
  DecodeOptions o;
  o.min_length = 9;
  o.max_length = 9;
  auto r = Run(sources_, o);
  ASSERT_TRUE(r.ok());
  for (const DecodeResult& d : *r) EXPECT_EQ(d.hypotheses[0].ids.size(), 8u);
}

// Length penalty styles: with every output forced to one length n (min = max length), both
// styles keep the same hypotheses in the same order, and their scores differ exactly by the
// ratio of the penalties: raw log-probability = score * ((5 + n) / 6)^a = score' * n^a.
TEST_P(DecodeTest, LengthPenaltyStyles) {
  EXPECT_DOUBLE_EQ(LengthPenalty(9, 0.6, LengthPenaltyStyle::kGnmt), std::pow(14.0 / 6.0, 0.6));
  EXPECT_DOUBLE_EQ(LengthPenalty(9, 0.6, LengthPenaltyStyle::kLength), std::pow(9.0, 0.6));
  EXPECT_DOUBLE_EQ(LengthPenalty(7, 0.0, LengthPenaltyStyle::kLength), 1.0);
  DecodeOptions gnmt;
  gnmt.beam_size = 4;
  gnmt.n_best = 4;
  gnmt.min_length = 9;
  gnmt.max_length = 9;
  DecodeOptions length = gnmt;
  length.length_penalty_style = LengthPenaltyStyle::kLength;
  auto a = Run(sources_, gnmt);
  auto b = Run(sources_, length);
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < sources_.size(); ++i) {
    ASSERT_EQ((*a)[i].hypotheses.size(), (*b)[i].hypotheses.size());
    for (size_t h = 0; h < (*a)[i].hypotheses.size(); ++h) {
      const Hypothesis& x = (*a)[i].hypotheses[h];
      const Hypothesis& y = (*b)[i].hypotheses[h];
      EXPECT_EQ(x.ids, y.ids) << "sentence " << i << " hyp " << h;
      const double raw_x = x.score * std::pow(14.0 / 6.0, 0.6), raw_y = y.score * std::pow(9.0, 0.6);
      EXPECT_NEAR(raw_x, raw_y, 1e-5 * (1.0 + std::fabs(raw_x))) << "sentence " << i << " hyp " << h;
    }
  }
}

TEST_P(DecodeTest, BadOptionsAndSourcesAreErrors) {
  DecodeOptions o;
  o.beam_size = 0;
  EXPECT_EQ(Run(sources_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.beam_size = 1000;
  EXPECT_EQ(Run(sources_, o).status().code(), absl::StatusCode::kInvalidArgument);
  o = DecodeOptions();
  o.n_best = 5;
  EXPECT_NE(Run(sources_, o).status().message().find("n_best"), std::string::npos);
  o = DecodeOptions();
  o.length_penalty = NAN;
  EXPECT_FALSE(Run(sources_, o).ok());
  o = DecodeOptions();
  EXPECT_FALSE(Run({{}}, o).ok());
  EXPECT_FALSE(Run({{5, 99999, 3}}, o).ok());
  EXPECT_FALSE(Run({{-1, 3}}, o).ok());
  std::vector<int32_t> huge(ModelWeights::kSinusoidRows + 1, 5);
  EXPECT_FALSE(Run({huge}, o).ok());
  auto empty = Run({}, o);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// The CPU on each kernel path, float32 and int8 (exact: a sentence's scores do not depend on
// its batch on any of them), the CUDA engine in float32 (cuBLASLt picks algorithms per shape) and in float16 (the
// same weights and inputs in every composition, so still close).
#ifndef TNMT_DECODE_TEST_CUDA_ONLY
INSTANTIATE_TEST_SUITE_P(
    Cpu, DecodeTest,
    ::testing::Values(Backend{"cpu", "cpu", "", 0.0},
                      Backend{"cpu_avx2", "cpu", "", 0.0, kernels::cpu::CpuIsa::kAvx2},
                      Backend{"cpu_portable", "cpu", "", 0.0, kernels::cpu::CpuIsa::kPortable},
                      Backend{"cpu_int8", "cpu", "", 0.0, kernels::cpu::CpuIsa::kAvx512, "int8"},
                      Backend{"cpu_int8_avx2", "cpu", "", 0.0, kernels::cpu::CpuIsa::kAvx2, "int8"},
                      Backend{"cpu_int8_portable", "cpu", "", 0.0, kernels::cpu::CpuIsa::kPortable, "int8"}),
    [](const auto& info) { return std::string(info.param.name); });
#endif
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeTest,
                         ::testing::Values(Backend{"cuda_float32", "cuda", "float32", 1e-5},
                                           Backend{"cuda_float16", "cuda", "float16", 1e-3}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tnmt
