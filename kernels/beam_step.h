// One beam-search step's selection over flat arrays, for a batch of sentences: from each live
// hypothesis row's top-k candidates (the decoder step's scores), the next live hypotheses of
// every sentence (parent row, token, running score), its best finished hypothesis so far and
// whether it stops. The rule is engine/decode/beam_search.cc's (BeamDecoder) for beam search
// and greedy decoding without token rules, prefixes or sampling, with n_best 1:
//   - candidates: each live hypothesis contributes its first 2K allowed tokens (greedy: 1),
//     pad never, </s> not before min_length, only </s> once t >= max_len; a candidate's score
//     is (score + logit) - lse in double (score: double, logit and lse: float);
//   - the sentence's candidates ranked by score (ties: lower hypothesis, then lower token),
//     the best 2K kept (greedy: 1);
//   - the walk in that order: </s> finishes its parent (normalized by lp(t); greedy: not
//     normalized), another token extends it, until K are live (greedy: after the first);
//   - a live hypothesis whose score / lp(bound) cannot beat the best finished one is dropped
//     (bound: max_len for alpha >= 0, else t); the sentence stops when none is live.
// Ties among finished hypotheses go to the first finished (BeamDecoder's stable sort).
// The length penalties come in per sentence, computed on the host by LengthPenalty(), so both
// devices divide by the same doubles. One definition compiled by g++ (kernels/cpu/beam_step)
// and nvcc (kernels/cuda/beam_step): both devices select exactly the same.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TNMT_BEAM_HD __host__ __device__ __forceinline__
#else
#define TNMT_BEAM_HD inline
#endif

namespace tnmt::kernels {

// Largest beam the flat step takes (its candidate buffer lives in registers / local memory).
constexpr int kMaxFlatBeam = 16;

// S sentences; rows: the live hypotheses of all sentences, sentence by sentence (sentence s
// holds rows [row_begin[s], row_begin[s] + live[s])). Every pointer is on the device that runs
// the step.
struct BeamStepArgs {
  int sentences = 0;  // S
  int beam = 4;       // K in [1, kMaxFlatBeam]; 1: greedy
  int k = 0;          // candidates per row in top_logit / top_id
  int eos_id = 2, pad_id = 1;
  int min_length = 0;  // </s> not chosen while t < min_length

  // Per sentence, [S]. live[s] == 0: the sentence is skipped (its outputs are 0 / unchanged).
  const int32_t* row_begin = nullptr;
  const int32_t* live = nullptr;      // live hypotheses, 0..K
  const int32_t* t = nullptr;         // output positions decided after this step (>= 1)
  const int32_t* max_len = nullptr;   // maximum output length (</s> included)
  const double* lp_t = nullptr;       // lp(t)
  const double* lp_bound = nullptr;   // lp(max_len) for alpha >= 0, else lp(t)
  const int32_t* finished = nullptr;  // 1: the sentence has a finished hypothesis
  const double* best = nullptr;       // its best normalized score (read when finished)

  // Per row, [rows] and [rows, k] (StepScores' layout: top-k best first, ties by token id).
  const double* score = nullptr;  // running sum of log-probabilities
  const float* lse = nullptr;
  const float* eos_logit = nullptr;
  const float* top_logit = nullptr;
  const int32_t* top_id = nullptr;

  // Outputs per sentence: next_live [S]; parent, token, next_score [S, K] (the first
  // next_live[s] of sentence s, in walk order; parent is a row of this step);
  // finished_out, best_out [S]; best_row [S]: the row whose </s> gave a new best this step
  // (its tokens are the finished hypothesis), else -1.
  int32_t* next_live = nullptr;
  int32_t* parent = nullptr;
  int32_t* token = nullptr;
  double* next_score = nullptr;
  int32_t* finished_out = nullptr;
  double* best_out = nullptr;
  int32_t* best_row = nullptr;
};

struct BeamCandidate {
  double score;
  int hyp;
  int32_t token;
};

// BeamDecoder's candidate order: higher score, then lower hypothesis, then lower token.
TNMT_BEAM_HD bool BeamBetter(const BeamCandidate& a, const BeamCandidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.hyp != b.hyp) return a.hyp < b.hyp;
  return a.token < b.token;
}

// Inserts c into buf[0, *m) (sorted best first, at most cap entries), dropping the worst when
// full: the best `cap` of everything inserted, as sorting all and truncating would keep.
TNMT_BEAM_HD void BeamInsert(BeamCandidate* buf, int* m, int cap, const BeamCandidate& c) {
  int n = *m;
  if (n == cap && !BeamBetter(c, buf[n - 1])) return;
  int i = n < cap ? n : n - 1;
  while (i > 0 && BeamBetter(c, buf[i - 1])) {
    buf[i] = buf[i - 1];
    --i;
  }
  buf[i] = c;
  if (n < cap) *m = n + 1;
}

// The step for sentence s (see the top of this file).
TNMT_BEAM_HD void BeamStepSentence(const BeamStepArgs& a, int s) {
  const int K = a.beam;
  const bool greedy = K == 1;
  const int n = a.live[s];
  int fin = a.finished[s];
  double best = a.best[s];
  int32_t best_row = -1;
  int nl = 0;
  if (n > 0) {
    const int t = a.t[s];
    const bool only_eos = t >= a.max_len[s];
    const bool no_eos = t < a.min_length;
    const int want = greedy ? 1 : 2 * K;
    BeamCandidate buf[2 * kMaxFlatBeam];
    int m = 0;
    const int begin = a.row_begin[s];
    for (int h = 0; h < n; ++h) {
      const int row = begin + h;
      const double base = a.score[row];
      const float lse = a.lse[row];
      if (only_eos) {
        BeamInsert(buf, &m, want, {base + a.eos_logit[row] - lse, h, a.eos_id});
        continue;
      }
      const float* logit = a.top_logit + static_cast<int64_t>(row) * a.k;
      const int32_t* id = a.top_id + static_cast<int64_t>(row) * a.k;
      int taken = 0;
      for (int i = 0; i < a.k && taken < want; ++i) {
        if (id[i] == a.pad_id || (no_eos && id[i] == a.eos_id)) continue;
        BeamInsert(buf, &m, want, {base + logit[i] - lse, h, id[i]});
        ++taken;
      }
    }
    const int64_t out = static_cast<int64_t>(s) * K;
    for (int j = 0; j < m; ++j) {
      const BeamCandidate& c = buf[j];
      if (c.token == a.eos_id) {
        const double norm = greedy ? c.score : c.score / a.lp_t[s];
        if (!fin || norm > best) {
          best = norm;
          best_row = begin + c.hyp;
        }
        fin = 1;
      } else {
        a.parent[out + nl] = begin + c.hyp;
        a.token[out + nl] = c.token;
        a.next_score[out + nl] = c.score;
        ++nl;
      }
      if (greedy || nl == K) break;
    }
    if (nl > 0 && !greedy && fin) {  // drop the hopeless, in order
      const double lp = a.lp_bound[s];
      int kept = 0;
      for (int j = 0; j < nl; ++j) {
        if (best >= a.next_score[out + j] / lp) continue;
        a.parent[out + kept] = a.parent[out + j];
        a.token[out + kept] = a.token[out + j];
        a.next_score[out + kept] = a.next_score[out + j];
        ++kept;
      }
      nl = kept;
    }
  }
  a.next_live[s] = nl;
  a.finished_out[s] = fin;
  a.best_out[s] = best;
  a.best_row[s] = best_row;
}

}  // namespace tnmt::kernels
