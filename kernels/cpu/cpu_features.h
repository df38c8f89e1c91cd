// Which hand-written instruction-set paths the CPU kernels may take (attention.cc, the packed
// GEMM in gemm_packed.cc). Three levels, chosen at run time from the CPU's features:
//   avx512   AVX-512 F/DQ/BW/VL (x86-64-v4): the packed GEMM's 14x32 kernel, AVX-512 attention
//   avx2     AVX2 + FMA (x86-64-v3): the packed GEMM's 6x16 kernel, AVX2 attention
//   portable everything else (the packed GEMM's portable kernel, portable attention), and
//            what tests force to check the others against
// The avx2 and avx512 packed GEMMs compute every output element with the same sequence of
// fused multiply-adds, so they give bit-identical results (gemm_test checks it).
#pragma once

namespace tnmt::kernels::cpu {

enum class CpuIsa { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

// The best level this CPU supports, capped by TNMT_CPU_ISA=portable|avx2|avx512 in the
// environment (read once; TNMT_NO_AVX512=1 is the same as TNMT_CPU_ISA=avx2) and by
// SetIsaForTesting. Never above what the CPU has.
CpuIsa ActiveIsa();
// What the CPU itself supports, before any cap.
CpuIsa DetectedIsa();
const char* IsaName(CpuIsa isa);  // "portable", "avx2", "avx512"

// True when ActiveIsa() is avx512 / at least avx2.
bool UseAvx512();
bool UseAvx2();
// Whether the CPU has AVX-512 VNNI (the int8 GEMM's fastest kernel; used when UseAvx512()).
bool HasAvx512Vnni();
// Whether the CPU has AVX-512 BF16 (the bfloat16 training GEMM's kernel; used when UseAvx512()).
bool HasAvx512Bf16();
// Whether the CPU has AMX-TILE and AMX-INT8 and the operating system lets this process use the
// tile registers (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA), asked once).
bool HasAmxInt8();
// Whether the int8 GEMM runs on AMX: UseAvx512(), HasAmxInt8(), and not turned off by
// TNMT_NO_AMX=1 in the environment (read once) or SetAmxForTesting(false). AMX computes the
// same integer sums as VNNI, so the results are the same bit for bit.
bool UseAmxInt8();
// The same for AMX-BF16 (and AVX-512 BF16): the bfloat16 training GEMM's tile kernel, used
// under the same conditions (UseAvx512(), not TNMT_NO_AMX=1 or SetAmxForTesting(false)).
bool HasAmxBf16();
bool UseAmxBf16();
// The int8 GEMM's kernel under the active level: "avx512-amx", "avx512-vnni", "avx2" or
// "portable".
const char* Int8KernelName();

// Tests: caps the level at `cap` (never raises it above the CPU's); kAvx512 restores detection.
void SetIsaForTesting(CpuIsa cap);
// Tests: false caps the level at avx2, true restores detection.
void SetAvx512ForTesting(bool allow);
// Tests: false keeps the int8 and bfloat16 GEMMs off AMX, true restores detection.
void SetAmxForTesting(bool allow);

}  // namespace tnmt::kernels::cpu
