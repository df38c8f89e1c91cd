// CounterUniform: the stateless random number behind dropout, one definition for the CPU and
// the CUDA kernels (compiled by both g++ and nvcc), so that both devices drop exactly the same
// elements for the same (seed, stream, index).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TNMT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TNMT_HOST_DEVICE inline
#endif

namespace tnmt::kernels {

// The hash's constants, for vectorized copies of it (the CPU kernels' AVX2 dropout).
constexpr uint64_t kCounterStep = 0x9e3779b97f4a7c15ull;  // the input advances by this per index
constexpr uint64_t kCounterMix1 = 0xbf58476d1ce4e5b9ull;
constexpr uint64_t kCounterMix2 = 0x94d049bb133111ebull;

// The hash input of index 0 for (seed, stream); index i's is this + i * kCounterStep.
TNMT_HOST_DEVICE uint64_t CounterStart(uint64_t seed, uint64_t stream) {
  return seed * kCounterStep ^ (stream + 0x632be59bd9b4e019ull) * kCounterMix1;
}

// Uniform in [0, 1) with 24 bits from (seed, stream, index): a SplitMix64-style hash, no state.
TNMT_HOST_DEVICE float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = CounterStart(seed, stream) + index * kCounterStep;
  z = (z ^ (z >> 30)) * kCounterMix1;
  z = (z ^ (z >> 27)) * kCounterMix2;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace tnmt::kernels
