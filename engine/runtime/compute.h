// Process-wide CPU compute settings, for programs: the thread count every CPU kernel uses and
// the names of the kernel paths this CPU runs (what `tnmt --version` reports).
#pragma once

#include <string>

namespace tnmt {

// Sets the compute threads (tnmt's own kernels and OpenBLAS) for the whole process; call once,
// before anything computes.
void SetCpuThreads(int threads);

// The CPU kernel paths in use, e.g. "avx512, int8: avx512-vnni, bfloat16 training: avx512-bf16"
// (TNMT_CPU_ISA may cap them).
std::string CpuKernels();

}  // namespace tnmt
