// EnsembleStepModel; see ensemble_step_model.h.
#include "engine/decode/ensemble_step_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "kernels/cpu/parallel.h"

namespace tnmt {

EnsembleStepModel::EnsembleStepModel(std::vector<std::unique_ptr<StepModel>> members, int vocab_size,
                                     int pad_id, int eos_id)
    : members_(std::move(members)), vocab_size_(vocab_size), pad_id_(pad_id), eos_id_(eos_id),
      member_scores_(members_.size()) {
  for (StepScores& ms : member_scores_) ms.want_logprobs = true;  // never anything gathered
}

absl::StatusOr<std::unique_ptr<EnsembleStepModel>> EnsembleStepModel::Create(
    std::vector<std::unique_ptr<StepModel>> members, int vocab_size, int pad_id, int eos_id) {
  if (members.empty()) return absl::InvalidArgumentError("an ensemble needs at least one model");
  for (const auto& m : members) {
    if (m == nullptr) return absl::InvalidArgumentError("an ensemble member is null");
    if (m->rows() != 0) return absl::InvalidArgumentError("ensemble members must start empty");
  }
  if (vocab_size < 2 || eos_id < 0 || eos_id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("ensemble vocabulary of ", vocab_size, " tokens with </s> id ", eos_id));
  }
  return std::unique_ptr<EnsembleStepModel>(new EnsembleStepModel(std::move(members), vocab_size, pad_id, eos_id));
}

absl::StatusOr<std::vector<int32_t>> EnsembleStepModel::AddSources(const int32_t* ids, const int32_t* lengths,
                                                                   int batch, int src_max) {
  std::vector<std::vector<int32_t>> per_member;
  for (size_t m = 0; m < members_.size(); ++m) {
    absl::StatusOr<std::vector<int32_t>> got = members_[m]->AddSources(ids, lengths, batch, src_max);
    if (!got.ok()) {
      // Leave no member holding sources the others do not.
      for (size_t j = 0; j < per_member.size(); ++j) {
        for (int32_t id : per_member[j]) (void)members_[j]->ReleaseSource(id);
      }
      return got.status();
    }
    per_member.push_back(*std::move(got));
  }
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t>& others = sources_[per_member[0][b]];
    others.clear();
    for (size_t m = 1; m < members_.size(); ++m) others.push_back(per_member[m][b]);
  }
  return per_member[0];
}

absl::Status EnsembleStepModel::ReleaseSource(int32_t source) {
  auto it = sources_.find(source);
  if (it == sources_.end()) return absl::InvalidArgumentError(absl::StrCat("source ", source, " is not live"));
  absl::Status status = members_[0]->ReleaseSource(source);
  for (size_t m = 1; m < members_.size(); ++m) status.Update(members_[m]->ReleaseSource(it->second[m - 1]));
  sources_.erase(it);
  return status;
}

absl::Status EnsembleStepModel::Reorder(const std::vector<int32_t>& parents,
                                        const std::vector<int32_t>& new_sources) {
  std::vector<std::vector<int32_t>> mapped(members_.size());
  mapped[0] = new_sources;
  for (int32_t src : new_sources) {
    auto it = sources_.find(src);
    if (it == sources_.end()) return absl::InvalidArgumentError(absl::StrCat("source ", src, " is not live"));
    for (size_t m = 1; m < members_.size(); ++m) mapped[m].push_back(it->second[m - 1]);
  }
  for (size_t m = 0; m < members_.size(); ++m) TNMT_RETURN_IF_ERROR(members_[m]->Reorder(parents, mapped[m]));
  return absl::OkStatus();
}

absl::Status EnsembleStepModel::Step(const int32_t* ids, int k, StepScores* s) {
  const int rows = this->rows();
  const int V = vocab_size_;
  TNMT_RETURN_IF_ERROR(s->Reset(rows, k, V));
  TNMT_RETURN_IF_ERROR(s->CheckGather(rows, V));
  for (size_t m = 0; m < members_.size(); ++m) {
    StepScores& ms = member_scores_[m];
    if (m == 0) ms.alignment_layers = s->alignment_layers;  // the others' stay empty
    TNMT_RETURN_IF_ERROR(members_[m]->Step(ids, 1, &ms));
    if (ms.rows != rows || ms.logprobs.size() != static_cast<size_t>(rows) * V) {
      return absl::InternalError(absl::StrCat("ensemble member ", m, " returned ", ms.rows, " rows of ",
                                              rows == 0 ? 0 : ms.logprobs.size() / rows, " log-probabilities for ",
                                              rows, " rows of ", V));
    }
  }
  const float inv = 1.0f / static_cast<float>(members_.size());
  mean_.resize(static_cast<size_t>(rows) * V);
  if (s->want_logprobs) s->logprobs.resize(static_cast<size_t>(rows) * V);
  kernels::cpu::ParallelFor(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = mean_.data() + r * V;
      // Members added in order, then scaled: the same values whatever the batch or threads.
      const float* first = member_scores_[0].logprobs.data() + r * V;
      for (int v = 0; v < V; ++v) row[v] = first[v];
      for (size_t m = 1; m < members_.size(); ++m) {
        const float* lp = member_scores_[m].logprobs.data() + r * V;
        for (int v = 0; v < V; ++v) row[v] += lp[v];
      }
      for (int v = 0; v < V; ++v) row[v] *= inv;
      ScoreRow(row, r, V, eos_id_, pad_id_, s);  // as the CPU engine scores its logits
    }
  });
  s->aligned = member_scores_[0].aligned;
  return absl::OkStatus();
}

}  // namespace tnmt
