// Decoding; see beam_search.h. Scores are accumulated in double on top of float32 logits.
#include "engine/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/decode/cpu_step_model.h"

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

// Appends to `out` the best `k` allowed tokens of row `row` of the step's scores, best first
// (ties: lower token id first). The scores hold k + 1 candidates other than pad, so removing
// </s> (when not yet allowed) still leaves k.
void TopK(const StepScores& s, int row, int k, const TokenRules& rules, int hyp, double base,
          std::vector<Candidate>* out) {
  const float lse = s.lse[row];
  if (rules.only_eos) {
    out->push_back({base + s.eos_logit[row] - lse, hyp, rules.eos});
    return;
  }
  const float* logit = s.top_logit.data() + static_cast<int64_t>(row) * s.k;
  const int32_t* id = s.top_id.data() + static_cast<int64_t>(row) * s.k;
  int taken = 0;
  for (int i = 0; i < s.k && taken < k; ++i) {
    if (!rules.Allowed(id[i])) continue;
    out->push_back({base + logit[i] - lse, hyp, id[i]});
    ++taken;
  }
}

}  // namespace

double LengthPenalty(int length, double alpha, LengthPenaltyStyle style) {
  return style == LengthPenaltyStyle::kLength ? std::pow(static_cast<double>(length), alpha)
                                              : std::pow((5.0 + length) / 6.0, alpha);
}

struct BeamDecoder::Sentence {
  int64_t handle = 0;
  int32_t source = 0;
  DecodeOptions opt;
  int max_len = 0;
  int t = 0;  // output positions decided so far
  std::vector<Live> live;
  std::vector<Finished> finished;
};

BeamDecoder::BeamDecoder(const ModelConfig& c, std::unique_ptr<StepModel> model)
    : c_(&c), model_(std::move(model)) {}

BeamDecoder::BeamDecoder(BeamDecoder&&) noexcept = default;
BeamDecoder& BeamDecoder::operator=(BeamDecoder&&) noexcept = default;
BeamDecoder::~BeamDecoder() = default;

absl::StatusOr<BeamDecoder> BeamDecoder::Create(const ModelConfig& c, const ModelWeights& w,
                                                Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<CpuStepModel> model, CpuStepModel::Create(c, w, ws));
  return BeamDecoder(c, std::move(model));
}

BeamDecoder BeamDecoder::Create(const ModelConfig& c, std::unique_ptr<StepModel> model) {
  return BeamDecoder(c, std::move(model));
}

absl::StatusOr<BeamDecoder> BeamDecoder::Create(const ModelConfig& c, const ModelWeights& w,
                                                const DecodeBackend* backend, Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(std::unique_ptr<StepModel> step, MakeStepModel(c, w, backend, ws));
  return BeamDecoder(c, std::move(step));
}

int BeamDecoder::live_rows() const {
  int n = 0;
  for (const auto& s : live_) n += static_cast<int>(s->live.size());
  for (const auto& s : joining_) n += static_cast<int>(s->live.size());
  return n;
}

absl::StatusOr<std::vector<int64_t>> BeamDecoder::Add(
    const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& opt) {
  TNMT_RETURN_IF_ERROR(opt.Validate());
  const int batch = static_cast<int>(sources.size());
  if (batch == 0) return std::vector<int64_t>{};
  const ModelConfig& c = *c_;
  int src_max = 0;
  for (const auto& s : sources) {
    if (s.empty()) return absl::InvalidArgumentError("empty source (must end with </s>)");
    for (int32_t id : s) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("source token id ", id, " outside [0, ", c.vocab_size, ")"));
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
  for (int b = 0; b < batch; ++b) {
    std::copy(sources[b].begin(), sources[b].end(), ids.begin() + static_cast<size_t>(b) * src_max);
    lengths[b] = static_cast<int32_t>(sources[b].size());
  }
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> src_ids,
                        model_->AddSources(ids.data(), lengths.data(), batch, src_max));
  std::vector<int64_t> handles(batch);
  for (int b = 0; b < batch; ++b) {
    auto s = std::make_unique<Sentence>();
    s->handle = handles[b] = next_handle_++;
    s->source = src_ids[b];
    s->opt = opt;
    const int max_len = opt.max_length > 0 ? opt.max_length : lengths[b] + opt.max_length_offset;
    s->max_len = std::max(1, std::min(max_len, MaxPositions(c)));
    s->live.push_back({-1, 0.0, {}});
    joining_.push_back(std::move(s));
  }
  return handles;
}

absl::Status BeamDecoder::Release(Sentence& s) { return model_->ReleaseSource(s.source); }

bool BeamDecoder::Cancel(int64_t handle) {
  for (auto it = joining_.begin(); it != joining_.end(); ++it) {
    if ((*it)->handle == handle) {
      (void)Release(**it);
      joining_.erase(it);
      return true;
    }
  }
  auto it = std::find_if(live_.begin(), live_.end(), [&](const auto& s) { return s->handle == handle; });
  if (it == live_.end()) return false;
  std::unique_ptr<Sentence> gone = std::move(*it);
  live_.erase(it);
  // Keep every other sentence's rows, renumbered in order.
  std::vector<int32_t> parents;
  std::vector<int32_t> ids;
  for (auto& s : live_) {
    for (Live& l : s->live) {
      parents.push_back(l.row);
      ids.push_back(step_ids_[l.row]);
      l.row = static_cast<int>(parents.size()) - 1;
    }
  }
  step_ids_ = std::move(ids);
  // Rows and parents are valid by construction; a failure here would be a bug.
  (void)model_->Reorder(parents, {});
  (void)Release(*gone);
  return true;
}

