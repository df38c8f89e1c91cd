// Decoding; see beam_search.h. Scores are accumulated in double on top of float32 logits.
#include "engine/decode/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/decode/option_table.h"
#include "kernels/counter_uniform.h"

namespace tnmt {

namespace {

struct Live {
  int row;                     // row in the decoder state
  double score;                // sum of log-probabilities
  std::vector<int32_t> ids;    // generated so far
  std::vector<float> token_scores;  // per id (return_token_scores)
  std::vector<int32_t> alignments;  // per id (return_alignments)
};

struct Finished {
  double normalized;
  double raw;
  std::vector<int32_t> ids;  // without </s>
  std::vector<float> token_scores;  // per id, then </s>
  std::vector<int32_t> alignments;
};

struct Candidate {
  double score;
  int hyp;      // index in the sentence's live list
  int32_t token;
  double logprob = 0;  // this token's (changed) log-probability
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
    out->push_back({base + s.eos_logit[row] - lse, hyp, rules.eos, s.eos_logit[row] - lse});
    return;
  }
  const float* logit = s.top_logit.data() + static_cast<int64_t>(row) * s.k;
  const int32_t* id = s.top_id.data() + static_cast<int64_t>(row) * s.k;
  int taken = 0;
  for (int i = 0; i < s.k && taken < k; ++i) {
    if (!rules.Allowed(id[i])) continue;
    out->push_back({base + logit[i] - lse, hyp, id[i], logit[i] - lse});
    ++taken;
  }
}

// The distinct tokens of ids, sorted.
std::vector<int32_t> Distinct(const std::vector<int32_t>& ids) {
  std::vector<int32_t> d = ids;
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

// Tokens that would repeat an n-gram of ids (n >= 1): every token that followed an earlier
// occurrence of ids' last n - 1 tokens; sorted, distinct.
std::vector<int32_t> NgramBans(const std::vector<int32_t>& ids, int n) {
  std::vector<int32_t> banned;
  const int len = static_cast<int>(ids.size());
  if (n <= 0 || len < n) return banned;
  for (int i = 0; i + n <= len; ++i) {
    bool match = true;
    for (int j = 0; j < n - 1 && match; ++j) match = ids[i + j] == ids[len - (n - 1) + j];
    if (match) banned.push_back(ids[i + n - 1]);
  }
  return Distinct(banned);
}

bool Contains(const std::vector<int32_t>& sorted, int32_t tok) {
  return std::binary_search(sorted.begin(), sorted.end(), tok);
}

// TopK with the options' token rules and log-probability changes: tokens banned by
// disable_unk or no_repeat_ngram_size are skipped, and the tokens already in the hypothesis get
// their log-probability times repetition_penalty (their raw logits gathered at
// gather[0, penalized.size())). The step's scores must hold k + 1 + (disable_unk) +
// |distinct ids| candidates so that k remain after every exclusion.
void TopKChanged(const StepScores& s, int row, int k, const TokenRules& rules, const DecodeOptions& o,
                 int32_t unk, const Live& l, const float* gathered, int hyp, std::vector<Candidate>* out) {
  if (rules.only_eos) {
    TopK(s, row, k, rules, hyp, l.score, out);
    return;
  }
  const float lse = s.lse[row];
  std::vector<int32_t> banned = NgramBans(l.ids, o.no_repeat_ngram_size);
  if (o.disable_unk) {
    banned.push_back(unk);
    banned = Distinct(banned);
  }
  const std::vector<int32_t> penalized =
      o.repetition_penalty != 1.0f ? Distinct(l.ids) : std::vector<int32_t>{};
  const size_t first = out->size();
  for (size_t i = 0; i < penalized.size(); ++i) {
    const int32_t tok = penalized[i];
    if (!rules.Allowed(tok) || Contains(banned, tok)) continue;
    const double lp = (static_cast<double>(gathered[i]) - lse) * o.repetition_penalty;
    out->push_back({l.score + lp, hyp, tok, lp});
  }
  const float* logit = s.top_logit.data() + static_cast<int64_t>(row) * s.k;
  const int32_t* id = s.top_id.data() + static_cast<int64_t>(row) * s.k;
  int taken = 0;
  for (int i = 0; i < s.k && taken < k; ++i) {
    if (!rules.Allowed(id[i]) || Contains(banned, id[i]) || Contains(penalized, id[i])) continue;
    out->push_back({l.score + logit[i] - lse, hyp, id[i], logit[i] - lse});
    ++taken;
  }
  std::sort(out->begin() + first, out->end(), Better);
  if (static_cast<int>(out->size() - first) > k) out->resize(first + k);
}

// Sampling: one of `cands` (one hypothesis' allowed tokens, best first), drawn with
// probabilities exp(logprob / temperature) renormalised over them and cut to the smallest
// prefix whose mass reaches topp; u in [0, 1).
size_t Sample(const std::vector<Candidate>& cands, const DecodeOptions& o, double u) {
  std::vector<double> w(cands.size());
  double total = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    w[i] = std::exp((cands[i].logprob - cands[0].logprob) / o.sampling_temperature);
    total += w[i];
  }
  size_t keep = cands.size();
  if (o.sampling_topp < 1.0f) {
    double mass = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      mass += w[i];
      if (mass >= o.sampling_topp * total) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (size_t i = 0; i < keep; ++i) kept += w[i];
  const double target = u * kept;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += w[i];
    if (cum > target) return i;
  }
  return keep - 1;
}

// Sources without prefixes, each sampling from the stream of its index.
std::vector<DecodeInput> InputsOf(const std::vector<std::vector<int32_t>>& sources) {
  std::vector<DecodeInput> inputs(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    inputs[i].source = sources[i];
    inputs[i].stream = i;
  }
  return inputs;
}

// Candidates one hypothesis contributes per step, before exclusions: the beam's 2K, greedy
// search's 1, or sampling's top-k (0: every token of a `vocab`-token vocabulary).
int CandidatesWanted(const DecodeOptions& o, int vocab) {
  if (o.sampling()) return o.sampling_topk == 0 ? vocab : o.sampling_topk;
  return o.beam_size == 1 ? 1 : 2 * o.beam_size;
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
  std::vector<int32_t> prefix;  // forced first tokens
  uint64_t stream = 0;          // sampling stream
  int alignment_layer = -1;     // resolved (return_alignments)
  std::vector<Live> live;
  std::vector<Finished> finished;
};

BeamDecoder::BeamDecoder(const ModelConfig& c, std::unique_ptr<StepModel> model)
    : c_(&c), model_(std::move(model)) {}

BeamDecoder::BeamDecoder(BeamDecoder&&) noexcept = default;
BeamDecoder& BeamDecoder::operator=(BeamDecoder&&) noexcept = default;
BeamDecoder::~BeamDecoder() = default;

BeamDecoder BeamDecoder::Create(const ModelConfig& c, std::unique_ptr<StepModel> model) {
  return BeamDecoder(c, std::move(model));
}

int BeamDecoder::live_rows() const {
  int n = 0;
  for (const auto& s : live_) n += static_cast<int>(s->live.size());
  for (const auto& s : joining_) n += static_cast<int>(s->live.size());
  return n;
}

absl::StatusOr<std::vector<int64_t>> BeamDecoder::Add(
    const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& opt) {
  return Add(InputsOf(sources), opt);
}

absl::StatusOr<std::vector<int64_t>> BeamDecoder::Add(const std::vector<DecodeInput>& inputs,
                                                      const DecodeOptions& opt) {
  const ModelConfig& c = *c_;
  const int layers = c.decoder_layers;
  // The alignment layer is checked against the model's layers only where alignments are asked for.
  TNMT_RETURN_IF_ERROR(ValidateDecodeOptions(opt, OptionTerms::kEngine, {opt.return_alignments ? layers : 0}));
  if (opt.use_shortlist && !model_->has_shortlist()) {
    return absl::InvalidArgumentError(
        "use_shortlist: the model has no vocabulary shortlist (load one with the model, one model on the CPU)");
  }
  const int batch = static_cast<int>(inputs.size());
  if (batch == 0) return std::vector<int64_t>{};
  int src_max = 0;
  for (const DecodeInput& in : inputs) {
    const std::vector<int32_t>& s = in.source;
    if (s.empty()) return absl::InvalidArgumentError("empty source (must end with </s>)");
    for (int32_t id : s) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("source token id ", id, " outside [0, ", c.vocab_size, ")"));
      }
    }
    for (int32_t id : in.prefix) {
      if (id < 0 || id >= c.vocab_size || id == c.eos_id || id == c.pad_id) {
        return absl::InvalidArgumentError(absl::StrCat(
            "target prefix token id ", id, (id == c.eos_id || id == c.pad_id) ? " is </s> or <pad>" : " is outside the vocabulary"));
      }
    }
    src_max = std::max<int>(src_max, s.size());
  }
  if (src_max > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("source of ", src_max,
                                                   " tokens exceeds the model's limit of ",
                                                   MaxPositions(c), " positions"));
  }
  std::vector<int> max_lens(batch);
  for (int b = 0; b < batch; ++b) {
    max_lens[b] = MaxOutputLength(opt, static_cast<int>(inputs[b].source.size()), c);
    if (static_cast<int>(inputs[b].prefix.size()) >= max_lens[b]) {
      return absl::InvalidArgumentError(absl::StrCat("target prefix of ", inputs[b].prefix.size(),
                                                     " tokens leaves no room for </s> within the maximum output length of ",
                                                     max_lens[b], " tokens"));
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(batch) * src_max, c.pad_id);
  std::vector<int32_t> lengths(batch);
  for (int b = 0; b < batch; ++b) {
    const std::vector<int32_t>& s = inputs[b].source;
    std::copy(s.begin(), s.end(), ids.begin() + static_cast<size_t>(b) * src_max);
    lengths[b] = static_cast<int32_t>(s.size());
  }
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> src_ids,
                        model_->AddSources(ids.data(), lengths.data(), batch, src_max));
  std::vector<int64_t> handles(batch);
  for (int b = 0; b < batch; ++b) {
    auto s = std::make_unique<Sentence>();
    s->handle = handles[b] = next_handle_++;
    s->source = src_ids[b];
    s->opt = opt;
    s->max_len = max_lens[b];
    s->prefix = inputs[b].prefix;
    s->stream = inputs[b].stream;
    if (opt.return_alignments) s->alignment_layer = opt.alignment_layer >= 0 ? opt.alignment_layer : layers - 1;
    s->live.push_back({-1, 0.0, {}, {}, {}});
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
  // allowed yet and one per token the options may exclude or lower; never more than the tokens
  // other than pad. Gathered logits: a prefix's forced token, or the tokens a repetition
  // penalty applies to.
  int k = 1;
  bool gather = false, want_lse = false, shortlist = !live_.empty();
  std::vector<int32_t> layers;
  for (const auto& s : live_) {
    const DecodeOptions& o = s->opt;
    shortlist = shortlist && o.use_shortlist;
    // The normalizer is read by beam search (across hypotheses), sampling, a repetition
    // penalty (which scales log-probabilities) and every returned score.
    want_lse = want_lse || o.beam_size > 1 || o.sampling() || o.repetition_penalty != 1.0f ||
               o.return_scores || o.return_token_scores;
    int want = CandidatesWanted(o, V) + (o.disable_unk ? 1 : 0);
    if (o.no_repeat_ngram_size > 0 || o.repetition_penalty != 1.0f) {
      size_t most = 0;
      for (const Live& l : s->live) most = std::max(most, l.ids.size());
      want += static_cast<int>(most);
    }
    k = std::max(k, want);
    gather = gather || o.repetition_penalty != 1.0f || s->t < static_cast<int>(s->prefix.size());
    if (s->alignment_layer >= 0) layers.push_back(s->alignment_layer);
  }
  k = std::min(k + 1, V - 1);
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  scores_.gather_offsets.clear();
  scores_.gather_ids.clear();
  if (gather) {
    scores_.gather_offsets.assign(rows + 1, 0);
    std::vector<std::vector<int32_t>> per_row(rows);
    for (const auto& s : live_) {
      const bool forcing = s->t < static_cast<int>(s->prefix.size());
      for (const Live& l : s->live) {
        if (forcing) {
          per_row[l.row] = {s->prefix[s->t]};
        } else if (s->opt.repetition_penalty != 1.0f) {
          per_row[l.row] = Distinct(l.ids);
        }
      }
    }
    for (int r = 0; r < rows; ++r) {
      scores_.gather_ids.insert(scores_.gather_ids.end(), per_row[r].begin(), per_row[r].end());
      scores_.gather_offsets[r + 1] = static_cast<int32_t>(scores_.gather_ids.size());
    }
  }
  scores_.alignment_layers = layers;
  scores_.want_lse = want_lse;
  scores_.use_shortlist = shortlist;
  TNMT_RETURN_IF_ERROR(model_->Step(step_ids_.data(), k, &scores_));

  std::vector<int32_t> parents, next_ids;
  std::vector<Candidate> cands;
  std::vector<std::unique_ptr<Sentence>> still_live, finished;
  for (auto& sp : live_) {
    Sentence& s = *sp;
    const int t = ++s.t;
    const DecodeOptions& o = s.opt;
    const bool greedy = o.beam_size == 1;
    const int K = o.beam_size;
    const bool changed = o.disable_unk || o.no_repeat_ngram_size > 0 || o.repetition_penalty != 1.0f;
    const TokenRules rules{c.pad_id, c.eos_id, t >= s.max_len, t < o.min_length};
    cands.clear();
    if (t <= static_cast<int>(s.prefix.size())) {  // a forced prefix token (one live hypothesis)
      const Live& l = s.live[0];
      const double lp = static_cast<double>(scores_.gather_logit[scores_.gather_offsets[l.row]]) - scores_.lse[l.row];
      cands.push_back({l.score + lp, 0, s.prefix[t - 1], lp});
    } else {
      for (int h = 0; h < static_cast<int>(s.live.size()); ++h) {
        const Live& l = s.live[h];
        const int want = CandidatesWanted(o, V);
        if (changed) {
          const float* gathered = scores_.gather_offsets.empty() ? nullptr
                                                                 : scores_.gather_logit.data() + scores_.gather_offsets[l.row];
          TopKChanged(scores_, l.row, want, rules, o, c.unk_id, l, gathered, h, &cands);
        } else {
          TopK(scores_, l.row, want, rules, h, l.score, &cands);
        }
      }
      std::sort(cands.begin(), cands.end(), Better);
      if (o.sampling() && !cands.empty()) {
        const size_t pick = Sample(cands, o, kernels::CounterUniform(o.seed, s.stream, static_cast<uint64_t>(t)));
        cands = {cands[pick]};
      }
      if (!greedy && static_cast<int>(cands.size()) > 2 * K) cands.resize(2 * K);
    }
    const int layer_index = s.alignment_layer < 0 ? -1
        : static_cast<int>(std::lower_bound(layers.begin(), layers.end(), s.alignment_layer) - layers.begin());
    std::vector<Live> next;
    for (const Candidate& cd : cands) {
      const Live& parent = s.live[cd.hyp];
      if (cd.token == c.eos_id) {
        const double norm = greedy ? cd.score : cd.score / LengthPenalty(t, o.length_penalty, o.length_penalty_style);
        Finished f{norm, cd.score, parent.ids, parent.token_scores, parent.alignments};
        if (o.return_token_scores) f.token_scores.push_back(static_cast<float>(cd.logprob));
        s.finished.push_back(std::move(f));
      } else {
        Live l{parent.row, cd.score, parent.ids, parent.token_scores, parent.alignments};
        l.ids.push_back(cd.token);
        if (o.return_token_scores) l.token_scores.push_back(static_cast<float>(cd.logprob));
        if (layer_index >= 0) l.alignments.push_back(scores_.aligned[static_cast<size_t>(layer_index) * rows + parent.row]);
        next.push_back(std::move(l));
      }
      // The walk ends once K hypotheses are live (greedy: after the first candidate).
      if (greedy || static_cast<int>(next.size()) == K) break;
    }
    // A live hypothesis whose best possible normalized score (its score divided by lp(max_len),
    // or by lp(t) for alpha < 0) cannot beat the n_best-th best finished one is dropped: it and
    // its descendants can never enter the hypotheses returned (n_best <= K). Nothing else
    // changes: every candidate that could rank above a dropped one is itself below the same
    // bar (candidates are ranked by score), so the surviving hypotheses, the walk over them
    // and the output are those of decoding with the dropped rows kept. The sentence stops when
    // nothing is live (then the output is final).
    const int N = o.n_best;
    if (!next.empty() && !greedy && static_cast<int>(s.finished.size()) >= N) {
      std::vector<double> norms;
      for (const Finished& f : s.finished) norms.push_back(f.normalized);
      std::nth_element(norms.begin(), norms.begin() + (N - 1), norms.end(), std::greater<>());
      const double nth = norms[N - 1];
      const int bound_len = s.opt.length_penalty >= 0 ? s.max_len : t;
      const double lp = LengthPenalty(bound_len, o.length_penalty, o.length_penalty_style);
      const auto hopeless = [&](const Live& l) { return nth >= l.score / lp; };
      if (prune_) {
        next.erase(std::remove_if(next.begin(), next.end(), hopeless), next.end());
      } else if (std::all_of(next.begin(), next.end(), hopeless)) {
        next.clear();
      }
    }
    const bool stop = next.empty();
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
      const float score = sp->opt.return_scores ? static_cast<float>(f[i].normalized) : 0.0f;
      d.result.hypotheses.push_back({std::move(f[i].ids), score,
                                     std::move(f[i].token_scores), std::move(f[i].alignments)});
    }
    done->push_back(std::move(d));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DecodeResult>> Decode(BeamDecoder& decoder,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt) {
  return Decode(decoder, InputsOf(sources), opt);
}

absl::StatusOr<std::vector<DecodeResult>> Decode(BeamDecoder& decoder, const std::vector<DecodeInput>& inputs,
                                                 const DecodeOptions& opt) {
  return DecodeToEnd(decoder, inputs, opt);
}

}  // namespace tnmt
