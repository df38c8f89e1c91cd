// CPU feature dispatch; see cpu_features.h.
#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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
std::atomic<bool> g_test_amx{true};

// CPUID leaf 7's EDX bits of AMX: AMX-BF16, AMX-TILE, AMX-INT8.
constexpr unsigned kAmxBf16Bit = 22, kAmxTileBit = 24, kAmxInt8Bit = 25;

// Whether the CPU has AMX-TILE and the AMX feature `bit` (CPUID leaf 7), and the kernel grants
// this process the tile data state (Linux 5.16 and later, on request; asked once; elsewhere
// not asked, so no AMX).
bool DetectAmx(unsigned bit) {
#if defined(__x86_64__) && defined(__linux__)
  static const unsigned features = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0 || ((edx >> kAmxTileBit) & 1u) == 0) return 0u;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0 ? edx : 0u;
  }();
  return ((features >> bit) & 1u) != 0;
#else
  (void)bit;
  return false;
#endif
}

bool AmxAllowed() {
  static const bool environment_off = [] {
    const char* off = std::getenv("TNMT_NO_AMX");
    return off != nullptr && std::strcmp(off, "1") == 0;
  }();
  return !environment_off && g_test_amx.load(std::memory_order_relaxed);
}

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

bool HasAmxInt8() {
  static const bool amx = DetectedIsa() == CpuIsa::kAvx512 && HasAvx512Vnni() && DetectAmx(kAmxInt8Bit);
  return amx;
}

bool UseAmxInt8() { return UseAvx512() && HasAmxInt8() && AmxAllowed(); }

bool HasAmxBf16() {
  static const bool amx = HasAvx512Bf16() && DetectAmx(kAmxBf16Bit);
  return amx;
}

bool UseAmxBf16() { return UseAvx512() && HasAmxBf16() && AmxAllowed(); }

const char* Int8KernelName() {
  if (UseAmxInt8()) return "avx512-amx";
  if (UseAvx512() && HasAvx512Vnni()) return "avx512-vnni";
  return UseAvx2() ? "avx2" : "portable";
}

void SetIsaForTesting(CpuIsa cap) { g_test_cap.store(static_cast<int>(cap), std::memory_order_relaxed); }

void SetAvx512ForTesting(bool allow) { SetIsaForTesting(allow ? CpuIsa::kAvx512 : CpuIsa::kAvx2); }

void SetAmxForTesting(bool allow) { g_test_amx.store(allow, std::memory_order_relaxed); }

}  // namespace tnmt::kernels::cpu
