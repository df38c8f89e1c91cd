// Which hand-written instruction-set paths the CPU kernels may take (attention.cc, the packed
// GEMM in gemm.cc). The hand-written paths are AVX-512 only; every kernel keeps a portable
// path that other CPUs run and that tests can force.
#pragma once

namespace tnmt::kernels::cpu {

// True when the CPU has AVX-512 F/DQ/BW/VL (x86-64-v4) and the AVX-512 paths are allowed:
// TNMT_NO_AVX512=1 in the environment (read once) or SetAvx512ForTesting(false) turn them off.
bool UseAvx512();

// Tests: false forces the portable paths, true restores detection (true never enables AVX-512
// on a CPU without it).
void SetAvx512ForTesting(bool allow);

}  // namespace tnmt::kernels::cpu
