// Training forward and backward of the whole encoder-decoder for one batch on the CPU: the
// training graph (train_graph.h) over kernels/cpu, gradients accumulated (+=) into a
// ModelWeights-shaped gradient. No general autograd: each sub-layer has its forward/backward
// pair in the graph and its kernels in kernels/cpu (elementwise.h, attention.h, embedding.h,
// loss.h, dropout.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "trainer/model/train_graph.h"

namespace tnmt::train {

// A padded batch. src: [batch, src_len] (ids + eos, pad after src_lengths[b]);
// tgt_in: [batch, tgt_len] (bos + ids); tgt_out: [batch, tgt_len] (ids + eos), pad = ignored.
struct TrainBatch {
  int batch = 0;
  int src_len = 0;
  int tgt_len = 0;
  std::vector<int32_t> src;
  std::vector<int32_t> src_lengths;
  std::vector<int32_t> tgt_in;
  std::vector<int32_t> tgt_out;
};

struct TrainStepOptions {
  float dropout = 0.1f;             // on embeddings+positions and on every sub-layer output
  float attention_dropout = 0.0f;   // on the attention probabilities
  float activation_dropout = 0.0f;  // on the feed-forward's hidden layer after the activation
  float label_smoothing = 0.1f;     // ε
  // R-Drop (Liang et al., 2021): with alpha > 0 the batch must be DoubleForRDrop's, and
  // alpha / 2 * (KL(p1 || p2) + KL(p2 || p1)) between the two copies' output distributions is
  // added to the loss for each non-pad target (to the reported loss sum too).
  float rdrop_alpha = 0.0f;
  uint64_t dropout_seed = 0;        // masks depend on (seed, site, element) only
  // The linears' and the output projection's GEMMs, forward and backward, round their operands
  // to bfloat16 and sum in float32 (kernels::cpu::GemmBf16; weights, gradients, activations and
  // everything else stay float32). Fast only where kernels::cpu::HasBf16Gemm().
  bool bfloat16_gemms = false;

  DropoutRates rates() const { return {dropout, attention_dropout, activation_dropout}; }
};

struct LossStats {
  double loss_sum = 0.0;  // label-smoothed, summed over target tokens
  double nll_sum = 0.0;   // negative log-likelihood, summed
  int64_t tokens = 0;     // non-pad target tokens
};

// Forward + backward of the summed loss; gradients are added to *grads (which must mirror
// `params`, e.g. from ZerosLike). `loss_scale` multiplies the loss before differentiation
// (e.g. 1/tokens to average).
absl::StatusOr<LossStats> ForwardBackward(const ModelConfig& c, const ModelWeights& params,
                                          const TrainBatch& batch, const TrainStepOptions& options,
                                          float loss_scale, ModelWeights* grads);

// Forward only (no dropout): the loss of a batch, for validation.
absl::StatusOr<LossStats> EvaluateLoss(const ModelConfig& c, const ModelWeights& params,
                                       const TrainBatch& batch, float label_smoothing);

// The batch twice over, [b; b] (batch 2 * b.batch), for TrainStepOptions::rdrop_alpha: dropout
// masks depend on the element, so the two copies of a sentence see different masks.
TrainBatch DoubleForRDrop(const TrainBatch& b);
// InvalidArgument unless b's second half repeats its first (what rdrop_alpha > 0 needs).
absl::Status CheckDoubledForRDrop(const TrainBatch& b);

// Tests: fill every new training buffer with NaN (instead of leaving it uninitialized), so
// that an operation reading memory it did not write shows in the results.
void PoisonNewBuffersForTesting(bool on);

absl::Status ValidateBatch(const ModelConfig& c, const TrainBatch& batch);

}  // namespace tnmt::train
