// CPU feature dispatch; see cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace tnmt::kernels::cpu {

namespace {

CpuIsa Detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    return CpuIsa::kAvx512;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
#endif
  return CpuIsa::kPortable;
}

// The environment's cap: TNMT_CPU_ISA, else TNMT_NO_AVX512=1, else none.
CpuIsa EnvironmentCap() {
  if (const char* isa = std::getenv("TNMT_CPU_ISA")) {
    if (std::strcmp(isa, "portable") == 0) return CpuIsa::kPortable;
    if (std::strcmp(isa, "avx2") == 0) return CpuIsa::kAvx2;
  }
  const char* off = std::getenv("TNMT_NO_AVX512");
  if (off != nullptr && std::strcmp(off, "1") == 0) return CpuIsa::kAvx2;
  return CpuIsa::kAvx512;
}

std::atomic<int> g_test_cap{static_cast<int>(CpuIsa::kAvx512)};

}  // namespace

CpuIsa DetectedIsa() {
  static const CpuIsa detected = Detect();
  return detected;
}

CpuIsa ActiveIsa() {
  static const CpuIsa environment = std::min(DetectedIsa(), EnvironmentCap());
  return std::min(environment, static_cast<CpuIsa>(g_test_cap.load(std::memory_order_relaxed)));
}

const char* IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kPortable:
      break;
  }
  return "portable";
}

bool UseAvx512() { return ActiveIsa() == CpuIsa::kAvx512; }
bool UseAvx2() { return ActiveIsa() >= CpuIsa::kAvx2; }

bool HasAvx512Vnni() {
#if defined(__x86_64__)
  static const bool vnni = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512vnni");
  }();
  return vnni;
#else
  return false;
#endif
}

bool HasAvx512Bf16() {
#if defined(__x86_64__)
  static const bool bf16 = [] {
    __builtin_cpu_init();
    return DetectedIsa() == CpuIsa::kAvx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return bf16;
#else
  return false;
#endif
}

const char* Int8KernelName() {
  if (UseAvx512() && HasAvx512Vnni()) return "avx512-vnni";
  return UseAvx2() ? "avx2" : "portable";
}

void SetIsaForTesting(CpuIsa cap) { g_test_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

void SetAvx512ForTesting(bool allow) { SetIsaForTesting(allow ? CpuIsa::kAvx512 : CpuIsa::kAvx2); }

}  // namespace tnmt::kernels::cpu
