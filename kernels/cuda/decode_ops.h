// GPU kernels of the decode path besides GEMM and attention: embeddings with positions, beam
// top-k over the vocabulary, and row gathers for reordering the KV cache (or its slot tables)
// after a beam step. Device pointers, outputs first, queued on the Context's stream; each returns a
// Status that names the failing launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/context.h"
#include "kernels/cuda/gemm.h"  // DType

namespace tnmt::kernels::cuda {

// out: [count, d] = table[ids[i]] * scale + pos[positions[i]] (pos may be null), as
// kernels/cpu EmbedTokens. table: [vocab, d] of table_type (float32, float16 or bfloat16, as
// stored in model.safetensors); pos: float32 [max_positions, d]; out float32. ids must already
// be validated to lie in [0, vocab).
absl::Status EmbedTokens(Context& ctx, float* out, const int32_t* ids, const int32_t* positions,
                         int64_t count, const void* table, DType table_type, const float* pos,
                         int d, float scale);

// table: [rows, d] sinusoidal positions, interleaved as kernels/cpu SinusoidalPositions
// (computed in double precision as there): table[p, 2i] = sin(p / 10000^(2i/d)),
// table[p, 2i+1] = cos(p / 10000^(2i/d)).
absl::Status SinusoidalPositions(Context& ctx, float* table, int rows, int d);

// The k largest entries of each row of x: [rows, n], best first; ties go to the lower index
// (the order of the engine's CPU beam search). values, ids: [rows, k]. Token `exclude` (e.g.
// the pad id; -1 for none) is never chosen. NaN ranks below every number. 1 <= k <= 256 and
// k <= the number of eligible tokens. Radix select (4 passes of 8 bits over the row), then the
// k winners are ranked in shared memory; one block per row.
constexpr int kMaxTopK = 256;
absl::Status TopK(Context& ctx, float* values, int32_t* ids, const float* x, int64_t rows, int n,
                  int k, int32_t exclude);

// dst row i = src row index[i] for i < rows: `row_bytes` bytes per row, rows `dst_stride` /
// `src_stride` bytes apart; dst and src must not overlap. Reorders KV-cache rows, or the
// decoder's per-row slot tables (int32 rows), after beams were chosen (index = parents).
absl::Status GatherRows(Context& ctx, void* dst, int64_t dst_stride, const void* src,
                        int64_t src_stride, const int32_t* index, int64_t rows, int64_t row_bytes);

}  // namespace tnmt::kernels::cuda
