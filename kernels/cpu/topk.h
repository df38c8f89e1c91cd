// Top-k over rows of logits on the CPU (the beam's candidate tokens per hypothesis). The CUDA
// kernel of the same operation is kernels/cuda/topk.h (TopK, the same arguments).
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// values, ids: [rows, k] = for each row of x: [rows, n], its k largest entries except index
// `exclude` (-1: none), best first; equal values in increasing index (a later equal value never
// displaces an earlier one). Fewer eligible entries than k: the rest are -inf with id `exclude`.
// Runs on the calling thread.
void TopK(float* values, int32_t* ids, const float* x, int64_t rows, int n, int k, int32_t exclude);

}  // namespace tnmt::kernels::cpu
