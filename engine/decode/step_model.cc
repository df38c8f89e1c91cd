// StepScores; see step_model.h.
#include "engine/decode/step_model.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/topk.h"

namespace tnmt {

absl::Status StepScores::Reset(int n, int candidates, int vocab_size) {
  if (candidates < 1 || candidates >= vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("step candidates k=", candidates, " outside [1, ", vocab_size, ")"));
  }
  rows = n;
  k = candidates;
  lse.resize(n);
  eos_logit.resize(n);
  top_logit.resize(static_cast<size_t>(n) * candidates);
  top_id.resize(static_cast<size_t>(n) * candidates);
  return absl::OkStatus();
}

absl::Status StepScores::CheckGather(int n, int vocab_size) {
  if (gather_offsets.empty()) {
    gather_logit.clear();
    return absl::OkStatus();
  }
  if (static_cast<int>(gather_offsets.size()) != n + 1 || gather_offsets[0] != 0 ||
      gather_offsets[n] != static_cast<int32_t>(gather_ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("gather_offsets: ", gather_offsets.size(), " offsets for ", n,
                                                   " rows and ", gather_ids.size(), " ids"));
  }
  for (int r = 0; r < n; ++r) {
    if (gather_offsets[r + 1] < gather_offsets[r]) {
      return absl::InvalidArgumentError(absl::StrCat("gather_offsets decrease at row ", r));
    }
  }
  for (int32_t id : gather_ids) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("gathered token id ", id, " outside [0, ", vocab_size, ")"));
    }
  }
  gather_logit.resize(gather_ids.size());
  return absl::OkStatus();
}

absl::Status StepScores::CheckAlignmentLayers(int decoder_layers) const {
  for (int32_t layer : alignment_layers) {
    if (layer < 0 || layer >= decoder_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("alignment layer ", layer, " outside [0, ", decoder_layers, ")"));
    }
  }
  return absl::OkStatus();
}

void ScoreRow(const float* row, int64_t r, int vocab, int eos_id, int pad_id, StepScores* s) {
  const int V = vocab, k = s->k;
  if (s->want_lse || s->want_logprobs) {
    kernels::cpu::LogSumExp(s->lse.data() + r, row, 1, V);
  } else {
    s->lse[r] = 0.0f;
  }
  if (s->want_logprobs) {
    float* lp = s->logprobs.data() + r * V;
    const float lse = s->lse[r];
    for (int v = 0; v < V; ++v) lp[v] = row[v] - lse;
  }
  s->eos_logit[r] = row[eos_id];
  if (!s->gather_offsets.empty()) {
    for (int32_t g = s->gather_offsets[r]; g < s->gather_offsets[r + 1]; ++g) s->gather_logit[g] = row[s->gather_ids[g]];
  }
  kernels::cpu::TopK(s->top_logit.data() + r * k, s->top_id.data() + r * k, row, 1, V, k, pad_id);
}

}  // namespace tnmt
