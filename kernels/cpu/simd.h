// Helpers for vectorized CPU loops: a target_clones attribute (one build runs AVX-512, AVX2 or
// baseline code, chosen at load time by the CPU) and an exp that vectorizes (no libm call).
#pragma once

#include <cstdint>
#include <cstring>

// Hot loops are compiled three times and dispatched by CPU features.
#define TNMT_VECTORIZE __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))

namespace tnmt::kernels::cpu {

// exp(x) in float to ~2 ulp (Cody-Waite reduction and a degree-6 polynomial, as Cephes'
// expf). Returns exactly 0 for x below -87.3 (including -inf) and saturates above 88.7.
inline float ExpApprox(float x) {
  const bool underflow = x < -87.33654f;
  x = x > 88.72283f ? 88.72283f : (x < -87.33654f ? -87.33654f : x);
  float n = x * 1.44269504088896341f;
  n = static_cast<float>(static_cast<int32_t>(n + (n >= 0.0f ? 0.5f : -0.5f)));
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return underflow ? 0.0f : p * scale;
}

}  // namespace tnmt::kernels::cpu
