// FlatBeamDecoder; see flat_beam_decoder.h. The bookkeeping BeamDecoder::Step does around its
// candidate walk (joining rows, row order, parents, released sources, results) is done here
// the same way; the walk itself is the flat step's.
#include "engine/decode/flat_beam_decoder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/decode/option_table.h"

namespace tnmt {

struct FlatBeamDecoder::Sentence {
  int64_t handle = 0;
  int32_t source = 0;
  int max_len = 0;
  int t = 0;                               // output positions decided so far
  std::vector<double> score;               // per live hypothesis
  std::vector<std::vector<int32_t>> ids;   // per live hypothesis: generated so far
  bool finished = false;                   // has a finished hypothesis
  double best = 0;                         // its best normalized score
  std::vector<int32_t> best_ids;           // its tokens, without </s>
};

bool FlatBeamDecoder::Supports(const DecodeOptions& o) {
  return o.beam_size >= 1 && o.beam_size <= kernels::kMaxFlatBeam && o.n_best == 1 && !o.sampling() &&
         !o.disable_unk && o.no_repeat_ngram_size == 0 && o.repetition_penalty == 1.0f &&
         !o.return_alignments && !o.return_token_scores && !o.use_shortlist;
}

FlatBeamDecoder::FlatBeamDecoder(const ModelConfig& c, std::unique_ptr<StepModel> model,
                                 std::unique_ptr<FlatBeamStepper> stepper)
    : c_(&c), model_(std::move(model)), stepper_(std::move(stepper)) {}

FlatBeamDecoder::FlatBeamDecoder(FlatBeamDecoder&&) noexcept = default;
FlatBeamDecoder& FlatBeamDecoder::operator=(FlatBeamDecoder&&) noexcept = default;
FlatBeamDecoder::~FlatBeamDecoder() = default;

int FlatBeamDecoder::live_rows() const {
  int n = 0;
  for (const auto& s : live_) n += static_cast<int>(s->ids.size());
  return n + static_cast<int>(joining_.size());
}

absl::StatusOr<std::vector<int64_t>> FlatBeamDecoder::Add(
    const std::vector<std::vector<int32_t>>& sources, const DecodeOptions& opt) {
  std::vector<DecodeInput> inputs(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) inputs[i].source = sources[i];
  return Add(inputs, opt);
}

absl::StatusOr<std::vector<int64_t>> FlatBeamDecoder::Add(const std::vector<DecodeInput>& inputs,
                                                          const DecodeOptions& opt) {
  const ModelConfig& c = *c_;
  TNMT_RETURN_IF_ERROR(ValidateDecodeOptions(opt, OptionTerms::kEngine, {0}));
  if (!Supports(opt)) {
    return absl::InvalidArgumentError("these decoding options need BeamDecoder, not the flat beam step");
  }
  if (!empty() && opt_.has_value() && opt_->Tie() != opt.Tie()) {
    return absl::InvalidArgumentError("a flat beam decode takes one set of decoding options");
  }
  const int batch = static_cast<int>(inputs.size());
  if (batch == 0) return std::vector<int64_t>{};
  int src_max = 0;
  for (const DecodeInput& in : inputs) {
    if (!in.prefix.empty()) return absl::InvalidArgumentError("the flat beam step takes no target prefix");
    if (in.source.empty()) return absl::InvalidArgumentError("empty source (must end with </s>)");
    for (int32_t id : in.source) {
      if (id < 0 || id >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat("source token id ", id, " outside [0, ", c.vocab_size, ")"));
      }
    }
    src_max = std::max<int>(src_max, in.source.size());
  }
  if (src_max > MaxPositions(c)) {
    return absl::InvalidArgumentError(absl::StrCat("source of ", src_max, " tokens exceeds the model's limit of ",
                                                   MaxPositions(c), " positions"));
  }
  std::vector<int32_t> ids(static_cast<size_t>(batch) * src_max, c.pad_id);
  std::vector<int32_t> lengths(batch);
  for (int b = 0; b < batch; ++b) {
    const std::vector<int32_t>& s = inputs[b].source;
    std::copy(s.begin(), s.end(), ids.begin() + static_cast<size_t>(b) * src_max);
    lengths[b] = static_cast<int32_t>(s.size());
  }
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> src_ids, model_->AddSources(ids.data(), lengths.data(), batch, src_max));
  opt_ = opt;
  std::vector<int64_t> handles(batch);
  for (int b = 0; b < batch; ++b) {
    auto s = std::make_unique<Sentence>();
    s->handle = handles[b] = next_handle_++;
    s->source = src_ids[b];
    s->max_len = MaxOutputLength(opt, lengths[b], c);
    s->score = {0.0};
    s->ids = {{}};
    joining_.push_back(std::move(s));
  }
  return handles;
}

