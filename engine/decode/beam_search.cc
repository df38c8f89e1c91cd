// Decoding; see beam_search.h. Scores are accumulated in double on top of float32 logits.
#include "engine/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/decoder.h"
#include "engine/layers/encoder.h"
#include "kernels/cpu/elementwise.h"

namespace tnmt {

namespace {

struct Live {
  int row;                     // row in the decoder state
  double score;                // sum of log-probabilities
  std::vector<int32_t> ids;    // generated so far
};

struct Finished {
  double normalized;
  double raw;
  std::vector<int32_t> ids;  // without </s>
};

struct SentenceState {
  int max_len = 0;
  bool done = false;
  std::vector<Live> live;
  std::vector<Finished> finished;
};

struct Candidate {
  double score;
  int hyp;      // index in the sentence's live list
  int32_t token;
};

bool Better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score > b.score;
  if (a.hyp != b.hyp) return a.hyp < b.hyp;
  return a.token < b.token;
}

// Rules for which tokens a row may produce at output position t.
struct TokenRules {
  int32_t pad, eos;
  bool only_eos;
  bool no_eos;
  bool Allowed(int32_t tok) const {
    if (tok == pad) return false;
    if (only_eos) return tok == eos;
    if (no_eos && tok == eos) return false;
    return true;
  }
};

// Appends to `out` the best `k` allowed tokens of one row of logits, best first
// (ties: lower token id first).
void TopK(const float* logits, int vocab, int k, const TokenRules& rules, int hyp,
          double base, float lse, std::vector<Candidate>* out) {
  if (rules.only_eos) {
    out->push_back({base + logits[rules.eos] - lse, hyp, rules.eos});
    return;
  }
  std::vector<std::pair<float, int32_t>> best;  // sorted descending, size <= k
  best.reserve(k + 1);
  float threshold = -std::numeric_limits<float>::infinity();
  for (int32_t tok = 0; tok < vocab; ++tok) {
    const float v = logits[tok];
    if (static_cast<int>(best.size()) == k && !(v > threshold)) continue;
    if (!rules.Allowed(tok)) continue;
    auto pos = std::upper_bound(best.begin(), best.end(), v,
                                [](float x, const std::pair<float, int32_t>& e) { return x > e.first; });
    best.insert(pos, {v, tok});
    if (static_cast<int>(best.size()) > k) best.pop_back();
    if (static_cast<int>(best.size()) == k) threshold = best.back().first;
  }
  for (const auto& [v, tok] : best) out->push_back({base + v - lse, hyp, tok});
}

}  // namespace

double LengthPenalty(int length, double alpha) { return std::pow((5.0 + length) / 6.0, alpha); }

