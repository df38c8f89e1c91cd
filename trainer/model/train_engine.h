// TrainEngine: one device's part of a training step, so that the train loop (data, schedule,
// logging, validation, checkpoints) is the same on the CPU and on GPUs. One update is
//
//   BeginStep(k); k x ForwardBackward(micro-batch); AllReduce(stop) -> totals;
//   [GradNorm()]; AdamStep(lr, grad_scale)
//
// Parameters, gradients and Adam moments live where the engine computes (host memory for the
// CPU engine, device memory for CUDA); Snapshot() gives host copies for checkpoints and
// validation. Gradients are of the summed (not averaged) loss; the loop scales them in AdamStep.
//
// Invariants: every rank of the data-parallel group makes the same sequence of calls with the
// same arguments, except the batches and `stop`; after AllReduce the gradients and the totals
// are identical on every rank, and so are the parameters after AdamStep.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "kernels/time_account.h"
#include "trainer/collective/collective.h"
#include "trainer/model/transformer_train.h"
#include "trainer/train_config.h"

namespace tnmt::train {

// One update's loss sums over its micro-batches and over every rank.
struct StepTotals {
  double loss_sum = 0.0;  // label-smoothed loss, summed over target tokens
  double nll_sum = 0.0;
  double tokens = 0.0;    // non-pad target tokens
  bool stop = false;      // some rank asked to stop (AllReduce's `stop` on any rank)
  bool save = false;      // some rank found a checkpoint due (AllReduce's `save` on any rank)
};

// Host views of the training state, owned by the engine; valid until its next call.
struct HostState {
  const ModelWeights* params = nullptr;
  const ModelWeights* adam_m = nullptr;
  const ModelWeights* adam_v = nullptr;
  int64_t adam_step = 0;  // Adam updates applied (the bias-correction counter)
};

struct TrainEngineOptions {
  TrainDevice device;                                  // default: the CPU
  TrainPrecision precision = TrainPrecision::kFloat32;  // half precision: cuda only
  // The data-parallel group (never null). Its operations run on the host; the CUDA engine with
  // more than one rank uses it only to set up NCCL, which then does every per-step reduction.
  Collective* collective = nullptr;
  // float16 only: dynamic loss scaling. The scale starts here, halves (and the update is
  // skipped) when the gradients are not finite, and doubles after `loss_scale_window`
  // consecutive good updates. The loss is summed over the batch's tokens (not averaged), so
  // each token's logit gradient is O(1) before scaling, as large as a mean-loss trainer's
  // gradient times its token count: a small start (2^3) keeps float16 activation gradients
  // finite from the first update, where 2^15 would overflow and skip about a dozen updates.
  double initial_loss_scale = 8.0;
  int loss_scale_window = 2000;
  // Multi-GPU: gradients are all-reduced in buckets of about this many bytes, each started as
  // soon as the backward has finished the layers it covers.
  int64_t bucket_bytes = int64_t{25} << 20;
  // CUDA: set up NCCL and the bucketed, overlapped all-reduce even with one rank (a one-GPU
  // machine can then exercise that path; the sums are the rank's own values).
  bool force_nccl = false;
};

class TrainEngine {
 public:
  virtual ~TrainEngine() = default;

  // For logs, e.g. "cpu, float32" or "cuda:0 (NVIDIA H200), bfloat16, 8 ranks over NCCL".
  virtual std::string Describe() const = 0;

  // Starts an update of `micro_batches` ForwardBackward calls: gradients and loss sums to zero.
  virtual absl::Status BeginStep(int micro_batches) = 0;

  // Forward and backward of one micro-batch (dropout as `options` says); gradients of its
  // summed loss are added to the update's, its loss sums to the update's. May return before
  // the device has finished (errors of queued work surface at the next synchronizing call).
  virtual absl::Status ForwardBackward(const TrainBatch& batch, const TrainStepOptions& options) = 0;

  // Sums the gradients and loss sums over the ranks, with the stop requests and the ranks'
  // "checkpoint due" flags (each rank reads its own clock; this makes them agree); returns the
  // totals.
  virtual absl::StatusOr<StepTotals> AllReduce(bool stop, bool save = false) = 0;

  // sqrt(sum of squares) of the summed gradients (after AllReduce; not scaled by a loss
  // scale). Not finite when the gradients are not.
  virtual absl::StatusOr<double> GradNorm() = 0;

  // One Adam update with learning rate `lr`, the gradients multiplied by `grad_scale` first.
  // Returns false when the update was skipped: float16 gradients that are not finite (the loss
  // scale was halved); the parameters, moments and Adam's step counter are then unchanged.
  virtual absl::StatusOr<bool> AdamStep(double lr, float grad_scale) = 0;

  // The current float16 loss scale; 1 for other precisions.
  virtual double loss_scale() const { return 1.0; }

  // Forward only, no dropout: the loss sums of one batch (validation). Synchronizes.
  virtual absl::StatusOr<LossStats> EvaluateLoss(const TrainBatch& batch, float label_smoothing) = 0;

  // Host copies of the parameters and Adam moments as of the last update.
  virtual absl::StatusOr<HostState> Snapshot() = 0;

  // Copies the current gradients into `out` (ModelWeights-shaped, e.g. from ZerosLike). Tests.
  virtual absl::Status CopyGradients(ModelWeights* out) = 0;

  // Device time since the previous call, by category (kernels/time_account.h), when the engine
  // times its device work (the CUDA engine with TNMT_GPU_TIMING=1; waits for the device);
  // otherwise an empty account.
  virtual absl::StatusOr<kernels::TimeAccount> TakeDeviceTimes() { return kernels::TimeAccount{}; }
};

}  // namespace tnmt::train