absl::Status FlatBeamDecoder::Step(std::vector<Done>* done) {
  const ModelConfig& c = *c_;
  if (!joining_.empty()) {  // new sentences get one row each at position 0, after the others
    const int old_rows = model_->rows();
    std::vector<int32_t> keep(old_rows), sources;
    for (int r = 0; r < old_rows; ++r) keep[r] = r;
    for (auto& s : joining_) sources.push_back(s->source);
    TNMT_RETURN_IF_ERROR(model_->Reorder(keep, sources));
    for (auto& s : joining_) {
      step_ids_.push_back(c.start_id());
      live_.push_back(std::move(s));
    }
    joining_.clear();
  }
  if (model_->rows() == 0) return absl::OkStatus();
  const DecodeOptions& o = *opt_;
  const int K = o.beam_size;
  const bool greedy = K == 1;
  FlatBeamStep& st = step_;
  // BeamDecoder's candidates per row: the walk's 2K (greedy: 1) plus one for a </s> not yet
  // allowed, never more than the tokens other than pad.
  st.beam = K;
  st.k = std::min((greedy ? 1 : 2 * K) + 1, c.vocab_size - 1);
  st.eos_id = c.eos_id;
  st.pad_id = c.pad_id;
  st.min_length = o.min_length;
  st.want_lse = !greedy || o.return_scores;
  const size_t S = live_.size();
  st.row_begin.resize(S);
  st.live.resize(S);
  st.t.resize(S);
  st.max_len.resize(S);
  st.finished.resize(S);
  st.lp_t.resize(S);
  st.lp_bound.resize(S);
  st.best.resize(S);
  st.score.clear();
  for (size_t i = 0; i < S; ++i) {
    const Sentence& s = *live_[i];
    const int t = s.t + 1;
    st.row_begin[i] = static_cast<int32_t>(st.score.size());
    st.live[i] = static_cast<int32_t>(s.score.size());
    st.t[i] = t;
    st.max_len[i] = s.max_len;
    st.finished[i] = s.finished ? 1 : 0;
    st.best[i] = s.best;
    st.lp_t[i] = greedy ? 1.0 : LengthPenalty(t, o.length_penalty, o.length_penalty_style);
    st.lp_bound[i] = LengthPenalty(o.length_penalty >= 0 ? s.max_len : t, o.length_penalty, o.length_penalty_style);
    st.score.insert(st.score.end(), s.score.begin(), s.score.end());
  }
  st.SizeOutputs();
  TNMT_RETURN_IF_ERROR(stepper_->Step(*model_, step_ids_.data(), &st));

  std::vector<int32_t> parents, next_ids;
  std::vector<std::unique_ptr<Sentence>> still_live, finished;
  for (size_t i = 0; i < S; ++i) {
    std::unique_ptr<Sentence>& sp = live_[i];
    Sentence& s = *sp;
    const int32_t begin = st.row_begin[i];
    s.t = st.t[i];
    s.finished = st.finished_out[i] != 0;
    s.best = st.best_out[i];
    if (st.best_row[i] >= 0) s.best_ids = s.ids[st.best_row[i] - begin];
    const int n = st.next_live[i];
    if (n == 0) {
      finished.push_back(std::move(sp));
      continue;
    }
    std::vector<double> score(n);
    std::vector<std::vector<int32_t>> ids(n);
    for (int j = 0; j < n; ++j) {
      const size_t slot = i * static_cast<size_t>(K) + j;
      const int32_t parent = st.parent[slot];
      score[j] = st.next_score[slot];
      ids[j] = s.ids[parent - begin];
      ids[j].push_back(st.token[slot]);
      parents.push_back(parent);
      next_ids.push_back(st.token[slot]);
    }
    s.score = std::move(score);
    s.ids = std::move(ids);
    still_live.push_back(std::move(sp));
  }
  live_ = std::move(still_live);
  step_ids_ = std::move(next_ids);
  TNMT_RETURN_IF_ERROR(model_->Reorder(parents, {}));
  for (auto& sp : finished) {
    TNMT_RETURN_IF_ERROR(model_->ReleaseSource(sp->source));
    Done d{sp->handle, {}};
    if (sp->finished) {
      d.result.hypotheses.push_back({std::move(sp->best_ids), o.return_scores ? static_cast<float>(sp->best) : 0.0f, {}, {}});
    }
    done->push_back(std::move(d));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DecodeResult>> Decode(FlatBeamDecoder& decoder,
                                                 const std::vector<std::vector<int32_t>>& sources,
                                                 const DecodeOptions& opt) {
  return DecodeToEnd(decoder, sources, opt);
}

}  // namespace tnmt
