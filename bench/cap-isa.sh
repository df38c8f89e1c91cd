# Sourced by the benchmark scripts (from the repository root). ISA=avx2 caps both engines at AVX2
# on an AVX-512 machine, to measure what CPUs without AVX-512 get: TNMT_CPU_ISA for tnmt; for
# CTranslate2 CT2_FORCE_CPU_ISA, which caps its own kernels, and the caps of both GEMM libraries
# it may pick: MKL_ENABLE_INSTRUCTIONS for MKL, its choice on Intel CPUs, and ONEDNN_MAX_CPU_ISA
# for oneDNN, its choice on AMD CPUs, which CT2_FORCE_CPU_ISA leaves at AVX-512.
# Usage: cap_isa SCRIPT_NAME (for the error message).
cap_isa() {
  if [[ "${ISA:-}" == avx2 ]]; then
    export TNMT_CPU_ISA=avx2 CT2_FORCE_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
  elif [[ -n "${ISA:-}" ]]; then
    echo "$1: ISA is avx2 or empty, not $ISA" >&2
    exit 2
  fi
}
