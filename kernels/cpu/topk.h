// Top-k of a row of logits (the beam's candidate tokens per hypothesis), on the CPU. The CUDA
// counterpart is kernels/cuda/decode_ops.h (TopK).
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// top_logit/top_id[0, k): the k largest entries of logits[0, vocab) except index `exclude`
// (-1: none), best first; equal values in increasing index (a later equal value never displaces
// an earlier one). Fewer eligible entries than k: the rest are -inf with id `exclude`.
void RowTopK(const float* logits, int vocab, int k, int32_t exclude, float* top_logit, int32_t* top_id);

}  // namespace tnmt::kernels::cpu
