// Token embeddings, sinusoidal position tables and the embedding's gradient on the GPU, with
// the semantics of kernels/cpu/embedding.h. Device pointers, outputs first, queued on the
// Context's stream; each returns a Status that names the failing launch.
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

// dtable[ids[i]] += scale * dx[i]; dpos[positions[i]] += dx[i] (dpos may be null; then
// positions is not read). dx: [count, d]; ids, positions: device [count], valid rows.
// Deterministic without atomics and without a host round trip: the token indices are
// stable-sorted by id on the device (CUB radix sort), then one block per distinct id adds its
// rows in token order — the CPU's order, so each row of dtable sees the same sequence of
// additions. The same for positions. Scratch: about 4 * count int32 plus CUB's temporary.
absl::Status EmbeddingBackward(Context& ctx, float* dtable, float* dpos, const float* dx,
                               const int32_t* ids, const int32_t* positions, int64_t count, int d,
                               float scale);

}  // namespace tnmt::kernels::cuda
