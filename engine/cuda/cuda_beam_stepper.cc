// CudaBeamStepper; see cuda_beam_stepper.h. One upload and one download per step, each a
// packed block: doubles first, then int32s.
#include "engine/cuda/cuda_beam_stepper.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/cuda/cuda_step_model.h"
#include "kernels/cuda/beam_step.h"
#include "kernels/cuda/check.h"

namespace tnmt {

namespace kc = kernels::cuda;

namespace {

// Copies `v` to `*at` and advances it.
template <typename T>
void Put(const std::vector<T>& v, char** at) {
  std::memcpy(*at, v.data(), v.size() * sizeof(T));
  *at += v.size() * sizeof(T);
}

template <typename T>
void Take(std::vector<T>* v, const char** at) {
  std::memcpy(v->data(), *at, v->size() * sizeof(T));
  *at += v->size() * sizeof(T);
}

}  // namespace

absl::Status CudaBeamStepper::Step(StepModel& model, const int32_t* ids, FlatBeamStep* st) {
  auto* m = dynamic_cast<CudaStepModel*>(&model);
  if (m == nullptr) return absl::FailedPreconditionError("the GPU beam step needs the CUDA engine's StepModel");
  const size_t S = static_cast<size_t>(st->sentences());
  const size_t rows = static_cast<size_t>(st->rows());
  const size_t slots = S * static_cast<size_t>(st->beam);
  const size_t in_bytes = (3 * S + rows) * sizeof(double) + 5 * S * sizeof(int32_t);
  const size_t out_bytes = (slots + S) * sizeof(double) + (2 * slots + 3 * S) * sizeof(int32_t);
  kc::Context& ctx = m->context();
  TNMT_RETURN_IF_ERROR(ctx.Activate());
  for (auto [buffer, bytes] : {std::pair{&in_, in_bytes}, std::pair{&out_, out_bytes}}) {
    if (buffer->bytes() >= bytes) continue;
    buffer->Reset();
    TNMT_ASSIGN_OR_RETURN(*buffer, ctx.allocator().Buffer(bytes));
  }
  TNMT_RETURN_IF_ERROR(up_.Ensure(in_bytes));
  TNMT_RETURN_IF_ERROR(down_.Ensure(out_bytes));
  // The decoder step, its log-sum-exp and top-k, queued; nothing comes back.
  TNMT_ASSIGN_OR_RETURN(const CudaStepModel::DeviceScores scores, m->StepOnDevice(ids, st->k));
  if (static_cast<size_t>(scores.rows) != rows) {
    return absl::InternalError(absl::StrCat("GPU beam step: the model has ", scores.rows, " rows, the step ", rows));
  }
  char* at = up_.as<char>();
  for (const std::vector<double>* v : {&st->lp_t, &st->lp_bound, &st->best, &st->score}) Put(*v, &at);
  for (const std::vector<int32_t>* v : {&st->row_begin, &st->live, &st->t, &st->max_len, &st->finished}) Put(*v, &at);
  cudaStream_t stream = ctx.stream();
  TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(in_.get(), up_.as<void>(), in_bytes, cudaMemcpyHostToDevice, stream)));

  kernels::BeamStepArgs a = st->Args(scores.lse, scores.eos_logit, scores.top_logit, scores.top_id);
  const double* din = in_.as<double>();
  a.lp_t = din;
  a.lp_bound = din + S;
  a.best = din + 2 * S;
  a.score = din + 3 * S;
  const int32_t* iin = reinterpret_cast<const int32_t*>(din + 3 * S + rows);
  a.row_begin = iin;
  a.live = iin + S;
  a.t = iin + 2 * S;
  a.max_len = iin + 3 * S;
  a.finished = iin + 4 * S;
  double* dout = out_.as<double>();
  a.next_score = dout;
  a.best_out = dout + slots;
  int32_t* iout = reinterpret_cast<int32_t*>(dout + slots + S);
  a.next_live = iout;
  a.parent = iout + S;
  a.token = iout + S + slots;
  a.finished_out = iout + S + 2 * slots;
  a.best_row = iout + 2 * S + 2 * slots;
  TNMT_RETURN_IF_ERROR(kc::BeamStep(stream, a));
  TNMT_RETURN_IF_ERROR(TNMT_CUDA_CHECK(cudaMemcpyAsync(down_.as<void>(), out_.get(), out_bytes, cudaMemcpyDeviceToHost, stream)));
  TNMT_RETURN_IF_ERROR(ctx.Synchronize());
  const char* from = down_.as<char>();
  Take(&st->next_score, &from);
  Take(&st->best_out, &from);
  Take(&st->next_live, &from);
  Take(&st->parent, &from);
  Take(&st->token, &from);
  Take(&st->finished_out, &from);
  Take(&st->best_row, &from);
  return absl::OkStatus();
}

}  // namespace tnmt