absl::Status BeamDecoder::Step(std::vector<Done>* done) {
  const ModelConfig& c = *c_;
  const int V = c.vocab_size;
  if (!joining_.empty()) {  // new sentences get one row each at position 0
    const int old_rows = model_->rows();
    std::vector<int32_t> keep(old_rows), sources;
    for (int r = 0; r < old_rows; ++r) keep[r] = r;
    for (auto& s : joining_) sources.push_back(s->source);
    TNMT_RETURN_IF_ERROR(model_->Reorder(keep, sources));
    for (size_t i = 0; i < joining_.size(); ++i) {
      joining_[i]->live[0].row = old_rows + static_cast<int>(i);
      step_ids_.push_back(c.start_id());
      live_.push_back(std::move(joining_[i]));
    }
    joining_.clear();
  }
  const int rows = model_->rows();
  if (rows == 0) return absl::OkStatus();
  // Candidates per row: the most any sentence's walk may need, plus one for a </s> that is not
  // allowed yet; never more than the tokens other than pad.
  int k = 1;
  for (const auto& s : live_) k = std::max(k, s->opt.beam_size == 1 ? 1 : 2 * s->opt.beam_size);
  k = std::min(k + 1, V - 1);
  TNMT_RETURN_IF_ERROR(model_->Step(step_ids_.data(), k, &scores_));

  std::vector<int32_t> parents, next_ids;
  std::vector<Candidate> cands;
  std::vector<std::unique_ptr<Sentence>> still_live, finished;
  for (auto& sp : live_) {
    Sentence& s = *sp;
    const int t = ++s.t;
    const bool greedy = s.opt.beam_size == 1;
    const int K = s.opt.beam_size;
    const TokenRules rules{c.pad_id, c.eos_id, t >= s.max_len, t < s.opt.min_length};
    cands.clear();
    for (int h = 0; h < static_cast<int>(s.live.size()); ++h) {
      const Live& l = s.live[h];
      TopK(scores_, l.row, greedy ? 1 : 2 * K, rules, h, l.score, &cands);
    }
    std::sort(cands.begin(), cands.end(), Better);
    if (!greedy && static_cast<int>(cands.size()) > 2 * K) cands.resize(2 * K);
    std::vector<Live> next;
    for (const Candidate& cd : cands) {
      const Live& parent = s.live[cd.hyp];
      if (cd.token == c.eos_id) {
        const double norm = greedy ? cd.score : cd.score / LengthPenalty(t, s.opt.length_penalty, s.opt.length_penalty_style);
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
      const int bound_len = s.opt.length_penalty >= 0 ? s.max_len : t;
      stop = kth >= best_live / LengthPenalty(bound_len, s.opt.length_penalty, s.opt.length_penalty_style);
    }
    if (stop) {
      s.live.clear();
      finished.push_back(std::move(sp));
      continue;
    }
    for (Live& l : next) {
      parents.push_back(l.row);
      l.row = static_cast<int>(parents.size()) - 1;
      next_ids.push_back(l.ids.back());
    }
    s.live = std::move(next);
    still_live.push_back(std::move(sp));
  }
  live_ = std::move(still_live);
  step_ids_ = std::move(next_ids);
  TNMT_RETURN_IF_ERROR(model_->Reorder(parents, {}));

  for (auto& sp : finished) {
    TNMT_RETURN_IF_ERROR(Release(*sp));
    std::vector<Finished>& f = sp->finished;
    std::stable_sort(f.begin(), f.end(),
                     [](const Finished& x, const Finished& y) { return x.normalized > y.normalized; });
    Done d{sp->handle, {}};
    for (int i = 0; i < static_cast<int>(f.size()) && i < sp->opt.n_best; ++i) {
      d.result.hypotheses.push_back({std::move(f[i].ids), static_cast<float>(f[i].normalized)});
    }
    done->push_back(std::move(d));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DecodeResult>> Decode(const ModelConfig& c, const ModelWeights& w,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt, Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(BeamDecoder decoder, BeamDecoder::Create(c, w, ws));
  return Decode(decoder, sources, opt);
}

absl::StatusOr<std::vector<DecodeResult>> Decode(BeamDecoder& decoder,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt) {
  TNMT_RETURN_IF_ERROR(opt.Validate());
  std::vector<DecodeResult> results(sources.size());
  if (sources.empty()) return results;
  if (!decoder.empty()) return absl::FailedPreconditionError("Decode needs an idle decoder");
  TNMT_ASSIGN_OR_RETURN(std::vector<int64_t> handles, decoder.Add(sources, opt));
  std::vector<BeamDecoder::Done> done;
  while (!decoder.empty()) {
    done.clear();
    TNMT_RETURN_IF_ERROR(decoder.Step(&done));
    for (BeamDecoder::Done& d : done) results[d.handle - handles[0]] = std::move(d.result);
  }
  return results;
}

}  // namespace tnmt
