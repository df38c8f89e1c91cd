// Token embeddings and sinusoidal position tables on the CPU (the CUDA kernels of the same
// names: kernels/cuda/embedding.h), and the embedding's gradient. Raw pointers, outputs first,
// row-major.
#pragma once

#include <cstdint>

namespace tnmt::kernels::cpu {

// out: [count, d] = table[ids[i]] * scale + pos[positions[i]] (pos may be null).
// ids must already be validated to lie in [0, vocab).
void EmbedTokens(float* out, const int32_t* ids, const int32_t* positions, int64_t count,
                 const float* table, const float* pos, int d, float scale);

// table: [rows, d] sinusoidal positions, interleaved as the paper:
// table[p, 2i] = sin(p / 10000^(2i/d)), table[p, 2i+1] = cos(p / 10000^(2i/d)).
void SinusoidalPositions(float* table, int rows, int d);
// table: [rows, d] the same sines and cosines in halves (Marian's layout, d even):
// table[p, i] = sin(p / 10000^(2i/d)), table[p, d/2 + i] = cos(p / 10000^(2i/d)).
void SinusoidalPositionsHalves(float* table, int rows, int d);

// dtable[ids[i]] += scale * dx[i]; dpos[positions[i]] += dx[i] (dpos may be null).
void EmbeddingBackward(float* dtable, float* dpos, const float* dx, const int32_t* ids,
                       const int32_t* positions, int64_t count, int d, float scale);

}  // namespace tnmt::kernels::cpu
