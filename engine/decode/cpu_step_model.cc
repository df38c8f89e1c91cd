// CpuStepModel; see cpu_step_model.h.
#include "engine/decode/cpu_step_model.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/layers/encoder.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tnmt {

namespace {

// top_logit/top_id: the k largest entries of logits: [vocab] except `exclude`, best first;
// equal values in increasing id (a later equal value never displaces an earlier one).
// Whether any of x[0, 16) is above t (vectorized; NaN is never above).
TNMT_VECTORIZE bool AnyAbove16(const float* x, float t) {
  bool any = false;
  for (int j = 0; j < 16; ++j) any |= x[j] > t;
  return any;
}

void RowTopK(const float* logits, int vocab, int k, int32_t exclude, float* top_logit,
             int32_t* top_id) {
  int n = 0;
  float threshold = -std::numeric_limits<float>::infinity();
  for (int32_t tok = 0; tok < vocab; ++tok) {
    // Once the list is full, skip 16 at a time while nothing beats its last entry (the
    // threshold only rises, so skipped tokens could never have entered).
    while (n == k && tok % 16 == 0 && tok + 16 <= vocab && !AnyAbove16(logits + tok, threshold)) tok += 16;
    if (tok >= vocab) break;
    const float v = logits[tok];
    if (n == k && !(v > threshold)) continue;
    if (tok == exclude) continue;
    int pos = n == k ? k - 1 : n;  // insertion point: after every value >= v
    while (pos > 0 && top_logit[pos - 1] < v) {
      top_logit[pos] = top_logit[pos - 1];
      top_id[pos] = top_id[pos - 1];
      --pos;
    }
    top_logit[pos] = v;
    top_id[pos] = tok;
    if (n < k) ++n;
    if (n == k) threshold = top_logit[k - 1];
  }
  for (; n < k; ++n) {  // fewer eligible tokens than k (tiny vocabularies)
    top_logit[n] = -std::numeric_limits<float>::infinity();
    top_id[n] = exclude;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuStepModel>> CpuStepModel::Create(const ModelConfig& c,
                                                                   const ModelWeights& w,
                                                                   Workspace* ws) {
  TNMT_ASSIGN_OR_RETURN(DecoderState state, DecoderState::Create(c, w, MaxPositions(c)));
  return std::unique_ptr<CpuStepModel>(new CpuStepModel(c, w, ws, std::move(state)));
}

absl::StatusOr<std::vector<int32_t>> CpuStepModel::AddSources(const int32_t* ids,
                                                              const int32_t* lengths, int batch,
                                                              int src_max) {
  TNMT_ASSIGN_OR_RETURN(Tensor enc, Encode(c_, w_, ids, lengths, batch, src_max, ws_));
  return state_.AddSources(enc, lengths);
}

absl::Status CpuStepModel::Step(const int32_t* ids, int k, StepScores* s) {
  const int rows = state_.rows();
  const int V = c_.vocab_size;
  TNMT_RETURN_IF_ERROR(s->Reset(rows, k, V));
  logits_.resize(static_cast<size_t>(rows) * V);
  TNMT_RETURN_IF_ERROR(DecoderForward(c_, w_, &state_, ids, 1, logits_.data(), ws_));
  // Per row, on the compute threads: the log-softmax normalizer and the k best tokens (the row
  // is still in cache for the second pass).
  kernels::cpu::ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits_.data() + r * V;
      kernels::cpu::LogSumExp(s->lse.data() + r, row, 1, V);
      s->eos_logit[r] = row[c_.eos_id];
      RowTopK(row, V, k, c_.pad_id, s->top_logit.data() + r * k, s->top_id.data() + r * k);
    }
  });
  return absl::OkStatus();
}

}  // namespace tnmt
