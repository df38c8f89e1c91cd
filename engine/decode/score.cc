// Forced decoding; see score.h.
#include "engine/decode/score.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/weights.h"

namespace tnmt {

absl::StatusOr<std::vector<PairScore>> ScoreBatch(const ModelConfig& c, StepModel* model,
                                                  const std::vector<std::vector<int32_t>>& sources,
                                                  const std::vector<std::vector<int32_t>>& targets) {
  const int n = static_cast<int>(sources.size());
  if (static_cast<int>(targets.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat(n, " sources but ", targets.size(), " targets"));
  }
  if (model->rows() != 0) return absl::FailedPreconditionError("ScoreBatch needs an empty step model");
  std::vector<PairScore> out(n);
  if (n == 0) return out;
  const int limit = MaxPositions(c);
  int src_max = 0;
  for (int i = 0; i < n; ++i) {
    const int len = static_cast<int>(sources[i].size());
    if (len < 1 || sources[i].back() != c.eos_id) {
      return absl::InvalidArgumentError(absl::StrCat("source ", i, " does not end with eos_id"));
    }
    if (len > limit) return absl::InvalidArgumentError(absl::StrCat("source ", i, ": ", len, " tokens exceed ", limit));
    if (static_cast<int>(targets[i].size()) + 1 > limit) {
      return absl::InvalidArgumentError(absl::StrCat("target ", i, ": ", targets[i].size() + 1, " tokens exceed ", limit));
    }
    for (int32_t id : targets[i]) {
      if (id < 0 || id >= c.vocab_size) return absl::InvalidArgumentError(absl::StrCat("target token id ", id, " outside the vocabulary"));
    }
    src_max = std::max(src_max, len);
    out[i].token_scores.reserve(targets[i].size() + 1);
  }
  std::vector<int32_t> ids(static_cast<size_t>(n) * src_max, c.pad_id), lengths(n);
  for (int i = 0; i < n; ++i) {
    std::copy(sources[i].begin(), sources[i].end(), ids.begin() + static_cast<size_t>(i) * src_max);
    lengths[i] = static_cast<int32_t>(sources[i].size());
  }
  TNMT_ASSIGN_OR_RETURN(std::vector<int32_t> handles, model->AddSources(ids.data(), lengths.data(), n, src_max));
  absl::Status status = model->Reorder({}, handles);
  // Row r scores pair live[r]; a pair leaves once its </s> is scored.
  std::vector<int32_t> live(n);
  for (int i = 0; i < n; ++i) live[i] = i;
  StepScores scores;
  std::vector<int32_t> step_ids;
  for (int t = 0; status.ok() && !live.empty(); ++t) {
    step_ids.resize(live.size());
    scores.gather_ids.resize(live.size());
    scores.gather_offsets.resize(live.size() + 1);
    for (size_t r = 0; r <= live.size(); ++r) scores.gather_offsets[r] = static_cast<int32_t>(r);
    for (size_t r = 0; r < live.size(); ++r) {
      const std::vector<int32_t>& tgt = targets[live[r]];
      step_ids[r] = t == 0 ? c.start_id() : tgt[t - 1];
      scores.gather_ids[r] = t < static_cast<int>(tgt.size()) ? tgt[t] : c.eos_id;
    }
    status = model->Step(step_ids.data(), 1, &scores);
    if (!status.ok()) break;
    std::vector<int32_t> keep, still;
    for (size_t r = 0; r < live.size(); ++r) {
      PairScore& p = out[live[r]];
      const float lp = scores.gather_logit[r] - scores.lse[r];
      p.token_scores.push_back(lp);
      p.score += lp;
      if (t < static_cast<int>(targets[live[r]].size())) {
        keep.push_back(static_cast<int32_t>(r));
        still.push_back(live[r]);
      }
    }
    if (keep.size() != live.size()) status = model->Reorder(keep, {});
    live = std::move(still);
  }
  if (model->rows() > 0) {  // after a failure: leave the model empty as promised
    absl::Status r = model->Reorder({}, {});
    if (status.ok()) status = r;
  }
  for (int32_t h : handles) {
    absl::Status r = model->ReleaseSource(h);
    if (status.ok()) status = r;
  }
  if (!status.ok()) return status;
  return out;
}

}  // namespace tnmt
