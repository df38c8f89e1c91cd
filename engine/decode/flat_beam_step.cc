// FlatBeamStep and the host stepper; see flat_beam_step.h.
#include "engine/decode/flat_beam_step.h"

#include "engine/core/status_macros.h"

namespace tnmt {

void FlatBeamStep::SizeOutputs() {
  const size_t S = live.size();
  const size_t slots = S * static_cast<size_t>(beam);
  next_live.assign(S, 0);
  finished_out.assign(S, 0);
  best_row.assign(S, -1);
  best_out.assign(S, 0.0);
  parent.assign(slots, 0);
  token.assign(slots, 0);
  next_score.assign(slots, 0.0);
}

kernels::BeamStepArgs FlatBeamStep::Args(const float* lse, const float* eos_logit,
                                         const float* top_logit, const int32_t* top_id) {
  kernels::BeamStepArgs a;
  a.sentences = sentences();
  a.beam = beam;
  a.k = k;
  a.eos_id = eos_id;
  a.pad_id = pad_id;
  a.min_length = min_length;
  a.row_begin = row_begin.data();
  a.live = live.data();
  a.t = t.data();
  a.max_len = max_len.data();
  a.lp_t = lp_t.data();
  a.lp_bound = lp_bound.data();
  a.finished = finished.data();
  a.best = best.data();
  a.score = score.data();
  a.lse = lse;
  a.eos_logit = eos_logit;
  a.top_logit = top_logit;
  a.top_id = top_id;
  a.next_live = next_live.data();
  a.parent = parent.data();
  a.token = token.data();
  a.next_score = next_score.data();
  a.finished_out = finished_out.data();
  a.best_out = best_out.data();
  a.best_row = best_row.data();
  return a;
}

void SelectOnHost(const kernels::BeamStepArgs& a) {
  for (int s = 0; s < a.sentences; ++s) kernels::BeamStepSentence(a, s);
}

absl::Status HostFlatBeamStepper::Step(StepModel& model, const int32_t* ids, FlatBeamStep* step) {
  scores_.gather_offsets.clear();
  scores_.gather_ids.clear();
  scores_.alignment_layers.clear();
  scores_.want_logprobs = false;
  scores_.want_lse = step->want_lse;
  TNMT_RETURN_IF_ERROR(model.Step(ids, step->k, &scores_));
  if (scores_.rows != step->rows()) {
    return absl::InternalError("flat beam step: the model's rows differ from the step's");
  }
  SelectOnHost(step->Args(scores_.lse.data(), scores_.eos_logit.data(), scores_.top_logit.data(),
                          scores_.top_id.data()));
  return absl::OkStatus();
}

}  // namespace tnmt
