// The flat beam step on the GPU against the same step on the host (kernels/beam_step.h run by
// the host compiler), on random candidate sets: sentences with 0..K live rows, steps before
// min_length and at max_length, finished and unfinished sentences, tied logits, pad and </s>
// among the candidates, beams 1..16. Every output compared bit for bit.
#include "kernels/cuda/beam_step.h"

#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/test_util.h"

namespace tnmt::kernels::cuda {
namespace {

using testing::CudaTest;

class BeamStepTest : public CudaTest {};

struct Case {
  int beam, k, eos = 2, pad = 0, min_length = 0;
  std::vector<int32_t> row_begin, live, t, max_len, finished;
  std::vector<double> lp_t, lp_bound, best, score;
  std::vector<float> lse, eos_logit, top_logit;
  std::vector<int32_t> top_id;
};

Case RandomCase(std::mt19937& rng, int sentences, int beam) {
  Case c;
  c.beam = beam;
  c.k = std::min(2 * beam + 1, 60);
  c.min_length = rng() % 3;
  const int vocab = 64;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int rows = 0;
  for (int s = 0; s < sentences; ++s) {
    const int live = rng() % 4 == 0 ? 0 : 1 + static_cast<int>(rng() % beam);
    const int max_len = 2 + static_cast<int>(rng() % 8);
    const int t = 1 + static_cast<int>(rng() % max_len);
    c.row_begin.push_back(rows);
    c.live.push_back(live);
    c.t.push_back(t);
    c.max_len.push_back(max_len);
    c.finished.push_back(rng() % 2);
    c.lp_t.push_back(0.5 + u(rng));
    c.lp_bound.push_back(0.5 + 2 * u(rng));
    c.best.push_back(-5.0 * u(rng));
    rows += live;
  }
  for (int r = 0; r < rows; ++r) {
    c.score.push_back(-4.0 * u(rng));
    c.lse.push_back(static_cast<float>(1.0 + u(rng)));
    c.eos_logit.push_back(static_cast<float>(u(rng) - 1.0));
    // k distinct tokens, logits falling with ties (quarter steps); pad and </s> may be among them.
    std::vector<int32_t> ids(vocab);
    for (int i = 0; i < vocab; ++i) ids[i] = i;
    std::shuffle(ids.begin(), ids.end(), rng);
    float v = 0.0f;
    for (int i = 0; i < c.k; ++i) {
      if (rng() % 3 != 0) v -= 0.25f * static_cast<float>(1 + rng() % 3);
      c.top_logit.push_back(v);
      c.top_id.push_back(ids[i]);
    }
  }
  return c;
}

struct Outputs {
  std::vector<int32_t> next_live, parent, token, finished_out, best_row;
  std::vector<double> next_score, best_out;
};

template <typename T>
bool SameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

TEST_F(BeamStepTest, MatchesTheHostStepOnRandomCandidates) {
  std::mt19937 rng(5);
  int compared = 0;
  for (int beam = 1; beam <= kMaxFlatBeam; ++beam) {
    for (int sentences : {1, 7, 130}) {
      Case c = RandomCase(rng, sentences, beam);
      const size_t S = c.live.size(), slots = S * beam;
      BeamStepArgs a;
      a.sentences = static_cast<int>(S);
      a.beam = beam;
      a.k = c.k;
      a.eos_id = c.eos;
      a.pad_id = c.pad;
      a.min_length = c.min_length;
      // The host.
      Outputs h{std::vector<int32_t>(S), std::vector<int32_t>(slots), std::vector<int32_t>(slots),
                std::vector<int32_t>(S), std::vector<int32_t>(S), std::vector<double>(slots), std::vector<double>(S)};
      BeamStepArgs ha = a;
      ha.row_begin = c.row_begin.data();
      ha.live = c.live.data();
      ha.t = c.t.data();
      ha.max_len = c.max_len.data();
      ha.lp_t = c.lp_t.data();
      ha.lp_bound = c.lp_bound.data();
      ha.finished = c.finished.data();
      ha.best = c.best.data();
      ha.score = c.score.data();
      ha.lse = c.lse.data();
      ha.eos_logit = c.eos_logit.data();
      ha.top_logit = c.top_logit.data();
      ha.top_id = c.top_id.data();
      ha.next_live = h.next_live.data();
      ha.parent = h.parent.data();
      ha.token = h.token.data();
      ha.next_score = h.next_score.data();
      ha.finished_out = h.finished_out.data();
      ha.best_out = h.best_out.data();
      ha.best_row = h.best_row.data();
      for (int s = 0; s < a.sentences; ++s) BeamStepSentence(ha, s);
      // The device.
      BeamStepArgs da = a;
      da.row_begin = ToDevice(c.row_begin);
      da.live = ToDevice(c.live);
      da.t = ToDevice(c.t);
      da.max_len = ToDevice(c.max_len);
      da.lp_t = ToDevice(c.lp_t);
      da.lp_bound = ToDevice(c.lp_bound);
      da.finished = ToDevice(c.finished);
      da.best = ToDevice(c.best);
      da.score = ToDevice(c.score);
      da.lse = ToDevice(c.lse);
      da.eos_logit = ToDevice(c.eos_logit);
      da.top_logit = ToDevice(c.top_logit);
      da.top_id = ToDevice(c.top_id);
      int32_t* next_live = Alloc<int32_t>(S);
      int32_t* parent = Alloc<int32_t>(slots);
      int32_t* token = Alloc<int32_t>(slots);
      double* next_score = Alloc<double>(slots);
      int32_t* finished_out = Alloc<int32_t>(S);
      double* best_out = Alloc<double>(S);
      int32_t* best_row = Alloc<int32_t>(S);
      da.next_live = next_live;
      da.parent = parent;
      da.token = token;
      da.next_score = next_score;
      da.finished_out = finished_out;
      da.best_out = best_out;
      da.best_row = best_row;
      ASSERT_TRUE(BeamStep(stream(), da).ok());
      const Outputs d{ToHost(next_live, S),        ToHost(parent, slots),  ToHost(token, slots),
                      ToHost(finished_out, S),     ToHost(best_row, S),    ToHost(next_score, slots),
                      ToHost(best_out, S)};
      for (size_t s = 0; s < S; ++s) {
        ASSERT_EQ(d.next_live[s], h.next_live[s]) << "beam " << beam << " sentence " << s;
        EXPECT_EQ(d.finished_out[s], h.finished_out[s]) << "beam " << beam << " sentence " << s;
        EXPECT_EQ(d.best_row[s], h.best_row[s]) << "beam " << beam << " sentence " << s;
        EXPECT_TRUE(SameBits(d.best_out[s], h.best_out[s])) << "beam " << beam << " sentence " << s;
        for (int j = 0; j < h.next_live[s]; ++j) {
          const size_t i = s * beam + j;
          EXPECT_EQ(d.parent[i], h.parent[i]) << "beam " << beam << " sentence " << s << " slot " << j;
          EXPECT_EQ(d.token[i], h.token[i]) << "beam " << beam << " sentence " << s << " slot " << j;
          EXPECT_TRUE(SameBits(d.next_score[i], h.next_score[i])) << "beam " << beam << " sentence " << s;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 500);
}

TEST_F(BeamStepTest, RefusesBeamsOutsideItsRange) {
  BeamStepArgs a;
  a.sentences = 1;
  a.k = 3;
  a.beam = 0;
  EXPECT_FALSE(BeamStep(stream(), a).ok());
  a.beam = kMaxFlatBeam + 1;
  EXPECT_FALSE(BeamStep(stream(), a).ok());
  a.sentences = 0;
  a.beam = 4;
  EXPECT_TRUE(BeamStep(stream(), a).ok());
}

}  // namespace
}  // namespace tnmt::kernels::cuda
