// CPU feature dispatch; see cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tnmt::kernels::cpu {

namespace {

bool DetectAvx512() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))) {
    return false;
  }
  const char* off = std::getenv("TNMT_NO_AVX512");
  return off == nullptr || std::strcmp(off, "1") != 0;
#else
  return false;
#endif
}

std::atomic<bool> g_allowed{true};

}  // namespace

bool UseAvx512() {
  static const bool detected = DetectAvx512();
  return detected && g_allowed.load(std::memory_order_relaxed);
}

void SetAvx512ForTesting(bool allow) { g_allowed.store(allow, std::memory_order_relaxed); }

}  // namespace tnmt::kernels::cpu