absl::StatusOr<std::vector<DecodeResult>> Decode(const ModelConfig& c, const ModelWeights& w,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt, Workspace* ws) {
  TNMT_RETURN_IF_ERROR(opt.Validate());
  const int batch = static_cast<int>(sources.size());
  std::vector<DecodeResult> results(batch);
  if (batch == 0) return results;
  const bool greedy = opt.beam_size == 1;
  const int K = opt.beam_size;
  const int V = c.vocab_size;

  int src_max = 0;
  for (const auto& s : sources) {
    if (s.empty()) return absl::InvalidArgumentError("empty source (must end with </s>)");
    for (int32_t id : s) {
      if (id < 0 || id >= V) {
        return absl::InvalidArgumentError(absl::StrCat("source token id ", id, " outside [0, ", V, ")"));
      }
    }
    src_max = std::max<int>(src_max, s.size());
  }
  if (src_max > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("source of ", src_max,
                                                   " tokens exceeds the model's limit of ",
                                                   MaxPositions(c), " positions"));
  }
  std::vector<int32_t> ids(static_cast<size_t>(batch) * src_max, c.pad_id);
  std::vector<int32_t> lengths(batch);
  std::vector<SentenceState> st(batch);
  int steps_max = 1;
  for (int b = 0; b < batch; ++b) {
    std::copy(sources[b].begin(), sources[b].end(), ids.begin() + static_cast<size_t>(b) * src_max);
    lengths[b] = static_cast<int32_t>(sources[b].size());
    int max_len = opt.max_length > 0 ? opt.max_length : lengths[b] + opt.max_length_offset;
    max_len = std::max(1, std::min(max_len, MaxPositions(c)));
    st[b].max_len = max_len;
    steps_max = std::max(steps_max, max_len);
  }
  TNMT_ASSIGN_OR_RETURN(Tensor enc, Encode(c, w, ids.data(), lengths.data(), batch, src_max, ws));
  TNMT_ASSIGN_OR_RETURN(DecoderState state,
                        DecoderState::Create(c, w, enc, lengths.data(), batch * K, steps_max));
  std::vector<int32_t> start_rows(batch);
  for (int b = 0; b < batch; ++b) {
    start_rows[b] = b;
    st[b].live.push_back({b, 0.0, {}});
  }
  TNMT_RETURN_IF_ERROR(state.Start(start_rows));

  TNMT_ASSIGN_OR_RETURN(Tensor logits, Tensor::Empty({static_cast<int64_t>(batch) * K, V}));
  std::vector<float> lse(static_cast<size_t>(batch) * K);
  std::vector<int32_t> step_ids(static_cast<size_t>(batch) * K, c.bos_id);
  std::vector<Candidate> cands;
  std::vector<int32_t> parents;

  for (int t = 1; t <= steps_max && state.rows() > 0; ++t) {
    const int rows = state.rows();
    TNMT_RETURN_IF_ERROR(DecoderForward(c, w, &state, step_ids.data(), 1, logits.f32(), ws));
    kernels::cpu::LogSumExp(lse.data(), logits.f32(), rows, V);
    parents.clear();
    step_ids.clear();
    for (int b = 0; b < batch; ++b) {
      SentenceState& s = st[b];
      if (s.done) continue;
      const TokenRules rules{c.pad_id, c.eos_id, t >= s.max_len, t < opt.min_length};
      cands.clear();
      for (int h = 0; h < static_cast<int>(s.live.size()); ++h) {
        const Live& l = s.live[h];
        TopK(logits.f32() + static_cast<int64_t>(l.row) * V, V, greedy ? 1 : 2 * K, rules, h,
             l.score, lse[l.row], &cands);
      }
      std::sort(cands.begin(), cands.end(), Better);
      if (!greedy && static_cast<int>(cands.size()) > 2 * K) cands.resize(2 * K);
      std::vector<Live> next;
      for (const Candidate& cd : cands) {
        const Live& parent = s.live[cd.hyp];
        if (cd.token == c.eos_id) {
          const double norm = greedy ? cd.score : cd.score / LengthPenalty(t, opt.length_penalty);
          s.finished.push_back({norm, cd.score, parent.ids});
        } else {
          Live l{parent.row, cd.score, parent.ids};
          l.ids.push_back(cd.token);
          next.push_back(std::move(l));
        }
        // The walk ends once K hypotheses are live (greedy: after the first candidate).
        if (greedy || static_cast<int>(next.size()) == K) break;
      }
      // Stop when nothing is live, or no live hypothesis can enter the top K finished.
      bool stop = next.empty();
      if (!stop && !greedy && static_cast<int>(s.finished.size()) >= K) {
        std::vector<double> norms;
        for (const Finished& f : s.finished) norms.push_back(f.normalized);
        std::nth_element(norms.begin(), norms.begin() + (K - 1), norms.end(), std::greater<>());
        const double kth = norms[K - 1];
        const double best_live = next.front().score;
        const int bound_len = opt.length_penalty >= 0 ? s.max_len : t;
        stop = kth >= best_live / LengthPenalty(bound_len, opt.length_penalty);
      }
      if (stop) {
        s.done = true;
        s.live.clear();
        continue;
      }
      for (Live& l : next) {
        parents.push_back(l.row);
        l.row = static_cast<int>(parents.size()) - 1;
        step_ids.push_back(l.ids.back());
      }
      s.live = std::move(next);
    }
    TNMT_RETURN_IF_ERROR(state.Reorder(parents));
  }

  for (int b = 0; b < batch; ++b) {
    std::vector<Finished>& f = st[b].finished;
    std::stable_sort(f.begin(), f.end(),
                     [](const Finished& x, const Finished& y) { return x.normalized > y.normalized; });
    for (int i = 0; i < static_cast<int>(f.size()) && i < opt.n_best; ++i) {
      results[b].hypotheses.push_back({std::move(f[i].ids), static_cast<float>(f[i].normalized)});
    }
  }
  return results;
}

}  // namespace tnmt
