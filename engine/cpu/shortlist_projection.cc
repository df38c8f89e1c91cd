// ShortlistProjection; see shortlist_projection.h.
#include "engine/cpu/shortlist_projection.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/topk.h"

namespace tnmt {

namespace k = kernels::cpu;

void ShortlistProjection::SetCandidates(std::vector<int32_t> candidates) {
  const int d = c_.d_model, V = c_.vocab_size;
  if (position_.size() != static_cast<size_t>(V)) position_.assign(V, -1);
  for (int32_t id : ids_) position_[id] = -1;
  ids_ = std::move(candidates);
  const int32_t pad = c_.pad_id;
  if (pad >= 0 && pad < V && !std::binary_search(ids_.begin(), ids_.end(), pad)) {
    ids_.insert(std::lower_bound(ids_.begin(), ids_.end(), pad), pad);
  }
  const int C = size();
  weight_.resize(static_cast<size_t>(C) * d);
  const float* full = w_.output_projection.f32();
  const bool has_bias = c_.final_logits_bias;
  bias_.resize(has_bias ? C : 0);
  pad_position_ = -1;
  for (int i = 0; i < C; ++i) {
    if (ids_[i] == pad) pad_position_ = i;
    position_[ids_[i]] = i;
    std::memcpy(weight_.data() + static_cast<size_t>(i) * d, full + static_cast<size_t>(ids_[i]) * d, sizeof(float) * d);
    if (has_bias) bias_[i] = w_.final_logits_bias.f32()[ids_[i]];
  }
  const k::PackedMatrix& model = w_.output_projection_packed;
  if (model.empty() || C == 0) {
    packed_ = k::PackedMatrix();
  } else {
    packed_ = model.is_int8() ? k::PackedMatrix::PackInt8(C, d, weight_.data(), d)
                              : k::PackedMatrix::Pack(C, d, weight_.data(), d);
  }
}

bool ShortlistProjection::Covers(const std::vector<int32_t>& ids) const {
  if (position_.empty()) return ids.empty();
  for (int32_t id : ids) {
    if (position_[id] < 0) return false;
  }
  return true;
}

void ShortlistProjection::Logits(float* logits, const float* x, int64_t rows) const {
  // As CpuLayerOps::Logits over the full projection.
  const int d = c_.d_model, C = size();
  const float* bias = bias_.empty() ? nullptr : bias_.data();
  if (!packed_.empty() && k::PreferPacked(static_cast<int>(rows), packed_)) {
    k::GemmPacked(static_cast<int>(rows), x, d, packed_, bias, /*accumulate=*/false, logits, C);
  } else {
    k::GemmNT(static_cast<int>(rows), C, d, 1.0f, x, d, weight_.data(), d, 0.0f, logits, C);
    if (bias != nullptr) k::AddBias(logits, bias, rows, C);
  }
}

void ShortlistProjection::ScoreRow(const float* row, const float* x_row, int64_t r, StepScores* s) const {
  const int C = size(), V = c_.vocab_size, d = c_.d_model, kk = s->k;
  if (s->want_lse || s->want_logprobs) {
    k::LogSumExp(s->lse.data() + r, row, 1, C);
  } else {
    s->lse[r] = 0.0f;
  }
  if (s->want_logprobs) {
    float* lp = s->logprobs.data() + r * V;
    std::fill(lp, lp + V, -std::numeric_limits<float>::infinity());
    for (int i = 0; i < C; ++i) lp[ids_[i]] = row[i] - s->lse[r];
  }
  s->eos_logit[r] = row[position_[c_.eos_id]];
  if (!s->gather_offsets.empty()) {
    for (int32_t g = s->gather_offsets[r]; g < s->gather_offsets[r + 1]; ++g) {
      const int32_t id = s->gather_ids[g];
      if (position_[id] >= 0) {
        s->gather_logit[g] = row[position_[id]];
        continue;
      }
      const float* wrow = w_.output_projection.f32() + static_cast<int64_t>(id) * d;
      float dot = c_.final_logits_bias ? w_.final_logits_bias.f32()[id] : 0.0f;
      for (int i = 0; i < d; ++i) dot += x_row[i] * wrow[i];
      s->gather_logit[g] = dot;
    }
  }
  int32_t* top = s->top_id.data() + r * kk;
  k::TopK(s->top_logit.data() + r * kk, top, row, 1, C, kk, pad_position_);
  for (int i = 0; i < kk; ++i) top[i] = ids_[top[i]];
}

}  // namespace tnmt
