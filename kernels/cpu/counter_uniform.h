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

// Uniform in [0, 1) with 24 bits from (seed, stream, index): a SplitMix64-style hash, no state.
TNMT_HOST_DEVICE float CounterUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull ^ (stream + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull;
  z += index * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace tnmt::kernels
